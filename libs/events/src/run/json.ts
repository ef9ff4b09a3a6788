import {
  type AgentView,
  type DurableRun,
  durableStatusToJSON,
  RunFailure,
  runFailureToJSON,
} from "@holdfast/proto";
import type { RunView } from "./view.js";

// Runs as JSON for people and their scripts: the REST APIs (control, scheduler) answer
// them this way, and the CLI's --json prints the same, so one spelling (snake_case, like
// the projection's rows and SQL columns) holds everywhere a run is read as JSON.

/**
 * A run folded from its events, with its durable part when it is a durable run: what the
 * control API's `GET runs/:id` answers and `holdfast show --json` prints.
 */
export function runViewJson(view: RunView, durable?: DurableRun): Record<string, unknown> {
  const json = snakeCaseKeys(view) as Record<string, unknown>;
  if (durable !== undefined) json.durable = durableRunJson(durable);
  return json;
}

/**
 * A durable run as the runs REST API answers it and `holdfast runs … --json` prints it:
 * every field, its input and output as JSON values (not strings of JSON; `output` null
 * until it has one), its status and failure as lowercase names.
 */
export function durableRunJson(
  run: DurableRun,
  /** Whether a parsed input or output is to be shown as its text instead (nested too deep to serialize, say). */
  asText: (value: unknown) => boolean = () => false,
): Record<string, unknown> {
  const { inputJson, outputJson, status, failure, ...rest } = run;
  return {
    ...(snakeCaseKeys(rest) as Record<string, unknown>),
    status: durableStatusToJSON(status)
      .replace(/^DURABLE_STATUS_/, "")
      .toLowerCase(),
    failure:
      failure === RunFailure.RUN_FAILURE_UNSPECIFIED
        ? null
        : runFailureToJSON(failure)
            .replace(/^RUN_FAILURE_/, "")
            .toLowerCase(),
    input: jsonValue(inputJson, asText),
    output: jsonValue(outputJson, asText),
  };
}

/** A deployed agent as the runs REST API answers it and `holdfast deploy --json` prints it. */
export function agentViewJson(agent: AgentView): Record<string, unknown> {
  return snakeCaseKeys(agent) as Record<string, unknown>;
}

/** camelCase keys (as the TypeScript and ts-proto objects have them) as snake_case, all the way down. */
export function snakeCaseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(snakeCaseKeys);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) out[snakeCase(key)] = snakeCaseKeys(inner);
  return out;
}

// A long run's view repeats the same few dozen keys thousands of times.
const SNAKE = new Map<string, string>();

function snakeCase(key: string): string {
  let snake = SNAKE.get(key);
  if (snake === undefined) {
    snake = key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    if (SNAKE.size < 10_000) SNAKE.set(key, snake);
  }
  return snake;
}

/** The value a JSON text holds; the text itself when it is not JSON; null for none. */
function jsonValue(text: string, asText: (value: unknown) => boolean): unknown {
  if (text === "") return null;
  try {
    const value: unknown = JSON.parse(text);
    return asText(value) ? text : value;
  } catch {
    return text;
  }
}
