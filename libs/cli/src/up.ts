import { chmodSync, existsSync, mkdirSync } from "node:fs";
import { rename } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { accountOf, connectBus, type Principal } from "@holdfast/bus";
import { type Config, loadConfig, natsConnection } from "@holdfast/config";
import {
  ensureNatsServer,
  NatsStoreInUseError,
  type RunningNatsServer,
  startNatsServer,
} from "@holdfast/natsd";
import { configFileOf } from "./common.js";
import { ensureCredentials, type LocalCredentials, natsAccountsOf } from "./credentials.js";
import { runDemo } from "./demo.js";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";
import { pointYourAgent } from "./pointing.js";
import { readStack, removeStack, type StackFile, writeStack } from "./stack.js";
import { Service } from "./supervisor.js";

export const UP_USAGE = `holdfast up [--port 4141] [--data-dir DIR] [--upstream URL] [--config FILE] [--demo] [--insecure]

Starts Holdfast on this machine: nats-server (unless nats.url is configured), the
projector with embedded ClickHouse (unless clickhouse.url is configured), the budget
service, the control API (REST on control.port 4142, gRPC on control.grpc_port 4143), the
scheduler and the gateway (a port that is taken is replaced by a free one, and the banner
says so). --demo also starts the built-in fake model provider as the upstream and sends a
few calls through the gateway, so everything works offline. Ctrl-C stops it all.

Every API takes a token wherever it listens (all but the agents' /v1/* routes, liveness
health checks and gRPC reflection): at its first start up makes the control, read, budget
and worker tokens and a NATS credential per service in <data_dir>/credentials/, and keeps
them (holdfast credentials says where each is); a token set in the configuration is used
instead of its file. --insecure (control.insecure) lets a service with no token listen off
loopback, so it changes nothing here: up always has them.`;

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
  const configFile = configFileOf(values);
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
  // The data dir holds the log's files, the projection's and the credentials: its owner's
  // alone, so no other user of the machine reads the events off the disk, around NATS. What
  // the stack writes in it is too (the umask the services inherit), should the dir be opened up.
  process.umask(0o077);
  mkdirSync(config.data_dir, { recursive: true, mode: 0o700 });
  chmodSync(config.data_dir, 0o700);
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
  const { ANALYTICS_API, isTokenDigest, tokenDigest } = await import("@holdfast/access");
  const checkOnly = (token: string) => (isTokenDigest(token) ? token : tokenDigest(token));
  const access = { ...config.control, token: tokens.control, read_token: tokens.read };
  const unsafe = bindingProblem(access);
  if (unsafe !== undefined) throw new CliError(`The control API will not start: ${unsafe}`, 2);
  const unsafeAnalytics = bindingProblem({ ...access, host: config.projector.host }, ANALYTICS_API);
  if (unsafeAnalytics !== undefined)
    throw new CliError(`The projector will not start: ${unsafeAnalytics}`, 2);
  // A service that only checks a token is given its digest (sha256:…), which it can check
  // and never present: taking over the gateway (which parses every agent's and provider's
  // bytes), the projector or the scheduler yields no operator's token. Only the control
  // service holds a token to present (the read token, to the projector); the gateway holds
  // the budget token it presents to the budget service.
  const checksOperators = {
    HOLDFAST_CONTROL__TOKEN: checkOnly(tokens.control),
    HOLDFAST_CONTROL__READ_TOKEN: checkOnly(tokens.read),
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
          // Every client must be one of the stack's principals, in an account of its own and
          // allowed only its own work.
          accounts: natsAccountsOf(credentials, natsAccess),
          // A nats-server left running by an `up` that was killed (kill -9, no setpriv to
          // take it down too) is stopped, so this one is the only server on the store.
          takeOverOrphan: true,
          // Stopped by this process after the services, not by the terminal's Ctrl-C before them.
          ownProcessGroup: true,
          prepareStore: (storeDir) => moveLogIntoItsAccount(storeDir, accountOf("admin", config.nats.prefix)),
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

    // Each service listens where it is told; a port another process holds (another stack
    // starting at the same moment, say) is replaced by a free one in the service itself, with
    // no gap between a look and the bind, and each says in its startup line where it is.
    env.HOLDFAST_FREE_PORT_IF_TAKEN = "true";
    const notes: string[] = [];
    const start = async (
      name: string,
      own: NodeJS.ProcessEnv,
      line: RegExp,
      ports: { key: string; wanted: number; found: (match: RegExpExecArray) => number }[],
    ): Promise<RegExpExecArray> => {
      const service = new Service({
        name,
        entry: entryOf(`@holdfast/${name}/main`),
        env: { ...env, ...own },
        logsDir,
        restart: true,
      });
      service.onRestart = (code, signal) => console.error(`${name} exited (${code ?? signal}); restarting`);
      service.start();
      started.push(service);
      const match = await service.waitForLine(line, START_TIMEOUT_MS);
      for (const { key, wanted, found } of ports) {
        const port = found(match);
        if (wanted !== 0 && port !== wanted)
          notes.push(`${key} ${wanted} is in use; ${name} took ${port} instead.`);
      }
      // Restarted, it comes back where agents and the other services were told it is.
      service.pin(Object.fromEntries(ports.map(({ key, found }) => [envName(key), String(found(match))])));
      return match;
    };
    const portOf = (url: string) => Number(new URL(url.includes("://") ? url : `tcp://${url}`).port);

    const [, analyticsUrl] = await start(
      "projector",
      {
        ...natsEnv("projector", natsUrl),
        ...checksOperators,
        // ClickHouse's passwords are the projector's alone (a server's, by clickhouse.url).
        ...(config.clickhouse.password ? { HOLDFAST_CLICKHOUSE__PASSWORD: config.clickhouse.password } : {}),
        ...(config.clickhouse.reader_password
          ? { HOLDFAST_CLICKHOUSE__READER_PASSWORD: config.clickhouse.reader_password }
          : {}),
        HOLDFAST_PROJECTOR__PORT: String(config.projector.port),
      },
      /projector listening on (http:\/\/\S+)/,
      [{ key: "projector.port", wanted: config.projector.port, found: (m) => portOf(m[1]!) }],
    );

    // The budget service leases slices of the daily and monthly budgets to gateways; it
    // starts with the stack whether or not budgets are configured, so adding one is a
    // config change and a restart, not a new service to run.
    const [, budgetUrl] = await start(
      "budget",
      {
        ...natsEnv("budget", natsUrl),
        HOLDFAST_BUDGET__PORT: String(config.budget.port),
        HOLDFAST_BUDGET__TOKEN: checkOnly(tokens.budget),
      },
      /budget listening on (\S+)/,
      [{ key: "budget.port", wanted: config.budget.port, found: (m) => portOf(m[1]!) }],
    );

    const [, gatewayUrl] = await start(
      "gateway",
      {
        ...natsEnv("gateway", natsUrl),
        ...checksOperators,
        HOLDFAST_GATEWAY__PORT: String(config.gateway.port),
        HOLDFAST_GATEWAY__UPSTREAM: upstream,
        HOLDFAST_BUDGET__URL: budgetUrl,
        HOLDFAST_BUDGET__TOKEN: tokens.budget,
      },
      /gateway listening on (http:\/\/\S+\/v1)/,
      [{ key: "gateway.port", wanted: config.gateway.port, found: (m) => portOf(m[1]!) }],
    );

    const [, controlApi, controlGrpc] = await start(
      "control",
      {
        ...natsEnv("control", natsUrl),
        HOLDFAST_CONTROL__TOKEN: checkOnly(tokens.control),
        HOLDFAST_CONTROL__READ_TOKEN: tokens.read,
        HOLDFAST_CONTROL__PORT: String(config.control.port),
        HOLDFAST_CONTROL__GRPC_PORT: String(config.control.grpc_port),
        HOLDFAST_CONTROL__ANALYTICS_URL: analyticsUrl,
        ...(values.insecure ? { HOLDFAST_CONTROL__INSECURE: "true" } : {}),
      },
      /control listening on (http:\/\/\S+)\/holdfast\/v1 grpc (\S+)/,
      [
        { key: "control.port", wanted: config.control.port, found: (m) => portOf(m[1]!) },
        { key: "control.grpc_port", wanted: config.control.grpc_port, found: (m) => portOf(m[2]!) },
      ],
    );

    // Durable runs: submitted over gRPC (or REST), run on workers that connect to it.
    const [, schedulerGrpc, schedulerUrl] = await start(
      "scheduler",
      {
        ...natsEnv("scheduler", natsUrl),
        ...checksOperators,
        HOLDFAST_SCHEDULER__WORKER_TOKEN: checkOnly(tokens.worker),
        HOLDFAST_SCHEDULER__GRPC_PORT: String(config.scheduler.grpc_port),
        HOLDFAST_SCHEDULER__PORT: String(config.scheduler.port),
        HOLDFAST_SCHEDULER__GATEWAY_URL: config.scheduler.gateway_url ?? gatewayUrl!.replace(/\/v1$/, ""),
        ...(values.insecure ? { HOLDFAST_CONTROL__INSECURE: "true" } : {}),
      },
      /scheduler listening on grpc (\S+) rest (http:\/\/\S+)/,
      [
        { key: "scheduler.grpc_port", wanted: config.scheduler.grpc_port, found: (m) => portOf(m[1]!) },
        { key: "scheduler.port", wanted: config.scheduler.port, found: (m) => portOf(m[2]!) },
      ],
    );

    const stack: StackFile = {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      dataDir: config.data_dir,
      gatewayUrl: gatewayUrl!,
      natsUrl,
      analyticsUrl: analyticsUrl!,
      upstream,
      logsDir,
      controlUrl: controlApi!,
      controlGrpc: controlGrpc!,
      budgetUrl: budgetUrl!,
      schedulerGrpc: schedulerGrpc!,
      schedulerUrl: schedulerUrl!,
      credentialsDir: credentials.dir,
      ...(configFile === undefined ? {} : { configFile }),
    };
    writeStack(stack);
    console.log(banner(stack, config, stack.budgetUrl!, values.demo, notes, credentials));
    if (values.demo) console.log(await runDemo(stack.gatewayUrl, stack.analyticsUrl, tokens.read));
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

/** The compiled entry point of a workspace service, e.g. @holdfast/gateway/main. */
function entryOf(specifier: string): string {
  return fileURLToPath(import.meta.resolve(specifier));
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
    await bus.provisionBuckets({ snapshotMaxBytes: config.snapshots.max_storage_bytes });
  } finally {
    await bus.close();
  }
}

/**
 * The environment without Holdfast's secrets: each service is given only the tokens it
 * uses, not whatever the shell that ran `up` holds.
 */
export function withoutSecrets(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const kept: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (!/^HOLDFAST_.*(TOKEN|CREDENTIALS|PASSWORD)$/.test(name)) kept[name] = value;
  }
  return kept;
}

/** "gateway.port" → HOLDFAST_GATEWAY__PORT. */
function envName(key: string): string {
  return `HOLDFAST_${key.toUpperCase().replace(".", "__")}`;
}

/**
 * Before accounts, the stream lived in nats-server's default account ($G); JetStream keeps
 * each account's streams in a directory named after it. A store laid out that way is moved
 * into the log's account, once, with the server not running, so a stack upgraded in place
 * finds every event it recorded.
 */
async function moveLogIntoItsAccount(storeDir: string, account: string): Promise<void> {
  const jetstreamDir = join(storeDir, "jetstream");
  const legacy = join(jetstreamDir, "$G");
  const current = join(jetstreamDir, account);
  if (existsSync(legacy) && !existsSync(current)) {
    await rename(legacy, current);
    console.error(`Moved the event log into the NATS account ${account} (${current}).`);
  }
}
