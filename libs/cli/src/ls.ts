import { parseArgs } from "node:util";
import type { RunRow } from "@holdfast/analytics";
import { analyticsCall, COMMON_OPTIONS, configFrom } from "./common.js";
import { ago, fromClickHouseTime, table, usd } from "./format.js";
import { requireStack } from "./stack.js";

export const LS_USAGE = `holdfast ls [--limit N] [--json] [--data-dir DIR] [--config FILE]

Lists runs, most recently active first, from the ClickHouse projection.`;

export async function ls(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { ...COMMON_OPTIONS, limit: { type: "string", default: "100" } },
  });
  if (values.help) return void console.log(LS_USAGE);
  const stack = requireStack(configFrom(values));
  const { runs } = await analyticsCall<{ runs: RunRow[] }>(
    `${stack.analyticsUrl}/v1/runs?limit=${encodeURIComponent(values.limit)}`,
  );
  if (values.json) return void console.log(JSON.stringify(runs, null, 2));
  if (runs.length === 0) return void console.log("No runs yet. Send a call through the gateway.");
  console.log(
    table(
      ["RUN", "TAG", "MODEL", "STATUS", "STEPS", "FAILED", "TOKENS IN", "TOKENS OUT", "COST", "LAST SEEN"],
      runs.map((r) => [
        r.run_id,
        r.tag || "-",
        r.model || "-",
        r.status,
        r.steps,
        r.failed,
        r.input_tokens,
        r.output_tokens,
        usd(r.cost_usd, r.unpriced_steps),
        ago(fromClickHouseTime(r.last_seen)),
      ]),
    ),
  );
  if (runs.some((r) => r.unpriced_steps > 0)) console.log("\n+ some steps of this run have no known price.");
}
