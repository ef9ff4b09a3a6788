import { parseArgs } from "node:util";
import { connectBus } from "@holdfast/bus";
import {
  type ControlView,
  describeRun,
  durableRunOf,
  type PredictionView,
  type RunView,
  runViewJson,
  type StepView,
  type TripView,
  type WindowLimits,
} from "@holdfast/events";
import type { DurableRun } from "@holdfast/proto";
import { type Bundle, bundleRun, bundleStepShown, readBundle } from "./bundle.js";
import { COMMON_OPTIONS, stackConfig } from "./common.js";
import { renderDurable } from "./durable.js";
import { CliError } from "./errors.js";
import { ago, nanoUsd, table, terminalSafe, usd } from "./format.js";
import { readerConnection } from "./stack.js";
import {
  RAW_SIDES,
  type RawSide,
  rawSide,
  readStep,
  renderStep,
  type ShownStep,
  stepJson,
  stepNumber,
} from "./step.js";

export const SHOW_USAGE = `holdfast show <run> [--json] [--data-dir DIR] [--config FILE]
holdfast show <run> <step> [--json | --raw [request|client|answer]]
holdfast show --bundle FILE [<step>] [--json | --raw [request|client|answer]]

Shows one run as folded from its events in JetStream (the projector need not be running):
its steps, why it is held or stopped (the limit and the figures, or who and why), its
calls parked now, the answers the tool-call gate held (what the model asked for: tool,
arguments, the rule that matched), its trips, holds, resumes and stops in order, and any
of its events that were quarantined (set aside, not folded: why, and their first bytes).

With a step (its number, as the run's steps are listed): what that step asked and was
answered, from its snapshot: the request as forwarded, the request as the client sent it
where Holdfast changed it, and the provider's answer (a stream's events as received), as
stored (redacted). --raw prints one of them byte for byte (the request as forwarded by
default), --json all of them with each part parsed.

With --bundle, the same from a bundle holdfast export wrote, with no stack running: the
run folded again from the events it holds.`;

export async function show(argv: string[]): Promise<void> {
  // --raw takes an optional side: "--raw" alone, or "--raw answer".
  const args = argv.flatMap((arg, i) =>
    arg === "--raw" && !RAW_SIDES.includes(argv[i + 1] as RawSide) ? ["--raw", "request"] : [arg],
  );
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { ...COMMON_OPTIONS, raw: { type: "string" }, bundle: { type: "string" } },
  });
  if (values.help) return void console.log(SHOW_USAGE);
  // A bundle names its run: all that is left to give is a step.
  const bundle = values.bundle === undefined ? undefined : readBundle(values.bundle);
  const [runId, step] = bundle === undefined ? positionals : [bundle.runId, ...positionals];
  if (runId === undefined || positionals.length > (bundle === undefined ? 2 : 1))
    throw new CliError(`give a run id (or --bundle FILE), and a step if you want one\n\n${SHOW_USAGE}`, 2);
  const stepAsked = step === undefined ? undefined : stepNumber(step);
  if (values.raw !== undefined && stepAsked === undefined)
    throw new CliError("--raw shows one step: give its number", 2);
  if (values.raw !== undefined && values.json) throw new CliError("give --raw or --json, not both", 2);
  if (values.raw !== undefined && !RAW_SIDES.includes(values.raw as RawSide))
    throw new CliError(`--raw shows one of ${RAW_SIDES.join(", ")}`, 2);
  const read = bundle === undefined ? await fromLog(values, runId, stepAsked) : fromBundle(bundle, stepAsked);
  const { state, durable, shown } = read;
  if (shown !== undefined) {
    // Byte for byte, with nothing added: what was sent can be sent again.
    if (values.raw !== undefined) {
      const bytes = rawSide(shown, values.raw as RawSide);
      // To a terminal, what a provider sent could drive it (escape sequences): made safe
      // there, byte for byte everywhere else.
      return void process.stdout.write(process.stdout.isTTY ? terminalSafe(bytes) : bytes);
    }
    if (values.json) return void console.log(JSON.stringify(stepJson(runId, shown), null, 2));
    return void console.log(renderStep(runId, shown));
  }
  // As the control API's GET runs/:id answers it.
  if (values.json) return void console.log(JSON.stringify(runViewJson(state, durable), null, 2));
  console.log(terminalSafe(renderRun(state)));
  // A durable run's own part: its agent, where it stands, and each step it recorded.
  if (durable !== undefined) console.log(`\nDurable run\n\n${terminalSafe(renderDurable(durable))}`);
}

interface Shown {
  readonly state: RunView;
  readonly durable: DurableRun | undefined;
  readonly shown: ShownStep | undefined;
}

/** The run (and the step asked for) from the running stack's log and snapshots. */
async function fromLog(
  values: { "data-dir"?: string | undefined; config?: string | undefined },
  runId: string,
  stepAsked: number | undefined,
): Promise<Shown> {
  // The running stack's own file when none is named: its NATS prefix is where its runs are.
  const { config } = stackConfig(values);
  const bus = await connectBus({ ...readerConnection(config), name: "holdfast-cli" });
  try {
    const history = await bus.readRun(runId);
    if (history.events.length === 0 && history.quarantined.length === 0)
      throw new CliError(`no run named ${JSON.stringify(runId)}`);
    const state = describeRun(runId, history);
    return {
      state,
      durable: durableRunOf(
        runId,
        history.events.map((e) => e.envelope),
      ),
      shown: stepAsked === undefined ? undefined : await readStep(bus, state, stepAsked),
    };
  } finally {
    await bus.close();
  }
}

/** The same from a bundle: the run folded again from the events it holds. */
function fromBundle(bundle: Bundle, stepAsked: number | undefined): Shown {
  const { view, log } = bundleRun(bundle);
  return {
    state: view,
    durable: durableRunOf(
      bundle.runId,
      log.events.map((e) => e.envelope),
    ),
    shown: stepAsked === undefined ? undefined : bundleStepShown(bundle, view, stepAsked),
  };
}

/** A run as `holdfast show` prints it. Pure but for the clock. */
export function renderRun(s: RunView, now = Date.now()): string {
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
    ...holdLines(s, now),
    `tag         ${s.tag || "-"}`,
    `model       ${s.model || "-"}`,
    `prompt      ${s.promptHash || "-"}`,
    `identified  ${how}`,
    `steps       ${s.steps.length} (${s.completed} completed, ${s.failed} failed)`,
    `tokens      ${s.totals.inputTokens} in (${s.totals.cachedInputTokens} cached, ${s.totals.cacheWriteTokens} written to cache), ${s.totals.outputTokens} out (${s.totals.reasoningTokens} reasoning)`,
    `cost        ${usd(s.totals.costNanoUsd / 1e9, s.totals.unpricedSteps)}${s.totals.unpricedSteps > 0 ? ` (${s.totals.unpricedSteps} step(s) unpriced)` : ""}${s.totals.estimatedSteps > 0 ? ` (${s.totals.estimatedSteps} step(s) estimated, see below)` : ""}`,
    `first seen  ${s.firstSeenMs ? new Date(s.firstSeenMs).toISOString() : "-"}`,
    `last seen   ${s.lastSeenMs ? `${new Date(s.lastSeenMs).toISOString()} (${ago(s.lastSeenMs, now)})` : "-"}`,
    ...windowLines(s),
    ...(s.quarantined.length === 0
      ? []
      : [
          `quarantined ${s.quarantined.length} event${s.quarantined.length === 1 ? "" : "s"} set aside, not folded (listed below)`,
        ]),
  ];
  const steps = table(
    [
      "STEP",
      "STATUS",
      "API",
      "MODEL",
      "PROMPT",
      "STREAM",
      "HTTP",
      "IN",
      "CACHED",
      "OUT",
      "COST",
      "LATENCY",
      "PREDICT",
      "DETAIL",
    ],
    s.steps.map((step) => [
      step.step,
      step.status,
      step.api,
      step.model,
      step.promptHash || "-",
      step.stream ? "yes" : "no",
      step.upstreamStatus ?? "-",
      step.inputTokens,
      step.cachedInputTokens,
      step.outputTokens,
      step.status === "in_flight"
        ? "-"
        : `${nanoUsd(step.costNanoUsd)}${step.estimated || step.unknownPrice ? " (est.)" : ""}`,
      step.latencyMs === null ? "-" : `${step.latencyMs}ms`,
      predictCell(step),
      step.failure
        ? `${step.failure.reason}: ${step.failure.message}`.slice(0, 80)
        : step.toolCalls.length > 0 || step.toolCallsOmitted > 0
          ? `tool calls: ${step.toolCalls.join(", ")}${step.toolCallsOmitted > 0 ? ` and ${step.toolCallsOmitted} more` : ""}`
          : step.finishReason,
    ]),
  );
  const estimated = estimateLines(s);
  const estimates = estimated.length === 0 ? "" : `\n\n${estimated.join("\n")}`;
  const predicted = predictionLines(s);
  const predictions = predicted.length === 0 ? "" : `\n\n${predicted.join("\n")}`;
  const routed = routeLines(s);
  const routes = routed.length === 0 ? "" : `\n\n${routed.join("\n")}`;
  const gates = s.gates.length === 0 ? "" : `\n\n${gateLines(s).join("\n")}`;
  const control = s.control.length === 0 ? "" : `\n\n${controlTable(s)}`;
  const quarantined = s.quarantined.length === 0 ? "" : `\n\n${quarantineLines(s).join("\n")}`;
  return `${head.join("\n")}\n\n${steps}${estimates}${predictions}${routes}${gates}${control}${quarantined}`;
}

/**
 * The run's events that readers set aside: where the log keeps each (its stream
 * sequence), why, and its first bytes. What they claim is whatever someone wrote into the
 * log: the table writes its control characters out (terminalSafe).
 */
function quarantineLines(s: RunView): string[] {
  const rows = table(
    ["STREAM SEQ", "RUN SEQ", "TYPE", "REASON", "BYTES", "DETAIL"],
    s.quarantined.map((q) => [
      q.streamSequence ?? "-",
      q.sequence > 0 ? q.sequence : "-",
      q.type || "-",
      q.reason,
      q.bytes,
      q.detail.slice(0, 100),
    ]),
  );
  const previews = s.quarantined.map((q) => `  ${q.streamSequence ?? "-"}: ${q.preview || "(empty)"}`);
  return [
    "quarantined events (set aside, not folded; each stays in the log at its stream sequence)",
    rows,
    "first bytes (hex)",
    ...previews,
  ];
}

function holdLines(s: RunView, now: number): string[] {
  const lines: string[] = [];
  const hold = s.hold;
  if (hold !== null) {
    const what = hold.action === "stop" ? "stopped" : "held";
    const since = `since ${new Date(hold.sinceMs).toISOString()} (${ago(hold.sinceMs, now)})`;
    const why =
      hold.kind === "trip" && hold.trip !== null
        ? hold.trip.limit === "rate_limit"
          ? `by rate-limit prediction (a checkpoint): ${tripFigures(hold.trip, s)}`
          : `by a limit: ${tripFigures(hold.trip, s)}`
        : hold.kind === "gate" || hold.kind === "loop"
          ? `by the tool-call gate (${hold.ruleId}): ${hold.reason}`
          : `by ${hold.actor || hold.kind}${hold.ruleId ? `, standing rule ${hold.ruleId}` : ""}${hold.reason ? `: ${hold.reason}` : ""}`;
    lines.push(`${what.padEnd(12)}${since} ${why}`);
  }
  if (s.parked > 0)
    lines.push(
      `parked      ${s.parked} call${s.parked === 1 ? "" : "s"} parked, waiting for a resume or a stop`,
    );
  return lines;
}

// Arguments shown per held answer; the whole (redacted) text is in --json.
const SHOWN_ARGUMENTS = 400;

/** The answers the gate held: what the model asked for, the rule, what became of it. */
function gateLines(s: RunView): string[] {
  const lines = ["tool-call gate"];
  // With several answers held, `approve <run>` decides them all: each names its own.
  const several = s.gates.filter((gate) => gate.status === "pending").length > 1;
  for (const gate of s.gates) {
    const which = several ? ` --gate ${gate.gateId}` : "";
    const args =
      gate.arguments.length > SHOWN_ARGUMENTS
        ? `${gate.arguments.slice(0, SHOWN_ARGUMENTS)}…`
        : gate.arguments;
    const fate =
      gate.status === "pending"
        ? `PENDING (${gate.action === "stop" ? "run stopped" : "run held"}): holdfast approve ${s.runId}${which} | holdfast deny ${s.runId}${which}`
        : `${gate.status} by ${gate.decidedBy || "-"}${gate.decisionReason ? `: "${gate.decisionReason}"` : ""}`;
    lines.push(
      `  step ${gate.step}  ${gate.kind === "loop" ? "loop" : "gated"}  ${fate}`,
      `    tool       ${gate.tool}`,
      `    arguments  ${args || "-"}`,
      `    rule       ${gate.rule}: ${gate.ruleText}`,
    );
    const others = gate.toolCalls.filter(
      (call) => call.name !== gate.tool || call.arguments !== gate.arguments,
    );
    if (others.length > 0) lines.push(`    also asked ${others.map((call) => call.name).join(", ")}`);
    lines.push(`    gate id    ${gate.gateId}`);
  }
  return lines;
}

function windowLines(s: RunView): string[] {
  const w = s.window;
  // Only worth a line once the run has been resumed (a new window) or has limits of its own.
  if (w.limits === null && !s.control.some((c) => c.what === "resumed")) return [];
  const limits = w.limits === null ? "the configured limits" : `its own limits: ${limitsText(w.limits)}`;
  return [
    `window      since ${new Date(w.startedMs).toISOString()}: ${w.steps} step${w.steps === 1 ? "" : "s"}, ${usd(w.costNanoUsd / 1e9)}; ${limits}`,
  ];
}

function controlTable(s: RunView): string {
  return table(
    ["#", "AT", "WHAT", "BY", "DETAIL"],
    s.control.map((c) => [c.sequence, new Date(c.atMs).toISOString(), c.what, byOf(c), controlDetail(c, s)]),
  );
}

function byOf(c: ControlView): string {
  if (c.what === "parked" || c.what === "unparked" || c.what === "compacted") return c.gateway || "-";
  return c.actor || "-";
}

function controlDetail(c: ControlView, s: RunView): string {
  const parts: string[] = [];
  switch (c.what) {
    case "tripped":
      if (c.trip !== null) parts.push(tripFigures(c.trip, s));
      parts.push(c.action === "stop" ? "stopped (on_trip: stop)" : "held");
      break;
    case "parked":
      parts.push(`call ${c.parkId}`);
      break;
    case "unparked":
      parts.push(`call ${c.parkId}: ${c.how}`);
      break;
    case "gated":
    case "loop":
      parts.push(c.reason, `rule ${c.ruleId}`, c.action === "stop" ? "run stopped" : "run held");
      break;
    case "compacted": {
      const k = c.compaction;
      if (k === null) break;
      const why = k.why === "too_large" ? "too large for its key's window" : "asked by an operator";
      if (k.prefixMessages === 0) {
        parts.push(`${k.mode} (${why}): nothing old enough to drop (${k.messagesBefore} messages)`);
        break;
      }
      parts.push(
        `${k.mode} (${why}): ${k.messagesBefore} -> ${k.messagesAfter} messages, ${k.bytesBefore} -> ${k.bytesAfter} bytes (~${k.tokensBefore} -> ~${k.tokensAfter} tokens)`,
      );
      if (k.summaryModel !== "")
        parts.push(`summary by ${k.summaryModel}: ${k.summaryInputTokens} in, ${k.summaryOutputTokens} out`);
      break;
    }
    case "abandoned":
      parts.push(
        `held answer dropped: ${c.reason === "client_gone" ? "its client went away" : "its gateway shut down"}`,
      );
      break;
    default:
      if (c.reason) parts.push(`"${c.reason}"`);
      if (c.selector) parts.push(`selector ${c.selector}`);
      if (c.ruleId) parts.push(`standing rule ${c.ruleId}`);
      if (c.limits !== null) parts.push(`new window: ${limitsText(c.limits)}`);
      if (c.compact !== "") parts.push(`compact: ${c.compact}`);
  }
  return parts.join("; ") || "-";
}

/** A trip's limit and what was spent, in the limit's own unit: USD, steps, minutes, tokens. */
export function tripFigures(trip: TripView, s?: RunView): string {
  const step = trip.crossedByStepId
    ? s?.steps.find((candidate) => candidate.stepId === trip.crossedByStepId)?.step
    : undefined;
  const crossed = step === undefined ? "" : ` (crossed by step ${step})`;
  switch (trip.limit) {
    case "cost":
      return `cost ${usd(trip.spentValue / 1e9)} of a ${usd(trip.limitValue / 1e9)} limit${crossed}`;
    case "steps":
      return `${trip.spentValue} steps of a ${trip.limitValue}-step limit`;
    case "minutes":
      return `${minutes(trip.spentValue)} of a ${minutes(trip.limitValue)} window`;
    case "tokens_per_minute":
      return `${trip.spentValue} tokens in the last minute, limit ${trip.limitValue} a minute`;
    case "daily_budget":
    case "monthly_budget":
      return `${trip.limit === "daily_budget" ? "daily" : "monthly"} budget ${JSON.stringify(trip.budgetKey)} for ${trip.period}: ${usd(trip.spentValue / 1e9)} of ${usd(trip.limitValue / 1e9)}${crossed}`;
    default:
      if (trip.limit === "rate_limit" && trip.prediction !== null) {
        const p = trip.prediction;
        return `${figuresText(p)}; resumes at ${p.resumeAtMs > 0 ? isoTime(p.resumeAtMs) : "-"}`;
      }
      return `${trip.limit}: ${trip.spentValue} of ${trip.limitValue}`;
  }
}

function limitsText(limits: WindowLimits): string {
  const parts: string[] = [];
  if (limits.maxSteps > 0) parts.push(`${limits.maxSteps} steps`);
  if (limits.maxCostNanoUsd > 0) parts.push(usd(limits.maxCostNanoUsd / 1e9));
  if (limits.maxMinutes > 0) parts.push(`${limits.maxMinutes} min`);
  if (limits.maxTokensPerMinute > 0) parts.push(`${limits.maxTokensPerMinute} tokens/min`);
  return parts.length === 0 ? "the configured limits" : parts.join(", ");
}

function minutes(ms: number): string {
  const value = ms / 60_000;
  return `${Number.isInteger(value) ? value : value.toFixed(1)} min`;
}

/** What prediction did before a step: went on, waited (how long), and the retries after a 429. */
function predictCell(step: StepView): string {
  const p = step.prediction;
  const parts: string[] = [];
  if (p !== null) parts.push(p.action === "wait" ? `wait ${seconds(p.waitedMs)}` : p.action);
  if (step.retries.length > 0)
    parts.push(`${step.retries.length} retr${step.retries.length === 1 ? "y" : "ies"}`);
  return parts.join(", ") || "-";
}

/** Where each call to a routed alias went and why, with every target's standing; and each fallback. */
/** Why each step whose usage or cost is not the provider's figure priced is what it is. */
function estimateLines(s: RunView): string[] {
  const lines: string[] = [];
  for (const step of s.steps) {
    const problem = step.usageProblem === "" ? "" : ` (${step.usageProblem})`;
    const usage = USAGE_ESTIMATES[step.usageEstimate];
    if (usage !== undefined) lines.push(`  step ${step.step}  usage estimated: ${usage}${problem}`);
    else if (problem !== "")
      lines.push(`  step ${step.step}  usage as the provider reported it, rounded${problem}`);
    if (step.unknownPrice) {
      lines.push(
        `  step ${step.step}  ${step.model} has no known price: charged at pricing.unknown_usd_per_mtok (a cost limit or budget applies)`,
      );
    }
  }
  return lines.length === 0 ? [] : ["estimated", ...lines];
}

const USAGE_ESTIMATES: Readonly<Record<string, string>> = {
  gateway_lost:
    "its outcome was lost with its gateway; the input its start estimated, the run's usual output",
  invalid:
    "the provider's report could not be used; the input estimated from the request, the run's usual output",
  missing:
    "the provider reported none, or its answer could not be read; the input estimated from the request, the run's usual output",
  partial: "the answer was cut off midway; its output estimated from what was relayed",
};

function routeLines(s: RunView): string[] {
  const lines: string[] = [];
  for (const step of s.steps) {
    if (step.route !== null) lines.push(`  step ${step.step}  ${routeText(step.route)}`);
    for (const retry of step.retries) {
      if (retry.route === null) continue;
      const why = retry.upstreamStatus === 0 ? "no answer" : `${retry.upstreamStatus}`;
      lines.push(`  step ${step.step}  after ${why}, attempt ${retry.attempt}: ${routeText(retry.route)}`);
    }
  }
  return lines.length === 0 ? [] : ["routing", ...lines];
}

function routeText(route: NonNullable<StepView["route"]>): string {
  const standings = route.candidates.map((c) => {
    const figure =
      c.standing === "ready"
        ? ` ${Math.round(c.headroom * 100)}% headroom`
        : c.standing === "wait"
          ? ` ${seconds(c.waitMs)}`
          : c.untilMs > 0
            ? ` until ${isoTime(c.untilMs)}`
            : "";
    return `#${c.target} ${c.standing}${figure}`;
  });
  return `${route.alias} -> #${route.target} ${route.model} at ${route.upstream} (${route.reason.replace("_", " ")}; ${standings.join(", ")})`;
}

/** The figures of every prediction that did more than let a call through, and every retry. */
function predictionLines(s: RunView): string[] {
  const lines: string[] = [];
  for (const step of s.steps) {
    const p = step.prediction;
    if (p !== null && p.action !== "continue") {
      lines.push(`  step ${step.step}  ${p.action} ${seconds(p.waitedMs)}: ${figuresText(p)}`);
    }
    for (const retry of step.retries) {
      if (retry.route !== null) continue;
      lines.push(
        `  step ${step.step}  retry ${retry.attempt} after ${retry.upstreamStatus}, waited ${seconds(retry.retryAfterMs)}; ${retry.wastedInputTokens} input tokens sent again`,
      );
    }
  }
  if (s.totals.retries > 0) {
    lines.push(
      `  waste: ${s.totals.wastedInputTokens} input tokens re-sent over ${s.totals.retries} retr${s.totals.retries === 1 ? "y" : "ies"}`,
    );
  }
  return lines.length === 0 ? [] : ["rate-limit prediction", ...lines];
}

/** A prediction's figures: the window's dimension, what was left, what the call needed and why. */
export function figuresText(p: PredictionView): string {
  const window =
    p.dimension === ""
      ? "the key cooling down after a 429"
      : `${p.remaining} ${p.dimension.replace("_", " ")} left of ${p.limit}`;
  return `key ${p.keyId}: ${window}, needed ${p.needed} (estimate ${p.estimatedTotalTokens} = ${p.estimatedInputTokens} in${p.exactInput ? " (tokenizer)" : ""} + ${p.estimatedOutputTokens} out, σ ${p.sigma}, k ${p.k})`;
}

/** A time a payload gave, as RFC 3339; what is no date at all is shown as the number it is. */
function isoTime(ms: number): string {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? `${ms} ms (no date)` : date.toISOString();
}

function seconds(ms: number): string {
  return `${(ms / 1_000).toFixed(1)}s`;
}
