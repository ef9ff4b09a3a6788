import { parseArgs } from "node:util";
import { connectBus } from "@holdfast/bus";
import { describeRun, type RunView } from "@holdfast/events";
import { COMMON_OPTIONS, configFrom } from "./common.js";
import { CliError } from "./errors.js";
import { ago, nanoUsd, table, usd } from "./format.js";
import { natsUrlFor } from "./stack.js";

export const SHOW_USAGE = `holdfast show <run> [--json] [--data-dir DIR] [--config FILE]

Shows one run as folded from its events in JetStream (the projector need not be running).`;

export async function show(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: COMMON_OPTIONS });
  if (values.help) return void console.log(SHOW_USAGE);
  const runId = positionals[0];
  if (runId === undefined || positionals.length > 1)
    throw new CliError(`give exactly one run id\n\n${SHOW_USAGE}`, 2);
  const config = configFrom(values);
  const bus = await connectBus({
    servers: natsUrlFor(config),
    prefix: config.nats.prefix,
    name: "holdfast-cli",
  });
  let state: RunView;
  try {
    const history = await bus.readRun(runId);
    if (history.events.length === 0) throw new CliError(`no run named ${JSON.stringify(runId)}`);
    state = describeRun(
      runId,
      history.events.map((e) => e.envelope),
    );
  } finally {
    await bus.close();
  }
  if (values.json) return void console.log(JSON.stringify(state, null, 2));
  console.log(render(state));
}

function render(s: RunView): string {
  const id = s.identifiedBy;
  const how = id
    ? id.source === "fingerprint"
      ? `fingerprint ${id.fingerprint}, generation ${id.generation}`
      : id.key
        ? `${id.source} ${id.key}`
        : id.source
    : "-";
  const head = [
    `run         ${s.runId}`,
    `status      ${s.status}${s.inFlight > 0 ? ` (${s.inFlight} call${s.inFlight === 1 ? "" : "s"} in flight)` : ""}`,
    `tag         ${s.tag || "-"}`,
    `model       ${s.model || "-"}`,
    `identified  ${how}`,
    `steps       ${s.steps.length} (${s.completed} completed, ${s.failed} failed)`,
    `tokens      ${s.totals.inputTokens} in (${s.totals.cachedInputTokens} cached, ${s.totals.cacheWriteTokens} written to cache), ${s.totals.outputTokens} out (${s.totals.reasoningTokens} reasoning)`,
    `cost        ${usd(s.totals.costNanoUsd / 1e9, s.totals.unpricedSteps)}${s.totals.unpricedSteps > 0 ? ` (${s.totals.unpricedSteps} step(s) unpriced)` : ""}${s.totals.estimatedSteps > 0 ? ` (${s.totals.estimatedSteps} step(s) estimated: their outcome was lost with a gateway)` : ""}`,
    `first seen  ${s.firstSeenMs ? new Date(s.firstSeenMs).toISOString() : "-"}`,
    `last seen   ${s.lastSeenMs ? `${new Date(s.lastSeenMs).toISOString()} (${ago(s.lastSeenMs)})` : "-"}`,
  ];
  const steps = table(
    ["STEP", "STATUS", "API", "MODEL", "STREAM", "HTTP", "IN", "CACHED", "OUT", "COST", "LATENCY", "DETAIL"],
    s.steps.map((step) => [
      step.step,
      step.status,
      step.api,
      step.model,
      step.stream ? "yes" : "no",
      step.upstreamStatus ?? "-",
      step.inputTokens,
      step.cachedInputTokens,
      step.outputTokens,
      step.status === "in_flight" ? "-" : `${nanoUsd(step.costNanoUsd)}${step.estimated ? " (est.)" : ""}`,
      step.latencyMs === null ? "-" : `${step.latencyMs}ms`,
      step.failure
        ? `${step.failure.reason}: ${step.failure.message}`.slice(0, 80)
        : step.toolCalls.length > 0
          ? `tool calls: ${step.toolCalls.join(", ")}`
          : step.finishReason,
    ]),
  );
  return `${head.join("\n")}\n\n${steps}`;
}
