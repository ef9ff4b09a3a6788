import { reachable, stackConfig } from "./common.js";
import { localTokens } from "./credentials.js";
import { CliError } from "./errors.js";

export const API_PREFIX = "/holdfast/v1";

/** Where the control REST API is and the tokens to call it with. */
export interface ControlEndpoint {
  /** Origin of the API, e.g. http://127.0.0.1:4142. */
  url: string;
  controlToken: string | undefined;
  readToken: string | undefined;
}

/**
 * The control API as this command should reach it: `control.url`, else the running
 * stack's (holdfast.json), else `http://<control.host>:<control.port>`. Tokens come from
 * the configuration (`--config`, HOLDFAST_CONFIG, HOLDFAST_CONTROL__TOKEN); when no file
 * is named, from the file the running stack was started with.
 */
export function controlEndpoint(values: {
  "data-dir"?: string | undefined;
  config?: string | undefined;
}): ControlEndpoint {
  const { config, stack } = stackConfig(values);
  const url =
    config.control.url ??
    stack?.controlUrl ??
    `http://${reachable(config.control.host)}:${config.control.port}`;
  const tokens = localTokens(config);
  return { url, controlToken: tokens.control, readToken: tokens.read };
}

/** The token the projector's analytics API is called with: the least that may read. */
export function readingToken(endpoint: ControlEndpoint): string | undefined {
  return endpoint.readToken ?? endpoint.controlToken;
}

/**
 * Calls the control API and returns its JSON, or a CliError with its message (and, for a
 * refused token, where the token comes from).
 */
export async function controlCall<T>(
  endpoint: ControlEndpoint,
  method: "GET" | "POST" | "DELETE",
  path: string,
  body?: unknown,
): Promise<T> {
  // The control token does everything; with only the read-only one, changes get a clear 403.
  const token = endpoint.controlToken ?? endpoint.readToken;
  const headers: Record<string, string> = {};
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const target = `${endpoint.url}${API_PREFIX}${path}`;
  let response: Response;
  try {
    response = await fetch(target, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
  } catch (error) {
    throw new CliError(
      `cannot reach the control API at ${endpoint.url}: ${(error as Error).message}. Is Holdfast up (holdfast up), or control.url set?`,
    );
  }
  const answer = (await response.json().catch(() => ({}))) as {
    error?: { code?: string; message?: string };
  } & T;
  if (response.ok) return answer;
  const message = answer.error?.message ?? `the control API answered ${response.status}`;
  if (response.status === 401 || response.status === 403) {
    throw new CliError(`${message}\n${TOKEN_SOURCES}`);
  }
  throw new CliError(message, response.status === 400 ? 2 : 1);
}

/** Where a refused command's token came from, for the operator to check. */
export const TOKEN_SOURCES =
  "The token comes from control.token in the config file (--config FILE, HOLDFAST_CONFIG, or the file `holdfast up` was started with), HOLDFAST_CONTROL__TOKEN, or else the one `holdfast up` made in <data_dir>/credentials/control.token.";

/** A standing hold rule, as the control API answers it. */
export interface RuleBody {
  rule_id: string;
  description: string;
  reason: string;
  actor: string;
  added_at: string;
}
