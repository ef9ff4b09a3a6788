import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

// The processes a benchmark starts, each as a deployment would run it, and what they print
// when they are ready.

export const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** What `holdfast up` records in its data dir once it is up. */
export interface UpFile {
  gatewayUrl: string;
  analyticsUrl: string;
  natsUrl: string;
  budgetUrl: string;
  /** host:port of the durable-run API (holdfast.v1.Runs). */
  schedulerGrpc: string;
  schedulerUrl: string;
  /** The control API's origin (REST under /holdfast/v1). */
  controlUrl: string;
}

/**
 * What a reader sends for a service's health details (lag, pid): the read token `holdfast
 * up` made in the data dir. Without it a health route answers liveness only.
 */
export function readerHeaders(dataDir: string): Record<string, string> {
  const token = readFileSync(join(dataDir, "credentials", "read.token"), "utf8").trim();
  return { authorization: `Bearer ${token}` };
}

/** What an operator sends to change runs through the control API: its control token. */
export function controlHeaders(dataDir: string): Record<string, string> {
  const token = readFileSync(join(dataDir, "credentials", "control.token"), "utf8").trim();
  return { authorization: `Bearer ${token}` };
}

/** Resolves with the first capture of `pattern` in the child's stdout; rejects if it exits first. */
export function firstMatch(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      text += chunk.toString();
      const match = pattern.exec(text);
      if (match) resolve(match[1]!);
    });
    child.once("exit", (code) =>
      reject(new Error(`process exited (${code}) before printing ${pattern}:\n${text}`)),
    );
  });
}

/** The fake provider on a free port; its base URL (without /v1). */
export async function startProvider(children: ChildProcess[]): Promise<string> {
  const provider = spawn(process.execPath, [join(ROOT, "test/fake-provider/dist/main.js"), "--port", "0"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(provider);
  return firstMatch(provider, /listening on (http:\/\/\S+)/);
}

/** `holdfast up` on free ports in `dataDir`, in front of the provider, with an optional config file. */
export async function startUp(
  options: { dataDir: string; providerUrl: string; configFile?: string },
  children: ChildProcess[],
): Promise<{ up: ChildProcess; file: UpFile }> {
  const up = spawn(
    process.execPath,
    [
      join(ROOT, "libs/cli/dist/bin.js"),
      "up",
      "--data-dir",
      options.dataDir,
      "--port",
      "0",
      ...(options.configFile === undefined ? [] : ["--config", options.configFile]),
      "--upstream",
      `${options.providerUrl}/v1`,
    ],
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, HOLDFAST_LOG_LEVEL: "warn" } },
  );
  children.push(up);
  await firstMatch(up, /(Ctrl-C stops everything)/);
  const file = JSON.parse(readFileSync(join(options.dataDir, "holdfast.json"), "utf8")) as UpFile;
  return { up, file };
}

/** Another gateway process on the same event log, on a free port; its origin. */
export async function startExtraGateway(
  options: {
    dataDir: string;
    natsUrl: string;
    providerUrl: string;
    instanceId: string;
    configFile?: string;
    /** The budget service of the stack: the gateway shares its rate-limit windows. */
    budgetUrl?: string;
  },
  children: ChildProcess[],
): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [join(ROOT, "services/gateway/dist/main.js")], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {
      ...process.env,
      ...(options.configFile === undefined ? {} : { HOLDFAST_CONFIG: options.configFile }),
      HOLDFAST_LOG_LEVEL: "info",
      HOLDFAST_DATA_DIR: options.dataDir,
      HOLDFAST_NATS__URL: options.natsUrl,
      HOLDFAST_GATEWAY__PORT: "0",
      HOLDFAST_GATEWAY__UPSTREAM: `${options.providerUrl}/v1`,
      HOLDFAST_GATEWAY__INSTANCE_ID: options.instanceId,
      ...(options.budgetUrl === undefined ? {} : { HOLDFAST_BUDGET__URL: options.budgetUrl }),
      // As `holdfast up` gives its own gateway: the stack's gateway credential, the budget
      // token it presents, and only the digests of the tokens it checks.
      ...gatewayCredentials(options.dataDir),
    },
  });
  children.push(child);
  const port = await firstMatch(child, /"port":(\d+)[^\n]*gateway listening/);
  return { url: `http://127.0.0.1:${port}`, child };
}

/** A gateway's credentials in a stack `holdfast up` made under `dataDir`. */
function gatewayCredentials(dataDir: string): NodeJS.ProcessEnv {
  const secret = (name: string) => readFileSync(join(dataDir, "credentials", name), "utf8").trim();
  const digest = (token: string) => `sha256:${createHash("sha256").update(token).digest("hex")}`;
  return {
    HOLDFAST_NATS__CREDENTIALS: join(dataDir, "credentials", "nats-gateway.nk"),
    HOLDFAST_BUDGET__TOKEN: secret("budget.token"),
    HOLDFAST_CONTROL__TOKEN: digest(secret("control.token")),
    HOLDFAST_CONTROL__READ_TOKEN: digest(secret("read.token")),
  };
}
