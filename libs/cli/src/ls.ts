import { parseArgs } from "node:util";
import type { RunRow } from "@holdfast/analytics";
import { analyticsCall, COMMON_OPTIONS, configFrom } from "./common.js";
import { controlEndpoint, readingToken } from "./control.js";
import { CliError } from "./errors.js";
import { ago, fromClickHouseTime, table, usd } from "./format.js";
import { requireStack } from "./stack.js";

export const LS_USAGE = `holdfast ls [--status S] [--limit N] [--json] [--data-dir DIR] [--config FILE]

Lists runs, most recently active first, from the ClickHouse projection (which trails
the log by up to projector.linger_ms). --status running|idle|held|stopped (and, for
durable runs, queued|finished|failed) lists only those; a held or stopped run shows why
(a limit, an operator's reason, a standing rule) and how many of its calls are parked.
A durable run shows its agent, and its recorded steps in STEPS (its model calls in CALLS).`;

const STATUSES = ["running", "idle", "held", "stopped", "queued", "finished", "failed"];

export async function ls(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { ...COMMON_OPTIONS, limit: { type: "string", default: "100" }, status: { type: "string" } },
  });
  if (values.help) return void console.log(LS_USAGE);
  if (values.status !== undefined && !STATUSES.includes(values.status)) {
    throw new CliError(`--status must be one of ${STATUSES.join(", ")}, got "${values.status}"`, 2);
  }
  const stack = requireStack(configFrom(values));
  const query = new URLSearchParams({ limit: values.limit });
  if (values.status !== undefined) query.set("status", values.status);
  const { runs } = await analyticsCall<{ runs: RunRow[] }>(
    `${stack.analyticsUrl}/v1/runs?${query}`,
    readingToken(controlEndpoint(values)),
  );
  if (values.json) return void console.log(JSON.stringify(runs, null, 2));
  if (runs.length === 0) {
    return void console.log(
      values.status === undefined
        ? "No runs yet. Send a call through the gateway."
        : `No ${values.status} runs.`,
    );
  }
  console.log(
    table(
      [
        "RUN",
        "TAG",
        "AGENT",
        "MODEL",
        "STATUS",
        "STEPS",
        "CALLS",
        "FAILED",
        "TOKENS IN",
        "TOKENS OUT",
        "COST",
        "LAST SEEN",
        "HELD BECAUSE",
      ],
      runs.map((r) => [
        r.run_id,
        r.tag || "-",
        r.agent || "-",
        r.model || "-",
        r.status,
        r.agent ? r.durable_steps : r.steps,
        r.steps,
        r.failed,
        r.input_tokens,
        r.output_tokens,
        usd(r.cost_usd, r.unpriced_steps),
        ago(fromClickHouseTime(r.last_seen)),
        heldBecause(r),
      ]),
    ),
  );
  if (runs.some((r) => r.unpriced_steps > 0)) console.log("\n+ some steps of this run have no known price.");
}

/** Why a held or stopped run is, with its parked calls; "-" for the others. */
export function heldBecause(row: Pick<RunRow, "status" | "hold_reason" | "parked_calls">): string {
  if (row.status !== "held" && row.status !== "stopped") return "-";
  const parked = Number(row.parked_calls);
  return `${row.hold_reason || row.status}${parked > 0 ? ` (${parked} call${parked === 1 ? "" : "s"} parked)` : ""}`;
}
