import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { type Config, loadConfig } from "@holdfast/config";
import {
  ensureNatsServer,
  NatsStoreInUseError,
  type RunningNatsServer,
  startNatsServer,
} from "@holdfast/natsd";
import { runDemo } from "./demo.js";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";
import { readStack, removeStack, type StackFile, writeStack } from "./stack.js";
import { Service } from "./supervisor.js";

export const UP_USAGE = `holdfast up [--port 4141] [--data-dir DIR] [--upstream URL] [--config FILE] [--demo]

Starts Holdfast on this machine: nats-server (unless nats.url is configured), the
projector with embedded ClickHouse (unless clickhouse.url is configured) and the gateway.
--demo also starts the built-in fake model provider as the upstream and sends a few
calls through the gateway, so everything works offline. Ctrl-C stops it all.`;

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

  try {
    const env: NodeJS.ProcessEnv = { ...process.env, HOLDFAST_DATA_DIR: config.data_dir };
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

    const projectorPort = config.projector.port || (await freePort(config.projector.host));
    const projector = new Service({
      name: "projector",
      entry: entryOf("@holdfast/projector/main"),
      env: { ...env, HOLDFAST_NATS__URL: natsUrl, HOLDFAST_PROJECTOR__PORT: String(projectorPort) },
      logsDir,
      restart: true,
    });
    projector.onRestart = (code, signal) => console.error(`projector exited (${code ?? signal}); restarting`);
    projector.start();
    started.push(projector);
    const analyticsUrl = `http://${loopback(config.projector.host)}:${projectorPort}`;
    await projector.waitHealthy(`${analyticsUrl}/health`, START_TIMEOUT_MS);

    const gatewayPort = config.gateway.port || (await freePort(config.gateway.host));
    const gateway = new Service({
      name: "gateway",
      entry: entryOf("@holdfast/gateway/main"),
      env: {
        ...env,
        HOLDFAST_NATS__URL: natsUrl,
        HOLDFAST_GATEWAY__PORT: String(gatewayPort),
        HOLDFAST_GATEWAY__UPSTREAM: upstream,
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

    const stack: StackFile = {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      dataDir: config.data_dir,
      gatewayUrl,
      natsUrl,
      analyticsUrl,
      upstream,
      logsDir,
    };
    writeStack(stack);
    console.log(banner(stack, config, values.demo));
    if (values.demo) console.log(await runDemo(gatewayUrl, analyticsUrl));
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

function banner(stack: StackFile, config: Config, demo: boolean): string {
  const hf = holdfastCommand();
  const clickhouse = config.clickhouse.url ?? `embedded, ${join(config.data_dir, "clickhouse")}`;
  return `Holdfast is up.

  gateway     ${stack.gatewayUrl}  →  ${stack.upstream}${demo ? "  (demo provider)" : ""}
  NATS        ${stack.natsUrl}${config.nats.url ? "" : `  (data: ${join(config.data_dir, "nats")})`}
  analytics   ${stack.analyticsUrl}  (ClickHouse: ${clickhouse})
  logs        ${stack.logsDir}

Point your agent at Holdfast by changing one line:

  Python   client = OpenAI(base_url="${stack.gatewayUrl}")
           client = Anthropic(base_url="${origin(stack.gatewayUrl)}")
  Node     const client = new OpenAI({ baseURL: "${stack.gatewayUrl}" })
           const client = new Anthropic({ baseURL: "${origin(stack.gatewayUrl)}" })
  or set   OPENAI_BASE_URL=${stack.gatewayUrl}  ANTHROPIC_BASE_URL=${origin(stack.gatewayUrl)}

Name a run with the header X-Holdfast-Run (or let Holdfast fingerprint it), then look:
  ${hf} ls          ${hf} show <run>          ${hf} query "SELECT count() FROM steps"

Ctrl-C stops everything.`;
}

/** The Anthropic SDK's base URL: the gateway's origin (it adds /v1 itself). */
function origin(url: string): string {
  return new URL(url).origin;
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

async function freePort(host: string): Promise<number> {
  const server = createServer();
  server.listen(0, host);
  await new Promise((resolveListen) => server.once("listening", resolveListen));
  const address = server.address();
  await new Promise((resolveClose) => server.close(resolveClose));
  if (typeof address !== "object" || address === null) throw new CliError("could not find a free port");
  return address.port;
}
