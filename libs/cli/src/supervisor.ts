import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createWriteStream, readFileSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { CliError } from "./errors.js";

export interface ServiceSpec {
  name: string;
  /** Path of the service's compiled main.js. */
  entry: string;
  args?: string[];
  env: NodeJS.ProcessEnv;
  logsDir: string;
  /** Start it again when it dies unexpectedly. */
  restart: boolean;
}

const STOP_TIMEOUT_MS = 20_000;

/**
 * One service as a child process. Its output is appended to `<logsDir>/<name>.log`; it
 * exits when this process goes away (the IPC channel closes); and when it dies
 * unexpectedly it is started again with backoff, as an orchestrator would.
 */
export class Service {
  readonly logFile: string;
  /** Called when the service died unexpectedly and is about to be restarted. */
  onRestart: ((code: number | null, signal: NodeJS.Signals | null) => void) | undefined;
  private child: ChildProcess | undefined;
  private log: WriteStream | undefined;
  private stopping = false;
  private restarts = 0;
  private stdout = "";

  private env: NodeJS.ProcessEnv;

  constructor(private readonly spec: ServiceSpec) {
    this.logFile = join(spec.logsDir, `${spec.name}.log`);
    this.env = spec.env;
  }

  /** Variables a restart starts it with, over its own (where it turned out to listen, say). */
  pin(extra: NodeJS.ProcessEnv): void {
    this.env = { ...this.env, ...extra };
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(): void {
    this.log ??= createWriteStream(this.logFile, { flags: "a" });
    const child = spawn(process.execPath, [this.spec.entry, ...(this.spec.args ?? [])], {
      env: this.env,
      stdio: ["ignore", "pipe", "pipe", "ipc"],
      // A group of its own: Ctrl-C in the terminal reaches the supervisor alone, which stops
      // its services in order (a service that saw the SIGINT too would exit under it and
      // be taken for one that died).
      detached: true,
    });
    this.stdout = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      this.log?.write(chunk);
      // Kept only until the service is up: enough to read its startup line.
      if (this.stdout.length < 64 * 1024) this.stdout += chunk.toString();
    });
    child.stderr?.on("data", (chunk: Buffer) => this.log?.write(chunk));
    child.once("exit", (code, signal) => {
      if (this.child !== child || this.stopping || !this.spec.restart) return;
      this.restarts += 1;
      const delay = Math.min(250 * 2 ** Math.min(this.restarts, 5), 8_000);
      this.onRestart?.(code, signal);
      setTimeout(() => {
        if (!this.stopping) this.start();
      }, delay).unref();
    });
    this.child = child;
  }

  /** The first stdout match of `pattern`; fails if the process exits or times out first. */
  async waitForLine(pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
    return this.poll(timeoutMs, `did not print its startup line within ${timeoutMs} ms`, async () => {
      return pattern.exec(this.stdout) ?? undefined;
    });
  }

  /** Resolves once `url` answers 200; fails if the process exits or times out first. */
  async waitHealthy(url: string, timeoutMs: number): Promise<void> {
    await this.poll(timeoutMs, `did not become healthy at ${url} within ${timeoutMs} ms`, async () => {
      try {
        const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
        return response.ok ? true : undefined;
      } catch {
        return undefined;
      }
    });
  }

  /** SIGTERM, then SIGKILL if it has not exited after a grace period. */
  async stop(): Promise<void> {
    this.stopping = true;
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    await new Promise<void>((resolve) => (this.log ? this.log.end(resolve) : resolve()));
  }

  private async poll<T>(
    timeoutMs: number,
    timeoutMessage: string,
    probe: () => Promise<T | undefined>,
  ): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const child = this.child;
      if (!child || child.exitCode !== null || child.signalCode !== null) {
        throw this.failure(
          `exited (${child?.exitCode ?? child?.signalCode ?? "not started"}) while starting`,
        );
      }
      const found = await probe();
      if (found !== undefined) return found;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw this.failure(timeoutMessage);
  }

  private failure(what: string): CliError {
    return new CliError(`${this.spec.name} ${what}. Last lines of ${this.logFile}:\n${tailOf(this.logFile)}`);
  }
}

function tailOf(file: string, lines = 20): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log yet)";
  }
}
