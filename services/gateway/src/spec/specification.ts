import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { connectBus, natsAccounts, newNatsCredential, PRINCIPALS, type Principal } from "@holdfast/bus";
import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import {
  AUTHOR_OF,
  createIdGenerator,
  type EventPayload,
  type EventType,
  eventTypeOf,
  isKnown,
  makeEnvelope,
} from "@holdfast/events";
import {
  type FakeProvider,
  type FakeProviderOptions,
  type FakeRequest,
  startFakeProvider,
} from "@holdfast/fake-provider";
import { createLogger } from "@holdfast/log";
import { launchNatsServer, makeTempDir, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import type { InjectOptions, LightMyRequestResponse } from "fastify";
import { expect } from "vitest";
import { startGateway } from "../service.js";

// Route-level specifications of the gateway, in the style of emmett's `ApiSpecification`:
// given these events in the log, when this request (fastify's `inject`), then this answer
// and these events appended to the run. On real parts: a nats-server of the file's own that
// admits only Holdfast's principals (each given event is appended by its author's own
// credential, as in production), the gateway built in-process by its composition root
// (`startGateway`, as the gateway's principal), and the fake provider as its upstream. No
// projector, budget, control or scheduler process runs: what they would write is given as
// events. Nothing here knows the pipeline's insides, only its routes and the log.

/** An event of the log, as a specification gives it: its run, its labels, what it says. */
export interface GivenEvent {
  readonly runId: string;
  readonly tag?: string;
  readonly tenant?: string;
  readonly payload: EventPayload;
}

/** An event expected among those a call appended: its type, and the fields of its payload to match. */
export type ExpectedEvent = { readonly type: EventType } & Readonly<Record<string, unknown>>;

/** An event the gateway appended, as a specification checks it: its type, its labels, its payload's fields. */
export type AppendedEvent = { type: string; tag: string; tenant: string } & Record<string, unknown>;

/** What a specification saw: the answer, and every run's events appended after the given ones. */
export interface Outcome {
  readonly response: LightMyRequestResponse;
  /** The answer's body parsed as JSON (undefined when it is not JSON, e.g. a stream). */
  readonly body: unknown;
  /** The events appended to a run since the given ones, in order. */
  appended(runId: string): AppendedEvent[];
  /** The requests that reached the fake provider during the specification, in order. */
  readonly forwarded: readonly FakeRequest[];
}

/** One check of an outcome. */
export type Expectation = (outcome: Outcome) => void;

/** The log while a request is in flight: wait for what the gateway appends, append what others would. */
export interface SpecLog {
  /** Resolves with the run's first event of this type appended since the given ones. */
  appended(runId: string, type: EventType): Promise<AppendedEvent>;
  /** Appends events as their authors would (an operator's resume, a gate's approval). */
  append(...events: GivenEvent[]): Promise<void>;
  /** The fake provider, to wait for a request to reach it. */
  readonly provider: FakeProvider;
}

export interface WhenOptions {
  /**
   * Requests sent first, in order, to the same gateway (what it learns from their answers,
   * e.g. a key's rate-limit headers, stays with it); their events count among the appended.
   */
  earlier?: readonly InjectOptions[];
  /** Done while the request is in flight; the answer is awaited after it. */
  meanwhile?: (log: SpecLog) => Promise<void>;
}

export interface GatewaySpecification {
  readonly provider: FakeProvider;
  /** The log's events before the request, appended in order by each one's author. */
  given(...events: GivenEvent[]): {
    when(
      request: InjectOptions,
      options?: WhenOptions,
    ): {
      /** Runs the specification: every expectation is checked against its outcome. */
      then(...expectations: Expectation[]): Promise<Outcome>;
    };
  };
}

export interface GatewayWorld {
  readonly provider: FakeProvider;
  /** A specification for a gateway with this configuration (over the world's own). */
  specification(config?: DeepPartial<Config>): GatewaySpecification;
  close(): Promise<void>;
}

/**
 * A nats-server with Holdfast's accounts, the log provisioned by the admin, and the fake
 * provider: the world one file's specifications share (each starts a gateway of its own).
 */
export async function gatewayWorld(
  options: { config?: DeepPartial<Config>; provider?: FakeProviderOptions } = {},
): Promise<GatewayWorld> {
  const dir = await makeTempDir("gateway-spec");
  const prefix = uniqueNamespace("spec");
  const files = {} as Record<Principal, string>;
  const keys = {} as Record<Principal, string>;
  for (const principal of PRINCIPALS) {
    const credential = newNatsCredential();
    files[principal] = join(dir.path, `nats-${principal}.nk`);
    keys[principal] = credential.publicKey;
    await writeFile(files[principal], `${credential.seed}\n`, { mode: 0o600 });
  }
  const server = await launchNatsServer({
    label: "gateway-spec",
    accounts: natsAccounts(keys, { prefix, projectorConsumer: "projector" }),
  });
  const connect = (principal: Principal) =>
    connectBus({
      servers: server.url,
      prefix,
      name: `spec ${principal}`,
      credentials: files[principal],
      principal,
    });
  const admin = await connect("admin");
  await admin.provision();
  await admin.provisionBuckets();
  // Each given event goes as its author: an operator's as the control service, a step's as
  // another gateway, a durable run's as the scheduler.
  const authors = {
    gateway: await connect("gateway"),
    control: await connect("control"),
    scheduler: await connect("scheduler"),
  };
  const provider = await startFakeProvider(options.provider ?? {});
  const newId = createIdGenerator();

  async function append(...events: GivenEvent[]): Promise<void> {
    for (const event of events) {
      const history = await admin.readRun(event.runId);
      const envelope = makeEnvelope({
        id: newId(),
        runId: event.runId,
        sequence: history.events.length + history.quarantined.length + 1,
        timestampMs: Date.now(),
        tag: event.tag ?? "",
        tenant: event.tenant ?? "",
        payload: event.payload,
      });
      await authors[AUTHOR_OF[eventTypeOf(event.payload)]].append(envelope, history.lastStreamSequence);
    }
  }

  /** A run's events after stream sequence `after`, as a specification reads them. */
  async function eventsAfter(runId: string, after: number): Promise<AppendedEvent[]> {
    const history = await admin.readRun(runId, after);
    return history.events.map(({ envelope }) =>
      isKnown(envelope)
        ? {
            type: envelope.type,
            tag: envelope.tag,
            tenant: envelope.tenant,
            ...(envelope.payload.value as unknown as Record<string, unknown>),
          }
        : { type: envelope.type, tag: envelope.tag, tenant: envelope.tenant },
    );
  }

  const base = (overrides: DeepPartial<Config> = {}): Config => {
    const config = loadConfig({
      env: {},
      overrides: {
        ...options.config,
        ...overrides,
        data_dir: dir.path,
        log_level: "silent",
        nats: { url: server.url, prefix },
        gateway: {
          port: 0,
          upstream: `${provider.url}/v1`,
          ...options.config?.gateway,
          ...overrides.gateway,
        },
      },
    });
    return { ...config, nats: { ...config.nats, credentials: files.gateway } };
  };

  return {
    provider,
    specification(config) {
      return {
        provider,
        given: (...given) => ({
          when: (request, whenOptions = {}) => ({
            // biome-ignore lint/suspicious/noThenProperty: given/when/then is the specification's grammar, as emmett's; this object is never awaited
            then: async (...expectations) => {
              await append(...given);
              // The log as it stands before the request: every run's last sequence so far.
              const runs = new Map<string, number>();
              const mark = async (runId: string) => {
                if (!runs.has(runId)) runs.set(runId, (await admin.readRun(runId)).lastStreamSequence);
                return runs.get(runId) ?? 0;
              };
              for (const event of given) await mark(event.runId);
              for (const sent of [...(whenOptions.earlier ?? []), request]) {
                const requestedRun = runOfRequest(sent);
                if (requestedRun !== undefined) await mark(requestedRun);
              }
              const forwardedBefore = provider.requests.length;
              const gateway = await startGateway(
                base(config),
                createLogger({ name: "gateway-spec", level: "silent" }),
              );
              let response: LightMyRequestResponse;
              try {
                for (const sent of whenOptions.earlier ?? []) {
                  const earlier = await gateway.app.inject(sent);
                  if (earlier.statusCode >= 400) {
                    throw new Error(`an earlier request was answered ${earlier.statusCode}: ${earlier.body}`);
                  }
                }
                const answer = gateway.app.inject(request);
                // Awaited below; a failure meanwhile must not leave it unhandled.
                answer.catch(() => undefined);
                if (whenOptions.meanwhile !== undefined) {
                  await whenOptions.meanwhile({
                    provider,
                    append,
                    appended: async (runId, type) => {
                      const after = await mark(runId);
                      return waitFor(
                        async () => (await eventsAfter(runId, after)).find((event) => event.type === type),
                        { timeoutMs: 15_000, message: `a ${type} appended to run ${runId}` },
                      );
                    },
                  });
                }
                response = await answer;
              } finally {
                // Closing drains what the gateway has yet to append (outcomes go after the answer).
                await gateway.close();
              }
              const appended = new Map<string, AppendedEvent[]>();
              for (const [runId, after] of runs) appended.set(runId, await eventsAfter(runId, after));
              const outcome: Outcome = {
                response,
                body: parsed(response),
                forwarded: provider.requests.slice(forwardedBefore),
                appended(runId) {
                  const events = appended.get(runId);
                  if (events === undefined) {
                    throw new Error(
                      `run ${runId} was neither given nor named by the request: give one of its events`,
                    );
                  }
                  return events;
                },
              };
              for (const expectation of expectations) expectation(outcome);
              return outcome;
            },
          }),
        }),
      };
    },
    async close() {
      await provider.close();
      for (const bus of Object.values(authors)) await bus.close();
      await admin.close();
      await server.stop();
      await dir[Symbol.asyncDispose]();
    },
  };
}

/** The run a request names in its X-Holdfast-Run header, if any. */
function runOfRequest(request: InjectOptions): string | undefined {
  const headers = request.headers ?? {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() === "x-holdfast-run" && typeof value === "string") return value;
  }
  return undefined;
}

function parsed(response: LightMyRequestResponse): unknown {
  try {
    return JSON.parse(response.body);
  } catch {
    return undefined;
  }
}

/** Then the answer has this status, and its JSON body these fields (partially matched). */
export function answered(status: number, body?: Record<string, unknown>): Expectation {
  return (outcome) => {
    expect(
      { status: outcome.response.statusCode, body: outcome.body ?? outcome.response.body },
      `the answer (${outcome.response.body.slice(0, 500)})`,
    ).toMatchObject({ status, ...(body === undefined ? {} : { body }) });
  };
}

/** Then these events, exactly these and in this order, were appended to the run (each partially matched). */
export function appended(runId: string, events: readonly ExpectedEvent[]): Expectation {
  return (outcome) => {
    const actual = outcome.appended(runId);
    expect(
      actual.map((event) => event.type),
      `the types of the events appended to ${runId}`,
    ).toEqual(events.map((event) => event.type));
    expect(actual, `the events appended to ${runId}`).toMatchObject(events);
  };
}

/** Then this many requests reached the provider. */
export function forwarded(count: number): Expectation {
  return (outcome) =>
    expect(
      outcome.forwarded.length,
      `requests that reached the provider: ${outcome.forwarded
        .map((request) => `${request.method} ${request.path} ${request.rawBody.slice(0, 200)}`)
        .join("; ")}`,
    ).toBe(count);
}
