import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { type Config, loadConfig } from "@holdfast/config";
import { CliError } from "./errors.js";
import { readStack, type StackFile } from "./stack.js";

/** Options every reading command takes. */
export const COMMON_OPTIONS = {
  "data-dir": { type: "string" },
  config: { type: "string" },
  json: { type: "boolean", default: false },
  help: { type: "boolean", default: false },
} as const;

export function configFrom(values: { "data-dir"?: string | undefined; config?: string | undefined }): Config {
  return loadConfig({ file: configFileOf(values), overrides: { data_dir: values["data-dir"] } });
}

/** Where a data dir is when no configuration names one: --data-dir, HOLDFAST_DATA_DIR, else ~/.holdfast. */
export function dataDirOf(values: { "data-dir"?: string | undefined }): string {
  const named = values["data-dir"] ?? process.env.HOLDFAST_DATA_DIR;
  if (named !== undefined && named !== "") return resolve(named.replace(/^~(?=\/|$)/, homedir()));
  return join(homedir(), ".holdfast");
}

/**
 * The configuration file a command reads: --config, else HOLDFAST_CONFIG (which
 * loadConfig reads itself), else `<data_dir>/holdfast.yaml` when there is one (where
 * `holdfast init` writes it: out of any checkout, readable by its owner alone).
 */
export function configFileOf(values: {
  "data-dir"?: string | undefined;
  config?: string | undefined;
}): string | undefined {
  if (values.config) return resolve(values.config);
  if ((process.env.HOLDFAST_CONFIG ?? "") !== "") return undefined;
  const beside = join(dataDirOf(values), CONFIG_FILE);
  return existsSync(beside) ? beside : undefined;
}

/** The file `holdfast init` writes in the data dir, and every command reads from there. */
export const CONFIG_FILE = "holdfast.yaml";

/**
 * The configuration a command that talks to the running stack acts with, and that stack
 * (undefined when none runs on the data dir): the file named by --config or
 * HOLDFAST_CONFIG, else the file the running `up` was started with (holdfast.json records
 * it: its tokens, ports and prefix are the stack's), with HOLDFAST_* from the environment
 * over either.
 */
export function stackConfig(values: { "data-dir"?: string | undefined; config?: string | undefined }): {
  config: Config;
  stack: StackFile | undefined;
} {
  const config = configFrom(values);
  const stack = readStack(config.data_dir);
  const named = configFileOf(values) !== undefined || (process.env.HOLDFAST_CONFIG ?? "") !== "";
  if (named || stack?.configFile === undefined) return { config, stack };
  return {
    config: loadConfig({ file: resolve(stack.configFile), overrides: { data_dir: values["data-dir"] } }),
    stack,
  };
}

/** A host a server listens on, as a client on this machine reaches it. */
export function reachable(host: string): string {
  if (host === "0.0.0.0") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}

/**
 * Calls the projector's analytics API with a control token (read-only or not, when one is
 * configured) and returns its JSON, or a CliError with its message.
 */
export async function analyticsCall<T>(
  url: string,
  token: string | undefined,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<T> {
  const headers = { ...init.headers, ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) };
  let response: Response;
  try {
    response = await fetch(url, { ...init, headers, signal: AbortSignal.timeout(60_000) });
  } catch (error) {
    throw new CliError(`cannot reach the projector at ${url}: ${(error as Error).message}`);
  }
  const body = (await response.json().catch(() => ({}))) as { error?: { message?: string } } & T;
  if (response.status === 401) {
    throw new CliError(
      `${body.error?.message ?? "the analytics API needs a token"}\nThe token comes from control.read_token or control.token in the config file (--config FILE, HOLDFAST_CONFIG, or the file \`holdfast up\` was started with), HOLDFAST_CONTROL__READ_TOKEN, or else the ones \`holdfast up\` made in <data_dir>/credentials/.`,
    );
  }
  if (!response.ok) throw new CliError(body.error?.message ?? `projector answered ${response.status}`);
  return body;
}
