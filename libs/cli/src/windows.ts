import { parseArgs } from "node:util";
import { COMMON_OPTIONS } from "./common.js";
import { controlCall, controlEndpoint } from "./control.js";
import { CliError } from "./errors.js";
import { table } from "./format.js";

export const WINDOWS_USAGE = `holdfast windows [--json] [--data-dir DIR] [--config FILE]

Lists each provider key's rate-limit window as the gateways last read it from the
provider's headers, refilled to now: what is left of each dimension (requests, tokens,
input and output tokens), its limit and when it is whole again. Keys are shown by id, a
hash of the upstream and the key; the key itself is never stored.

SHAPE is how the window was read to refill, and from how many readings: continuous
(evenly, until whole at its reset), fixed (whole again at once at its reset), sliding
(a sliding log: what each call spent comes back a window after it, which the budget
service counts from the calls it granted), irregular (in steps; acted on as fixed) or
unknown (not told yet; nothing is counted back before the reset).`;

/** One key's window as the control API answers it. */
export interface WindowBody {
  key_id: string;
  upstream: string;
  gateway: string;
  observed_at: string;
  cooldown_until: string | null;
  dimensions: {
    dimension: string;
    limit: number;
    remaining_read: number;
    remaining_now: number;
    reset_at: string | null;
    shape: string;
    shape_readings: number;
  }[];
}

export async function windows(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: COMMON_OPTIONS });
  if (values.help) return void console.log(WINDOWS_USAGE);
  if (positionals.length > 0) throw new CliError(`windows takes no arguments\n\n${WINDOWS_USAGE}`, 2);
  const { windows } = await controlCall<{ windows: WindowBody[] }>(
    controlEndpoint(values),
    "GET",
    "/windows",
  );
  if (values.json) return void console.log(JSON.stringify(windows, null, 2));
  if (windows.length === 0) {
    return void console.log("No rate-limit windows read yet (no provider answered with rate-limit headers).");
  }
  const now = Date.now();
  const rows: string[][] = [];
  for (const window of windows) {
    for (const d of window.dimensions) {
      rows.push([
        window.key_id,
        window.upstream,
        d.dimension,
        `${d.remaining_now}/${d.limit || "?"}`,
        `${d.shape || "unknown"} (${d.shape_readings} reading${d.shape_readings === 1 ? "" : "s"})`,
        d.reset_at === null ? "-" : inSeconds(Date.parse(d.reset_at) - now),
        window.cooldown_until === null
          ? "-"
          : `retry in ${inSeconds(Date.parse(window.cooldown_until) - now)}`,
        `${inSeconds(now - Date.parse(window.observed_at))} ago`,
      ]);
    }
  }
  console.log(
    table(["KEY", "UPSTREAM", "DIMENSION", "LEFT NOW", "SHAPE", "FULL IN", "COOLDOWN", "READ"], rows),
  );
}

function inSeconds(ms: number): string {
  return ms <= 0 ? "0s" : `${(ms / 1_000).toFixed(ms < 10_000 ? 1 : 0)}s`;
}
