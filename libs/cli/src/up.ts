import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { connectBus, type Principal } from "@holdfast/bus";
import { type Config, loadConfig, natsConnection } from "@holdfast/config";
import {
  ensureNatsServer,
  NatsStoreInUseError,
  type RunningNatsServer,
  startNatsServer,
} from "@holdfast/natsd";
import { ensureCredentials, type LocalCredentials, natsUsers } from "./credentials.js";
import { runDemo } from "./demo.js";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";
import { pointYourAgent } from "./pointing.js";
import { readStack, removeStack, type StackFile, writeStack } from "./stack.js";
import { Service } from "./supervisor.js";

export const UP_USAGE = `holdfast up [--port 4141] [--data-dir DIR] [--upstream URL] [--config FILE] [--demo] [--insecure]

Starts Holdfast on this machine: nats-server (unless nats.url is configured), the
projector with embedded ClickHouse (unless clickhouse.url is configured), the budget
service, the gateway and the control API (REST on control.port 4142, gRPC on control.grpc_port 4143; a port that
is taken is replaced by a free one, and the banner says so). --demo also starts the
built-in fake model provider as the upstream and sends a few calls through the gateway,
so everything works offline. Ctrl-C stops it all.

The control API needs control.token (holdfast init writes one) unless control.host is
loopback, and so does the projector's analytics API unless projector.host is; --insecure
(control.insecure) lets them listen elsewhere without one.`;

const START_TIMEOUT_MS = 90_000;

export async function up(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: "string" },
      "data-dir": { type: "string" },
      upstream: { type: "string" },
      config: { type: "string" },
      demo: { type: "boolean", default: false },
      insecure: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(UP_USAGE);
    return;
  }
  const configFile = values.config ? resolve(values.config) : undefined;
  const config = loadConfig({
    file: configFile,
    overrides: {
      data_dir: values["data-dir"],
      gateway: {
        port: values.port === undefined ? undefined : portFlag(values.port),
        upstream: values.upstream,
      },
      control: { insecure: values.insecure ? true : undefined },
    },
  });
  const running = readStack(config.data_dir);
  if (running) {
    throw new CliError(
      `Holdfast is already running on ${config.data_dir} (pid ${running.pid}, gateway ${running.gatewayUrl}).`,
    );
  }
  const logsDir = join(config.data_dir, "logs");
  mkdirSync(logsDir, { recursive: true });

  const started: { stop(): Promise<void> }[] = [];
  let nats: RunningNatsServer | undefined;
  let stopping = false;
  const stopAll = async () => {
    stopping = true;
    for (const service of started.reverse()) await service.stop().catch(() => undefined);
    await nats?.stop();
    removeStack(config.data_dir);
  };

  // Every process gets a credential of its own; what the configuration names wins.
  const credentials = ensureCredentials(config.data_dir);
  const natsAccess = { prefix: config.nats.prefix, projectorConsumer: config.projector.consumer };
  const tokens = {
    control: config.control.token ?? credentials.tokens.control,
    read: config.control.read_token ?? credentials.tokens.read,
    budget: config.budget.token ?? credentials.tokens.budget,
    worker: config.scheduler.worker_token ?? credentials.tokens.worker,
  };
  /**
   * How a service connects to NATS: with its own credential on the embedded server; on a
   * server of your own (nats.url), with the credential the configuration names.
   */
  const natsEnv = (principal: Principal, url: string): NodeJS.ProcessEnv => {
    const file = config.nats.url === undefined ? credentials.nats[principal].file : config.nats.credentials;
    return { HOLDFAST_NATS__URL: url, ...(file === undefined ? {} : { HOLDFAST_NATS__CREDENTIALS: file }) };
  };
  // Refused here, before anything starts, with the control service's own words. (Loaded
  // here, not at the top: the other commands need none of the service's dependencies.)
  const { bindingProblem } = await import("@holdfast/control");
  const { ANALYTICS_API } = await import("@holdfast/access");
  const access = { ...config.control, token: tokens.control, read_token: tokens.read };
  const unsafe = bindingProblem(access);
  if (unsafe !== undefined) throw new CliError(`The control API will not start: ${unsafe}`, 2);
  const unsafeAnalytics = bindingProblem({ ...access, host: config.projector.host }, ANALYTICS_API);
  if (unsafeAnalytics !== undefined)
    throw new CliError(`The projector will not start: ${unsafeAnalytics}`, 2);
  const operatorTokens = {
    HOLDFAST_CONTROL__TOKEN: tokens.control,
    HOLDFAST_CONTROL__READ_TOKEN: tokens.read,
  };

  try {
    const env: NodeJS.ProcessEnv = { ...withoutSecrets(process.env), HOLDFAST_DATA_DIR: config.data_dir };
    if (configFile) env.HOLDFAST_CONFIG = configFile;

    let upstream = config.gateway.upstream;
    if (values.demo) {
      const provider = new Service({
        name: "fake-provider",
        entry: entryOf("@holdfast/fake-provider/main"),
        args: ["--port", "0", "--latency-ms", "40", "--chunk-delay-ms", "15"],
        env,
        logsDir,
        restart: true,
      });
      provider.start();
      started.push(provider);
      const [, url] = await provider.waitForLine(/listening on (http:\/\/\S+)/, START_TIMEOUT_MS);
      upstream = `${url}/v1`;
    }

    let natsUrl = config.nats.url;
    if (!natsUrl) {
      const binary = await ensureNatsServer({
        explicit: config.nats.server_bin,
        log: (line) => console.error(line),
      });
      const startNats = (port: number) =>
        startNatsServer({
          binary: binary.path,
          storeDir: join(config.data_dir, "nats"),
          host: config.nats.host,
          port,
          serverName: "holdfast",
          logFile: join(logsDir, "nats-server.log"),
          syncInterval: config.nats.sync_interval,
          gomaxprocs: config.nats.gomaxprocs ?? embeddedGomaxprocs(),
          // Every client must be one of the stack's principals, allowed only its own work.
          users: natsUsers(credentials, natsAccess),
          // A nats-server left running by an `up` that was killed (kill -9, no setpriv to
          // take it down too) is stopped, so this one is the only server on the store.
          takeOverOrphan: true,
          log: (line) => console.error(line),
        });
      // Like the services, a nats-server that dies is started again, on the same port and
      // store, so the services reconnect to it and find every event.
      const supervise = (server: RunningNatsServer) => {
        server.exited.then((code) => {
          if (stopping) return;
          console.error(`nats-server exited (${code}); restarting`);
          startNats(server.port).then(
            (restarted) => {
              nats = restarted;
              supervise(restarted);
            },
            (error: unknown) => console.error(`nats-server did not restart: ${(error as Error).message}`),
          );
        });
      };
      nats = await startNats(config.nats.port).catch((error: unknown) => {
        throw error instanceof NatsStoreInUseError ? new CliError(error.message) : error;
      });
      supervise(nats);
      natsUrl = nats.url;
    }
    await provision(natsUrl, config, config.nats.url === undefined ? credentials : undefined);

    const projectorPort = config.projector.port || (await freePort(config.projector.host));
    const projector = new Service({
      name: "projector",
      entry: entryOf("@holdfast/projector/main"),
      env: {
        ...env,
        ...natsEnv("projector", natsUrl),
        ...operatorTokens,
        HOLDFAST_PROJECTOR__PORT: String(projectorPort),
      },
      logsDir,
      restart: true,
    });
    projector.onRestart = (code, signal) => console.error(`projector exited (${code ?? signal}); restarting`);
    projector.start();
    started.push(projector);
    const analyticsUrl = `http://${loopback(config.projector.host)}:${projectorPort}`;
    await projector.waitHealthy(`${analyticsUrl}/health`, START_TIMEOUT_MS);

    // The budget service leases slices of the daily and monthly budgets to gateways; it
    // starts with the stack whether or not budgets are configured, so adding one is a
    // config change and a restart, not a new service to run.
    const budgetPort = config.budget.port || (await freePort(config.budget.host));
    const budget = new Service({
      name: "budget",
      entry: entryOf("@holdfast/budget/main"),
      env: {
        ...env,
        ...natsEnv("budget", natsUrl),
        HOLDFAST_BUDGET__PORT: String(budgetPort),
        HOLDFAST_BUDGET__TOKEN: tokens.budget,
      },
      logsDir,
      restart: true,
    });
    budget.onRestart = (code, signal) => console.error(`budget exited (${code ?? signal}); restarting`);
    budget.start();
    started.push(budget);
    await budget.waitForLine(/budget listening on \S+/, START_TIMEOUT_MS);
    const budgetUrl = `${loopback(config.budget.host)}:${budgetPort}`;

    const gatewayPort = config.gateway.port || (await freePort(config.gateway.host));
    const gateway = new Service({
      name: "gateway",
      entry: entryOf("@holdfast/gateway/main"),
      env: {
        ...env,
        ...natsEnv("gateway", natsUrl),
        ...operatorTokens,
        HOLDFAST_GATEWAY__PORT: String(gatewayPort),
        HOLDFAST_GATEWAY__UPSTREAM: upstream,
        HOLDFAST_BUDGET__URL: budgetUrl,
        HOLDFAST_BUDGET__TOKEN: tokens.budget,
      },
      logsDir,
      restart: true,
    });
    gateway.onRestart = (code, signal) => console.error(`gateway exited (${code ?? signal}); restarting`);
    gateway.start();
    started.push(gateway);
    const gatewayUrl = `http://${loopback(config.gateway.host)}:${gatewayPort}/v1`;
    await gateway.waitHealthy(
      `http://${loopback(config.gateway.host)}:${gatewayPort}/holdfast/health`,
      START_TIMEOUT_MS,
    );

    const notes: string[] = [];
    const controlPorts = await Promise.all(
      (["port", "grpc_port"] as const).map(async (key) => {
        const wanted = config.control[key];
        if (wanted === 0 || (await portFree(config.control.host, wanted))) return wanted;
        notes.push(`control.${key} ${wanted} is in use; the control API took a free port instead.`);
        return 0;
      }),
    );
    const control = new Service({
      name: "control",
      entry: entryOf("@holdfast/control/main"),
      env: {
        ...env,
        ...natsEnv("control", natsUrl),
        ...operatorTokens,
        HOLDFAST_CONTROL__PORT: String(controlPorts[0]),
        HOLDFAST_CONTROL__GRPC_PORT: String(controlPorts[1]),
        HOLDFAST_CONTROL__ANALYTICS_URL: analyticsUrl,
        ...(values.insecure ? { HOLDFAST_CONTROL__INSECURE: "true" } : {}),
      },
      logsDir,
      restart: true,
    });
    control.onRestart = (code, signal) => console.error(`control exited (${code ?? signal}); restarting`);
    control.start();
    started.push(control);
    const [, controlApi, controlGrpc] = await control.waitForLine(
      /control listening on (http:\/\/\S+)\/holdfast\/v1 grpc (\S+)/,
      START_TIMEOUT_MS,
    );

    // Durable runs: submitted over gRPC (or REST), run on workers that connect to it.
    const schedulerPorts = await Promise.all(
      (["grpc_port", "port"] as const).map(async (key) => {
        const wanted = config.scheduler[key];
        if (wanted === 0 || (await portFree(config.scheduler.host, wanted))) return wanted;
        notes.push(`scheduler.${key} ${wanted} is in use; the scheduler took a free port instead.`);
        return 0;
      }),
    );
    const scheduler = new Service({
      name: "scheduler",
      entry: entryOf("@holdfast/scheduler/main"),
      env: {
        ...env,
        ...natsEnv("scheduler", natsUrl),
        ...operatorTokens,
        HOLDFAST_SCHEDULER__WORKER_TOKEN: tokens.worker,
        HOLDFAST_SCHEDULER__GRPC_PORT: String(schedulerPorts[0]),
        HOLDFAST_SCHEDULER__PORT: String(schedulerPorts[1]),
        HOLDFAST_SCHEDULER__GATEWAY_URL: config.scheduler.gateway_url ?? gatewayUrl.replace(/\/v1$/, ""),
        ...(values.insecure ? { HOLDFAST_CONTROL__INSECURE: "true" } : {}),
      },
      logsDir,
      restart: true,
    });
    scheduler.onRestart = (code, signal) => console.error(`scheduler exited (${code ?? signal}); restarting`);
    scheduler.start();
    started.push(scheduler);
    const [, schedulerGrpc, schedulerUrl] = await scheduler.waitForLine(
      /scheduler listening on grpc (\S+) rest (http:\/\/\S+)/,
      START_TIMEOUT_MS,
    );

    const stack: StackFile = {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      dataDir: config.data_dir,
      gatewayUrl,
      natsUrl,
      analyticsUrl,
      upstream,
      logsDir,
      controlUrl: controlApi!,
      controlGrpc: controlGrpc!,
      budgetUrl,
      schedulerGrpc: schedulerGrpc!,
      schedulerUrl: schedulerUrl!,
      credentialsDir: credentials.dir,
      ...(configFile === undefined ? {} : { configFile }),
    };
    writeStack(stack);
    console.log(banner(stack, config, budgetUrl, values.demo, notes, credentials));
    if (values.demo) console.log(await runDemo(gatewayUrl, analyticsUrl, tokens.read));
  } catch (error) {
    await stopAll();
    throw error;
  }

  await new Promise<void>((resolveStop) => {
    let signals = 0;
    const onSignal = () => {
      signals += 1;
      if (signals > 1) process.exit(130);
      console.log("\nStopping Holdfast…");
      stopAll().then(() => {
        console.log("Stopped. Everything recorded is kept in the data dir.");
        resolveStop();
      });
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}

function banner(
  stack: StackFile,
  config: Config,
  budgetUrl: string,
  demo: boolean,
  notes: string[],
  credentials: LocalCredentials,
): string {
  const budgets = Object.keys(config.budgets);
  const hf = holdfastCommand();
  const clickhouse = config.clickhouse.url ?? `embedded, ${join(config.data_dir, "clickhouse")}`;
  const tokens = config.control.token !== undefined ? "control.token" : credentials.tokenFiles.control;
  return `Holdfast is up.

  gateway     ${stack.gatewayUrl}  →  ${stack.upstream}${demo ? "  (demo provider)" : ""}
  NATS        ${stack.natsUrl}${config.nats.url ? "" : `  (data: ${join(config.data_dir, "nats")})`}
  analytics   ${stack.analyticsUrl}  (ClickHouse: ${clickhouse})
  control     ${stack.controlUrl}/holdfast/v1  gRPC ${stack.controlGrpc}  (token: ${tokens})
  budgets     gRPC ${budgetUrl}  (${budgets.length === 0 ? "none configured" : `budgets for ${budgets.join(", ")}`})
  durable     gRPC ${stack.schedulerGrpc}  REST ${stack.schedulerUrl}/v1  (holdfast.v1.Runs: deploy, worker, submit)
  logs        ${stack.logsDir}
  secrets     ${credentials.dir}  (a NATS credential per service, and the tokens; see SECURITY.md)
${notes.map((note) => `\n  note: ${note}`).join("")}
Point your agent at Holdfast by changing one line:

${pointYourAgent(stack.gatewayUrl)}

Name a run with the header X-Holdfast-Run (or let Holdfast fingerprint it), then look:
  ${hf} ls          ${hf} show <run>          ${hf} query "SELECT count() FROM steps"
and act on runs (held calls wait; resumed, they go on):
  ${hf} hold <run>          ${hf} resume <run>          ${hf} stop <run>
  ${hf} hold --tag T        ${hf} rules                 ${hf} ls --status held

Ctrl-C stops everything.`;
}

/**
 * GOMAXPROCS for the nats-server `up` starts when the config names none: a quarter of the
 * machine's CPUs, at least 1. The server shares the machine with every other process of the
 * stack, and each CPU Go may use beyond what the load needs is paid for in threads woken to
 * look for work: on 2 CPUs, 1 costs a quarter less CPU per stored event than Go's default
 * (and undefined when this process was given a GOMAXPROCS of its own, which the server keeps;
 * an empty one is none, as for Go).
 */
function embeddedGomaxprocs(): number | undefined {
  if (process.env.GOMAXPROCS) return undefined;
  return Math.max(1, Math.floor(availableParallelism() / 4));
}

function portFlag(text: string): number {
  const port = Number(text);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new CliError(`--port must be an integer from 0 to 65535, got "${text}"`, 2);
  }
  return port;
}

function loopback(host: string): string {
  return host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
}

/** The compiled entry point of a workspace service, e.g. @holdfast/gateway/main. */
function entryOf(specifier: string): string {
  return fileURLToPath(import.meta.resolve(specifier));
}

/** Whether nothing listens on `host:port` now (the service binds it a moment later). */
async function portFree(host: string, port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolveFree) => {
    server.once("error", () => resolveFree(false));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolveFree(true)));
  });
}

async function freePort(host: string): Promise<number> {
  const server = createServer();
  server.listen(0, host);
  await new Promise((resolveListen) => server.once("listening", resolveListen));
  const address = server.address();
  await new Promise((resolveClose) => server.close(resolveClose));
  if (typeof address !== "object" || address === null) throw new CliError("could not find a free port");
  return address.port;
}

/**
 * Makes the event stream and the buckets (or brings them to this version), as the admin:
 * the services' own credentials may only use them.
 */
async function provision(
  natsUrl: string,
  config: Config,
  credentials: LocalCredentials | undefined,
): Promise<void> {
  const bus = await connectBus({
    ...natsConnection(config.nats),
    servers: natsUrl,
    name: "holdfast-up provision",
    principal: credentials === undefined ? undefined : "admin",
    credentials: credentials?.nats.admin.file ?? config.nats.credentials,
  });
  try {
    await bus.provision();
    await bus.provisionBuckets();
  } finally {
    await bus.close();
  }
}

/**
 * The environment without Holdfast's secrets: each service is given only the tokens it
 * uses, not whatever the shell that ran `up` holds.
 */
function withoutSecrets(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const kept: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (!/^HOLDFAST_.*(TOKEN|CREDENTIALS|PASSWORD)/.test(name)) kept[name] = value;
  }
  return kept;
}
