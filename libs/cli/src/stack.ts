import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Config, natsConnection } from "@holdfast/config";
import { readCredentials } from "./credentials.js";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";

/** What `holdfast up` started, written under the data dir so other commands can find it. */
export interface StackFile {
  pid: number;
  startedAt: string;
  dataDir: string;
  gatewayUrl: string;
  natsUrl: string;
  analyticsUrl: string;
  upstream: string;
  logsDir: string;
  /** Origin of the control REST API (routes under /holdfast/v1). */
  controlUrl?: string;
  /** host:port of the control gRPC API (holdfast.v1.Control). */
  controlGrpc?: string;
  /** host:port of the budget service (budgets and the fleet's shared rate-limit windows). */
  budgetUrl?: string;
  /** host:port of the scheduler's gRPC API (holdfast.v1.Runs: durable runs and their workers). */
  schedulerGrpc?: string;
  /** Origin of the scheduler's REST API (routes under /v1). */
  schedulerUrl?: string;
  /** The config file `up` was started with: where the other commands find the control token. */
  configFile?: string;
  /** Where the stack's credentials are (NATS nkeys per service, the tokens): readable by its owner alone. */
  credentialsDir?: string;
}

export const stackPath = (dataDir: string) => join(dataDir, "holdfast.json");

export function writeStack(stack: StackFile): void {
  mkdirSync(stack.dataDir, { recursive: true });
  const path = stackPath(stack.dataDir);
  writeFileSync(`${path}.tmp`, `${JSON.stringify(stack, null, 2)}\n`);
  renameSync(`${path}.tmp`, path);
}

export function removeStack(dataDir: string): void {
  rmSync(stackPath(dataDir), { force: true });
}

/** The running stack on this data dir, or undefined (a file left by a dead process is ignored). */
export function readStack(dataDir: string): StackFile | undefined {
  let stack: StackFile;
  try {
    stack = JSON.parse(readFileSync(stackPath(dataDir), "utf8")) as StackFile;
  } catch {
    return undefined;
  }
  return isAlive(stack.pid) ? stack : undefined;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

export function requireStack(config: Config): StackFile {
  const stack = readStack(config.data_dir);
  if (!stack) {
    throw new CliError(
      `Holdfast is not running on data dir ${config.data_dir}. Start it with \`${holdfastCommand()} up\` (or pass --data-dir).`,
    );
  }
  return stack;
}

/**
 * NATS for commands that read the log, as the reader (a credential that may read the log
 * and write nothing; its replies come to the reader's own inbox): the configured server with
 * the configured credential (the reader's, or the admin's), else the running stack's.
 */
export function readerConnection(config: Config) {
  if (config.nats.url) return { ...natsConnection(config.nats), principal: "reader" as const };
  const stack = requireStack(config);
  return {
    ...natsConnection(config.nats),
    servers: stack.natsUrl,
    credentials: readCredentials(config.data_dir)?.nats.reader.file,
    principal: "reader" as const,
  };
}
