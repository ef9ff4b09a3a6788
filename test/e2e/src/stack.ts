import { PassThrough } from "node:stream";
import Anthropic from "@anthropic-ai/sdk";
import { startBudget } from "@holdfast/budget";
import type { Bus, Principal } from "@holdfast/bus";
import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { describeRun, type RunView } from "@holdfast/events";
import { type FakeProvider, type FakeProviderOptions, startFakeProvider } from "@holdfast/fake-provider";
import { type GatewayFeature, startGateway } from "@holdfast/gateway";
import { createLogger } from "@holdfast/log";
import { startProjector } from "@holdfast/projector";
import { launchNatsServer, makeTempDir, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { connectAs, makeCredentials, type TestCredentials } from "./secured.js";

export interface Stack {
  provider: FakeProvider;
  /** The stack's configuration, with no NATS credential: `configFor` gives a service its own. */
  config: Config;
  /** The configuration a service runs with: `config` with its principal's NATS credential. */
  configFor(principal: Principal): Config;
  /** A connection to the stack's log as `principal` (an operator's commands go as "control"). */
  connect(principal: Principal): Promise<Bus>;
  /** Each principal's NATS credential file; undefined on a server without authorization. */
  credentials: TestCredentials | undefined;
  /** Base URL agents use: http://127.0.0.1:PORT/v1. */
  gatewayUrl: string;
  analyticsUrl: string;
  /** The admin's connection to the same event log: it reads everything, and may write anything. */
  bus: Bus;
  /** Everything the gateway and projector logged, as written. */
  logs(): string;
  client(options?: { apiKey?: string; headers?: Record<string, string> }): OpenAI;
  /** The official Anthropic SDK pointed at the gateway (its base URL is the origin: it adds /v1). */
  anthropic(options?: { apiKey?: string; headers?: Record<string, string> }): Anthropic;
  /** The run folded from JetStream, as `holdfast show` sees it. */
  run(runId: string): Promise<RunView>;
  /** Waits until the run has `steps` finished steps (outcomes are recorded after the response). */
  settled(runId: string, steps: number): Promise<RunView>;
  sql<T = Record<string, unknown>>(query: string): Promise<T[]>;
  /** Another gateway on the same event log (e.g. with another upstream); closed with the stack. */
  extraGateway(
    gateway: DeepPartial<Config["gateway"]>,
  ): Promise<{ client(headers?: Record<string, string>): OpenAI; baseUrl: string; close(): Promise<void> }>;
  close(): Promise<void>;
}

export const API_KEY = "sk-test-0123456789abcdefghijklmnop";

/**
 * The whole data path in this process, on real infrastructure: the harness's nats-server,
 * embedded ClickHouse in a temp dir, the gateway and the projector as `holdfast up` wires
 * them, and the fake provider as the upstream.
 */
export async function startStack(
  options: {
    config?: DeepPartial<Config>;
    provider?: FakeProviderOptions;
    /** Features the gateway runs at its pipeline's hooks. */
    features?: GatewayFeature[];
    /**
     * Where the event log lives. Default: a nats-server of the stack's own that admits only
     * its principals, each with its permissions, as `holdfast up` runs one.
     */
    nats?: { url: string; replicas?: number; prefix?: string; credentials?: TestCredentials };
    /** The max_payload of the stack's own nats-server (its default is 1 MiB). */
    natsMaxPayload?: number;
    /**
     * How the fake provider's windows refill, as its operator would declare it
     * (predict.window_shapes for its origin); unset: learnt from its readings.
     */
    windowShape?: "continuous" | "fixed";
  } = {},
): Promise<Stack> {
  const dir = await makeTempDir("stack");
  const prefix = options.nats?.prefix ?? uniqueNamespace("e2e");
  let server: Awaited<ReturnType<typeof launchNatsServer>> | undefined;
  let credentials = options.nats?.credentials;
  if (options.nats === undefined) {
    credentials = await makeCredentials(dir.path, {
      prefix,
      projectorConsumer: options.config?.projector?.consumer ?? "projector",
    });
    server = await launchNatsServer({
      label: "stack",
      accounts: credentials.accounts,
      ...(options.natsMaxPayload === undefined ? {} : { maxPayload: options.natsMaxPayload }),
    });
  }
  const nats = options.nats ?? { url: server!.url };
  const provider = await startFakeProvider(options.provider ?? {});
  const config = loadConfig({
    env: {},
    overrides: {
      ...options.config,
      data_dir: dir.path,
      log_level: "debug",
      nats: { url: nats.url, replicas: nats.replicas, prefix },
      gateway: { port: 0, upstream: `${provider.url}/v1`, ...options.config?.gateway },
      ...(options.windowShape === undefined
        ? {}
        : {
            predict: {
              ...options.config?.predict,
              window_shapes: {
                ...options.config?.predict?.window_shapes,
                [provider.url]: options.windowShape,
              },
            },
          }),
      // A short linger keeps tests that read ClickHouse quick; ack_wait stays above twice it.
      projector: {
        port: 0,
        batch_size: 100,
        ack_wait_ms: 2_000,
        linger_ms: 200,
        ...options.config?.projector,
      },
    },
  });
  const configFor = (principal: Principal): Config => ({
    ...config,
    nats: { ...config.nats, credentials: credentials?.files[principal] },
  });
  const connect = (principal: Principal) =>
    connectAs(principal, { servers: nats.url, prefix, replicas: nats.replicas, credentials });
  // The admin makes the log and the buckets, as `holdfast up` does before any service starts.
  const bus = await connect("admin");
  await bus.provision();
  await bus.provisionBuckets();
  const captured: string[] = [];
  const destination = new PassThrough();
  destination.on("data", (chunk: Buffer) => captured.push(chunk.toString()));
  // Budgets across runs and the fleet's shared rate-limit windows need the budget service,
  // which gateways find at budget.url (as `holdfast up` starts it).
  const budget =
    Object.keys(config.budgets).length === 0 && !(config.predict.enabled && config.predict.shared)
      ? undefined
      : await startBudget(configFor("budget"), createLogger({ name: "budget", level: "trace", destination }));
  if (budget !== undefined) config.budget.url = budget.address;
  const gateway = await startGateway(
    configFor("gateway"),
    createLogger({ name: "gateway", level: "trace", destination }),
    {
      features: options.features,
    },
  );
  const projector = await startProjector(
    configFor("projector"),
    createLogger({ name: "projector", level: "trace", destination }),
  );
  const extras: { close(): Promise<void> }[] = [];
  const clientFor = (baseURL: string, apiKey: string, headers?: Record<string, string>) =>
    new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 20_000, defaultHeaders: headers });

  const stack: Stack = {
    provider,
    config,
    configFor,
    connect,
    credentials,
    gatewayUrl: gateway.baseUrl,
    analyticsUrl: projector.url,
    bus,
    logs: () => captured.join(""),
    client: (o = {}) => clientFor(gateway.baseUrl, o.apiKey ?? API_KEY, o.headers),
    anthropic: (o = {}) =>
      new Anthropic({
        apiKey: o.apiKey ?? API_KEY,
        baseURL: new URL(gateway.baseUrl).origin,
        maxRetries: 0,
        timeout: 20_000,
        defaultHeaders: o.headers,
      }),
    run: async (runId) => describeRun(runId, await bus.readRun(runId)),
    settled: (runId, steps) =>
      waitFor(
        async () => {
          const state = await stack.run(runId);
          return state.completed + state.failed >= steps && state.inFlight === 0 ? state : undefined;
        },
        { timeoutMs: 10_000, message: `run ${runId} did not record ${steps} finished steps` },
      ),
    sql: async <T>(query: string) => {
      const token = config.control.read_token ?? config.control.token;
      const response = await fetch(`${projector.url}/v1/query`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
        },
        body: JSON.stringify({ sql: query }),
      });
      const body = (await response.json()) as { rows: T[]; error?: { message: string } };
      if (!response.ok) throw new Error(body.error?.message);
      return body.rows;
    },
    extraGateway: async (overrides) => {
      const extra = await startGateway(
        loadConfig({
          env: {},
          overrides: { ...configFor("gateway"), gateway: { ...config.gateway, port: 0, ...overrides } },
        }),
        createLogger({ name: "gateway-extra", level: "trace", destination }),
      );
      // Closed once, whether by the test or with the stack.
      const closing = { promise: undefined as Promise<void> | undefined };
      const close = () => {
        closing.promise ??= extra.close();
        return closing.promise;
      };
      extras.push({ close });
      return {
        client: (headers) => clientFor(extra.baseUrl, API_KEY, headers),
        baseUrl: extra.baseUrl,
        close,
      };
    },
    close: async () => {
      // The provider first: a call it still holds open would keep a gateway from closing.
      await provider.close();
      for (const extra of extras) await extra.close();
      await gateway.close();
      await budget?.close();
      await projector.close();
      await bus.close();
      await server?.stop();
      await dir[Symbol.asyncDispose]();
    },
  };
  return stack;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether a promise is still pending after `ms` (a held call that has not been answered). */
export async function stillPending(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const marker = Symbol("pending");
  const result = await Promise.race([
    promise.then(
      () => "settled",
      () => "settled",
    ),
    sleep(ms).then(() => marker),
  ]);
  return result === marker;
}
