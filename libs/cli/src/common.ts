import { resolve } from "node:path";
import { type Config, loadConfig } from "@holdfast/config";
import { CliError } from "./errors.js";

/** Options every reading command takes. */
export const COMMON_OPTIONS = {
  "data-dir": { type: "string" },
  config: { type: "string" },
  json: { type: "boolean", default: false },
  help: { type: "boolean", default: false },
} as const;

export function configFrom(values: { "data-dir"?: string | undefined; config?: string | undefined }): Config {
  return loadConfig({
    file: values.config ? resolve(values.config) : undefined,
    overrides: { data_dir: values["data-dir"] },
  });
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
      `${body.error?.message ?? "the analytics API needs a token"}\nThe token comes from control.read_token or control.token in the config file (--config FILE, HOLDFAST_CONFIG, or the file \`holdfast up\` was started with) or HOLDFAST_CONTROL__READ_TOKEN.`,
    );
  }
  if (!response.ok) throw new CliError(body.error?.message ?? `projector answered ${response.status}`);
  return body;
}
