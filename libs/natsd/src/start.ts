import { type ChildProcess, spawn } from "node:child_process";
import { constants } from "node:fs";
import { access, mkdir, mkdtemp, open, readdir, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { NatsServerStartError, NatsServerStartTimeoutError } from "./errors.js";
import { readServerInfo } from "./info.js";
import { acquireStoreLock, type StoreLock } from "./lock.js";
import { parentDeathLauncher } from "./parent-death.js";
import { tail } from "./system.js";

export interface StartNatsServerOptions {
  readonly binary: string;
  /** JetStream data lives here; starting again on the same directory finds the same streams. */
  readonly storeDir: string;
  /** Interface to listen on; default 127.0.0.1 so a dev or test server is not exposed. */
  readonly host?: string;
  /** 0 (the default) lets the server pick a free port, which the handle reports. */
  readonly port?: number;
  readonly serverName?: string;
  /** Send the server's log here instead of keeping it in memory. */
  readonly logFile?: string;
  /** JetStream fsync interval, e.g. "2m", "10s" or "always". */
  readonly syncInterval?: string;
  /**
   * GOMAXPROCS of the server's Go runtime; 0 is Go's default (every CPU), whatever this
   * process was given; unset passes on this process's environment as it is.
   */
  readonly gomaxprocs?: number;
  readonly maxPayload?: number;
  /** Also open the HTTP monitoring endpoint (varz, jsz, healthz) on a free port. */
  readonly monitor?: boolean;
  /** Join a cluster: JetStream then replicates across its servers (give each a `serverName`). */
  readonly cluster?: NatsClusterOptions;
  /**
   * Accounts, each with its users and what it exports and imports: what a process may
   * reach is then bounded by its account as well as by its permissions (a reply, which
   * permissions never look at, stays in the account of whoever asked for it). Unset, the
   * server asks clients for no credential (a test's private server; never `holdfast up`'s).
   */
  readonly accounts?: readonly NatsAccount[];
  /** TLS on the client port: clients must speak TLS (and, with `caFile`, show a certificate it signed). */
  readonly tls?: NatsServerTls;
  /** Passed through as-is, after the options above. */
  readonly extraArgs?: readonly string[];
  readonly startTimeoutMs?: number;
  /** How long `stop()` (and stopping an orphan) waits after SIGTERM before it sends SIGKILL. */
  readonly stopTimeoutMs?: number;
  /**
   * When the store dir's lock names a nats-server that still runs but whose starter is gone
   * (a supervisor killed with SIGKILL), stop that server and start this one in its place.
   * Default true; false refuses with `NatsStoreInUseError` instead. A server whose starter
   * is alive is never touched, and a lock whose server is gone is simply taken.
   */
  readonly takeOverOrphan?: boolean;
  /**
   * Have the kernel send the server SIGTERM when the process that started it dies, however
   * it dies. Default true; needs Linux and util-linux `setpriv`, and is skipped silently
   * elsewhere, where the lock and `takeOverOrphan` are what protect the store. The kernel
   * watches the thread that spawned the server: started from a worker thread, the server
   * is stopped when that worker ends.
   */
  readonly dieWithParent?: boolean;
  /** Told when an orphaned server is stopped to take over its store. */
  readonly log?: (line: string) => void;
  /**
   * Called with the store's canonical path once its lock is held (no other server uses it)
   * and before this server opens it: for moving what an earlier layout left in place.
   */
  readonly prepareStore?: (storeDir: string) => Promise<void>;
  /**
   * Start the server in a process group of its own, so that a Ctrl-C in the starter's
   * terminal reaches the starter alone, which stops the server when it is ready to.
   */
  readonly ownProcessGroup?: boolean;
}

/** A user of the server: an nkey, and what it may publish and subscribe to. */
export interface NatsUser {
  /** The user's public nkey ("U…"); its seed stays with the process it belongs to. */
  readonly nkey: string;
  readonly permissions?: {
    readonly publish?: { readonly allow?: readonly string[]; readonly deny?: readonly string[] };
    readonly subscribe?: { readonly allow?: readonly string[]; readonly deny?: readonly string[] };
  };
}

/** An account of the server: its users, and the subjects it shares with other accounts. */
export interface NatsAccount {
  readonly name: string;
  /** JetStream's streams live in this account. */
  readonly jetstream?: boolean;
  readonly users: readonly NatsUser[];
  /** Subjects other accounts may use: a service (requests into this account, answered back) or a stream (messages out of it). */
  readonly exports?: readonly {
    readonly service?: string;
    readonly stream?: string;
    /** The accounts allowed to import it; unset, any. */
    readonly accounts?: readonly string[];
    /** A service's answers: one ("singleton", the default), or several (a pull, a batch). */
    readonly responseType?: "singleton" | "stream";
  }[];
  readonly imports?: readonly {
    readonly service?: { readonly account: string; readonly subject: string };
    readonly stream?: { readonly account: string; readonly subject: string };
  }[];
}

/** A certificate and key the server presents, and a CA whose certificates it requires of peers. */
export interface NatsServerTls {
  readonly certFile: string;
  readonly keyFile: string;
  /** When set, peers must present a certificate this CA signed (mutual TLS). */
  readonly caFile?: string;
}

export interface NatsClusterOptions {
  /** The same on every server of the cluster. */
  readonly name: string;
  /**
   * What a route must present to join (the same on every server): without it, anyone who
   * reaches the cluster port could join the cluster and read every stream.
   */
  readonly user?: string;
  readonly password?: string;
  /** TLS on the routes between servers (with `caFile`, each server verifies the other's certificate). */
  readonly tls?: NatsServerTls;
  /**
   * Where the other servers' routes connect, on `host`. A fixed port, since every other
   * server's `routes` names it, and a restarted server must be found where it was.
   */
  readonly port: number;
  /** Route URLs (`nats-route://host:port`) of the servers to join; one naming this server is ignored. */
  readonly routes: readonly string[];
}

export interface RunningNatsServer extends AsyncDisposable {
  /** `nats://host:port`, with a wildcard listen address replaced by loopback. */
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  /** The store dir's canonical path (symlinks and `..` resolved), as the lock and the server use it. */
  readonly storeDir: string;
  /** `http://host:port` when started with `monitor: true`. */
  readonly monitorUrl: string | undefined;
  /** Resolves with the exit code, or null when a signal ended the process. Never rejects. */
  readonly exited: Promise<number | null>;
  /** The last few KiB of the server's stdout/stderr (empty when it logs to `logFile`). */
  output(): string;
  /** SIGTERM, wait, SIGKILL after `stopTimeoutMs`, release the store lock. Safe to call more than once. */
  stop(): Promise<void>;
}

const OUTPUT_LIMIT = 64 * 1024;
const POLL_MS = 20;

/**
 * Spawns nats-server with JetStream and resolves once it accepts NATS clients. The port
 * comes from the server's own ports file rather than from a port probed beforehand, so
 * two launchers racing for the same free port cannot happen.
 *
 * nats-server does not lock its store, and two servers on one JetStream store corrupt it,
 * so the store dir gets a lock file (`holdfast-nats.lock`), held from before the spawn
 * until the server exits; see `takeOverOrphan` for a lock left by a killed starter.
 */
export async function startNatsServer(options: StartNatsServerOptions): Promise<RunningNatsServer> {
  const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
  await mkdir(options.storeDir, { recursive: true });
  // One spelling per store (symlinks and `..` resolved as the kernel does), for the lock and
  // the server alike, so the same store reached by two paths is one store.
  const storeDir = await realpath(options.storeDir);
  for (let attempt = 1; ; attempt += 1) {
    const lock = await acquireStoreLock(storeDir, {
      takeOverOrphan: options.takeOverOrphan ?? true,
      stopTimeoutMs,
      log: options.log,
    });
    try {
      if (attempt === 1) await options.prepareStore?.(storeDir);
      return await spawnNatsServer(options, storeDir, lock);
    } catch (error) {
      lock.release();
      // A port nats-server picks itself (-1: the monitor's, and the client's when none is
      // given) is free when picked and bound a moment later: another process can take it
      // in between. Started again, it picks another.
      if (
        attempt < BIND_ATTEMPTS &&
        error instanceof NatsServerStartError &&
        PORT_TAKEN.test(error.message)
      ) {
        options.log?.(`nats-server: a port it picked was taken before it listened; starting it again`);
        continue;
      }
      throw error;
    }
  }
}

// How many times nats-server is started when a port it picked was taken before it bound it.
const BIND_ATTEMPTS = 3;
const PORT_TAKEN = /\[FTL\] Error listening on port: .*address already in use/;

async function spawnNatsServer(
  options: StartNatsServerOptions,
  storeDir: string,
  lock: StoreLock,
): Promise<RunningNatsServer> {
  const host = options.host ?? "127.0.0.1";
  const startTimeoutMs = options.startTimeoutMs ?? 30_000;
  const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
  const launcher = options.dieWithParent === false ? undefined : await parentDeathLauncher();
  if (launcher !== undefined && options.binary.includes("/")) {
    // Through setpriv a missing binary would only show as setpriv's exit code 127.
    await access(options.binary, constants.X_OK).catch((error: Error) => {
      throw new NatsServerStartError(`Could not run ${options.binary}: ${error.message}`, { cause: error });
    });
  }
  const runDir = await mkdtemp(join(tmpdir(), "holdfast-natsd-"));

  const args = ["-js", "-sd", storeDir, "-a", host, "-p", String(options.port || -1)];
  args.push("--ports_file_dir", runDir);
  if (options.monitor) args.push("-m", "-1");
  if (options.serverName !== undefined) args.push("-n", options.serverName);
  if (options.logFile !== undefined) args.push("-l", resolve(options.logFile));
  // These have no command-line flag (or only a long list of them); flags win over the file.
  const config = configFile(options, host);
  if (config !== undefined) {
    const path = join(runDir, "nats-server.conf");
    await writeFile(path, config);
    args.unshift("-c", path);
  }
  args.push(...(options.extraArgs ?? []));

  const output = new OutputTail(OUTPUT_LIMIT);
  const { GOMAXPROCS: _inherited, ...withoutGomaxprocs } = process.env;
  const env =
    options.gomaxprocs === undefined
      ? process.env
      : options.gomaxprocs === 0
        ? withoutGomaxprocs
        : { ...process.env, GOMAXPROCS: String(Math.trunc(options.gomaxprocs)) };
  const detached = options.ownProcessGroup === true;
  const child =
    launcher === undefined
      ? spawn(options.binary, args, { stdio: ["ignore", "pipe", "pipe"], env, detached })
      : spawn(launcher, ["--pdeathsig", "SIGTERM", "--", options.binary, ...args], {
          stdio: ["ignore", "pipe", "pipe"],
          env,
          detached,
        });
  // Before anything else can happen, so a lock never hides which process holds the store.
  if (child.pid !== undefined) lock.record({ natsPid: child.pid });
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => output.push(chunk));
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => output.push(chunk));

  let running = true;
  let starting = true;
  // The store is free the moment the process is gone, which is before its pipes close.
  child.once("exit", () => lock.release());
  const exited = new Promise<number | null>((resolveExit) => {
    child.once("close", (code) => {
      running = false;
      liveServers.delete(child);
      lock.release();
      resolveExit(code);
    });
  });
  const describeOutput = async () => describeServerOutput(output.text(), options.logFile);

  const aborter = new AbortController();
  const died = new Promise<never>((_, reject) => {
    child.once("error", (error) => {
      reject(new NatsServerStartError(`Could not run ${options.binary}: ${error.message}`, { cause: error }));
    });
    void exited.then(async (code) => {
      if (!starting) return;
      reject(
        new NatsServerStartError(
          `nats-server exited (code ${code}) before it was ready.\n` +
            `Command: ${options.binary} ${args.join(" ")}\n${await describeOutput()}`,
        ),
      );
    });
  });
  // Stops the readiness polls as soon as the process is gone, and keeps a rejection nobody
  // awaits any more (the race below already settled) from surfacing as unhandled.
  died.catch(() => aborter.abort());

  const pid = child.pid;
  if (pid === undefined) {
    const error = await died.then(
      () => undefined,
      (reason: unknown) => reason,
    );
    await rm(runDir, { recursive: true, force: true });
    throw error;
  }
  liveServers.add(child);
  ensureExitHook();

  let port: number;
  let monitorUrl: string | undefined;
  try {
    const deadline = Date.now() + startTimeoutMs;
    const ports = await Promise.race([waitForPortsFile(runDir, pid, deadline, aborter.signal), died]);
    port = ports.port;
    monitorUrl = ports.monitorUrl;
    await Promise.race([waitForInfo(natsUrl(host, port), deadline, aborter.signal), died]);
  } catch (error) {
    aborter.abort();
    child.kill("SIGKILL");
    await exited;
    await rm(runDir, { recursive: true, force: true });
    if (error instanceof TimedOut) {
      throw new NatsServerStartTimeoutError(
        `nats-server (pid ${pid}) did not accept connections within ${startTimeoutMs} ms ` +
          `(${error.message}); it was killed.\n${await describeOutput()}`,
      );
    }
    throw error;
  }

  starting = false;
  lock.record({ port });

  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      if (running) {
        child.kill("SIGTERM");
        const killer = setTimeout(() => child.kill("SIGKILL"), stopTimeoutMs);
        await exited;
        clearTimeout(killer);
      }
      lock.release();
      await rm(runDir, { recursive: true, force: true });
    })();
    return stopping;
  };

  return {
    url: natsUrl(host, port),
    port,
    pid,
    storeDir,
    monitorUrl,
    exited,
    output: () => output.text(),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

function configFile(options: StartNatsServerOptions, host: string): string | undefined {
  const lines: string[] = [];
  if (options.maxPayload !== undefined) lines.push(`max_payload: ${Math.trunc(options.maxPayload)}`);
  if (options.syncInterval !== undefined) {
    lines.push(`jetstream {`, `  sync_interval: ${JSON.stringify(options.syncInterval)}`, `}`);
  }
  if (options.tls !== undefined) lines.push(...tlsBlock(options.tls, ""));
  if (options.cluster !== undefined) {
    const { name, port, routes, user, password, tls } = options.cluster;
    const credentials =
      user === undefined ? "" : `${encodeURIComponent(user)}:${encodeURIComponent(password ?? "")}@`;
    lines.push(
      `cluster {`,
      `  name: ${JSON.stringify(name)}`,
      `  listen: ${JSON.stringify(`${formatHost(host)}:${Math.trunc(port)}`)}`,
      `  routes: [${routes.map((route) => JSON.stringify(route.replace("://", `://${credentials}`))).join(", ")}]`,
      ...(user === undefined
        ? []
        : [`  authorization { user: ${JSON.stringify(user)}, password: ${JSON.stringify(password ?? "")} }`]),
      ...(tls === undefined ? [] : tlsBlock(tls, "  ")),
      `}`,
    );
  }
  if (options.accounts !== undefined) lines.push(renderAccounts(options.accounts));
  return lines.length === 0 ? undefined : `${lines.join("\n")}\n`;
}

function tlsBlock(tls: NatsServerTls, indent: string): string[] {
  return [
    `${indent}tls {`,
    `${indent}  cert_file: ${JSON.stringify(tls.certFile)}`,
    `${indent}  key_file: ${JSON.stringify(tls.keyFile)}`,
    ...(tls.caFile === undefined
      ? []
      : [`${indent}  ca_file: ${JSON.stringify(tls.caFile)}`, `${indent}  verify: true`]),
    `${indent}}`,
  ];
}

/**
 * nats-server's `accounts` block: each account's users (nkeys and permissions), exports and
 * imports. Public keys and subjects only, no secret; strings JSON-quoted.
 */
export function renderAccounts(accounts: readonly NatsAccount[]): string {
  const q = JSON.stringify;
  const blocks = accounts.map((account) => {
    const lines = [`  ${q(account.name)}: {`];
    if (account.jetstream === true) lines.push("    jetstream: enabled");
    lines.push("    users: [", renderUsers(account.users, "      "), "    ]");
    if (account.exports !== undefined && account.exports.length > 0) {
      lines.push("    exports: [");
      for (const e of account.exports) {
        const what = e.service !== undefined ? `service: ${q(e.service)}` : `stream: ${q(e.stream)}`;
        const response = e.responseType === undefined ? "" : `, response_type: ${e.responseType}`;
        const to = e.accounts === undefined ? "" : `, accounts: ${q(e.accounts)}`;
        lines.push(`      { ${what}${response}${to} }`);
      }
      lines.push("    ]");
    }
    if (account.imports !== undefined && account.imports.length > 0) {
      lines.push("    imports: [");
      for (const i of account.imports) {
        const from = i.service ?? i.stream;
        const kind = i.service !== undefined ? "service" : "stream";
        lines.push(`      { ${kind}: { account: ${q(from?.account)}, subject: ${q(from?.subject)} } }`);
      }
      lines.push("    ]");
    }
    lines.push("  }");
    return lines.join("\n");
  });
  return ["accounts {", ...blocks, "}"].join("\n");
}

function renderUsers(users: readonly NatsUser[], indent: string): string {
  const list = (values: readonly string[] | undefined) => JSON.stringify(values ?? []);
  // nats-server reads an empty allow list as no bound at all: a side given nothing to allow
  // is written as denying everything.
  const side = (s: { readonly allow?: readonly string[]; readonly deny?: readonly string[] } | undefined) =>
    s?.allow !== undefined && s.allow.length > 0
      ? `{ allow: ${list(s.allow)}, deny: ${list(s.deny)} }`
      : `{ deny: [">"] }`;
  return users
    .map((user) => {
      const p = user.permissions;
      const permissions =
        p === undefined
          ? ""
          : `, permissions: { publish: ${side(p.publish)}, subscribe: ${side(p.subscribe)} }`;
      return `${indent}{ nkey: ${JSON.stringify(user.nkey)}${permissions} }`;
    })
    .join(",\n");
}

class TimedOut extends Error {
  override readonly name = "TimedOut";
}

async function waitForPortsFile(
  dir: string,
  pid: number,
  deadline: number,
  signal: AbortSignal,
): Promise<{ port: number; monitorUrl: string | undefined }> {
  const suffix = `_${pid}.ports`;
  while (!signal.aborted) {
    const name = (await readdir(dir)).find((entry) => entry.endsWith(suffix));
    if (name !== undefined) {
      // The server may still be writing it; an unparsable read is retried.
      const parsed = parsePortsFile(await readFile(join(dir, name), "utf8").catch(() => ""));
      if (parsed !== undefined) return parsed;
    }
    if (Date.now() > deadline) throw new TimedOut("no ports file was written");
    await sleep(POLL_MS);
  }
  throw new TimedOut("aborted");
}

/** The ports file is `{"nats":["nats://127.0.0.1:4222"],"monitoring":["http://…"]}`. */
export function parsePortsFile(text: string): { port: number; monitorUrl: string | undefined } | undefined {
  let parsed: { nats?: unknown; monitoring?: unknown };
  try {
    parsed = JSON.parse(text) as typeof parsed;
  } catch {
    return undefined;
  }
  const first = (value: unknown) =>
    Array.isArray(value) && typeof value[0] === "string" ? value[0] : undefined;
  const client = first(parsed.nats);
  if (client === undefined) return undefined;
  const port = Number(new URL(client).port);
  if (!Number.isInteger(port) || port <= 0) return undefined;
  const monitor = first(parsed.monitoring);
  return { port, monitorUrl: monitor === undefined ? undefined : loopbackUrl(monitor) };
}

async function waitForInfo(url: string, deadline: number, signal: AbortSignal): Promise<void> {
  let lastError = "";
  while (!signal.aborted) {
    try {
      await readServerInfo(url, { timeoutMs: Math.max(250, Math.min(2_000, deadline - Date.now())), signal });
      return;
    } catch (error) {
      lastError = error instanceof Error ? error.message : String(error);
    }
    if (Date.now() > deadline) throw new TimedOut(`last connect to ${url}: ${lastError}`);
    await sleep(POLL_MS);
  }
  throw new TimedOut("aborted");
}

function natsUrl(host: string, port: number): string {
  return `nats://${formatHost(connectHost(host))}:${port}`;
}

function loopbackUrl(url: string): string {
  const parsed = new URL(url);
  parsed.hostname = formatHost(connectHost(parsed.hostname.replace(/^\[(.*)\]$/, "$1")));
  return parsed.origin;
}

/** A wildcard listen address is not something a client can dial. */
function connectHost(host: string): string {
  if (host === "" || host === "0.0.0.0") return "127.0.0.1";
  if (host === "::") return "::1";
  return host;
}

function formatHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

async function describeServerOutput(captured: string, logFile: string | undefined): Promise<string> {
  const parts: string[] = [];
  if (captured.trim() !== "") parts.push(`Server output:\n${tail(captured)}`);
  if (logFile !== undefined) parts.push(`Server log (${logFile}):\n${await readTail(logFile)}`);
  return parts.length === 0 ? "The server printed nothing." : parts.join("\n");
}

async function readTail(path: string, bytes = 4096): Promise<string> {
  try {
    const file = await open(path, "r");
    try {
      const { size } = await file.stat();
      const start = Math.max(0, size - bytes);
      const buffer = Buffer.alloc(size - start);
      await file.read(buffer, 0, buffer.length, start);
      return tail(buffer.toString("utf8"));
    } finally {
      await file.close();
    }
  } catch (error) {
    return `(unreadable: ${error instanceof Error ? error.message : String(error)})`;
  }
}

class OutputTail {
  private chunks: string[] = [];
  private length = 0;

  constructor(private readonly limit: number) {}

  push(chunk: string): void {
    this.chunks.push(chunk);
    this.length += chunk.length;
    while (this.length > this.limit && this.chunks.length > 1) {
      this.length -= this.chunks.shift()?.length ?? 0;
    }
  }

  text(): string {
    return this.chunks.join("");
  }
}

// A server outliving the process that started it would keep its port and store-dir lock,
// so a crashed test run would break the next one. One hook serves every server started here.
// The lock stays: the server is still shutting down, and a next start sees an orphan and waits.
const liveServers = new Set<ChildProcess>();
let exitHookInstalled = false;

function ensureExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once("exit", () => {
    for (const child of liveServers) child.kill("SIGTERM");
  });
}
