import { parseArgs } from "node:util";
import { type Bus, connectBus } from "@holdfast/bus";
import { describeRun, type RunView, type StepView } from "@holdfast/events";
import {
  type AssembledAnswer,
  assembleAnswer,
  openSnapshots,
  type SnapshotReader,
} from "@holdfast/snapshots";
import { COMMON_OPTIONS, stackConfig } from "./common.js";
import { CliError } from "./errors.js";
import { nanoUsd, terminalSafe } from "./format.js";
import { readerConnection } from "./stack.js";
import { stepNumber } from "./step.js";

export const DIFF_USAGE = `holdfast diff <runA> <runB> [<step>] [--json] [--data-dir DIR] [--config FILE]

Puts two runs' answers side by side, step by step (or one step of each): the model that
answered, tokens, cost, the tool calls with their arguments, and the text as a line diff
(- runA, + runB), from their snapshots. Steps are matched by number.`;

/** One step of both runs, side by side. */
export interface StepDiff {
  readonly step: number;
  readonly a: SideOfStep | null;
  readonly b: SideOfStep | null;
  /** The answers' text, line by line: " " both, "-" only A, "+" only B. */
  readonly text: readonly { readonly op: " " | "-" | "+"; readonly line: string }[];
  readonly toolCallsEqual: boolean;
}

export interface SideOfStep {
  readonly model: string;
  readonly status: string;
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly costNanoUsd: number | null;
  readonly toolCalls: readonly { readonly name: string; readonly arguments: string }[];
  readonly finishReason: string;
  readonly text: string;
  /** Why its answer could not be read, if it could not. */
  readonly missing: readonly string[];
}

export async function diff(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: COMMON_OPTIONS });
  if (values.help) return void console.log(DIFF_USAGE);
  const [runA, runB, step] = positionals;
  if (runA === undefined || runB === undefined || positionals.length > 3)
    throw new CliError(`give two run ids, and a step if you want one\n\n${DIFF_USAGE}`, 2);
  const only = step === undefined ? undefined : stepNumber(step);
  const { config } = stackConfig(values);
  const bus = await connectBus({ ...readerConnection(config), name: "holdfast-cli" });
  let diffs: StepDiff[];
  try {
    diffs = await diffRuns(bus, runA, runB, only);
  } finally {
    await bus.close();
  }
  if (values.json) return void console.log(JSON.stringify({ runA, runB, steps: diffs }, null, 2));
  console.log(terminalSafe(renderDiff(runA, runB, diffs)));
}

/** Both runs' steps (or step `only` of each), their answers read from the snapshots and compared. */
export async function diffRuns(bus: Bus, runA: string, runB: string, only?: number): Promise<StepDiff[]> {
  const [a, b] = await Promise.all([runOf(bus, runA), runOf(bus, runB)]);
  const reader = await openSnapshots(bus);
  const last = Math.max(a.steps.length, b.steps.length);
  const numbers = only === undefined ? Array.from({ length: last }, (_, i) => i + 1) : [only];
  if (only !== undefined && !a.steps.some((s) => s.step === only) && !b.steps.some((s) => s.step === only))
    throw new CliError(`neither run has a step ${only}`);
  const diffs: StepDiff[] = [];
  for (const n of numbers) {
    const [sa, sb] = await Promise.all([sideOf(reader, a, n), sideOf(reader, b, n)]);
    diffs.push({
      step: n,
      a: sa,
      b: sb,
      text: lineDiff(sa?.text ?? "", sb?.text ?? ""),
      toolCallsEqual: sameCalls(sa?.toolCalls ?? [], sb?.toolCalls ?? []),
    });
  }
  return diffs;
}

async function runOf(bus: Bus, runId: string): Promise<RunView> {
  const history = await bus.readRun(runId);
  if (history.events.length === 0 && history.quarantined.length === 0)
    throw new CliError(`no run named ${JSON.stringify(runId)}`);
  return describeRun(runId, history);
}

async function sideOf(reader: SnapshotReader, run: RunView, n: number): Promise<SideOfStep | null> {
  const view: StepView | undefined = run.steps.find((s) => s.step === n);
  if (view === undefined) return null;
  const snapshot = await reader.step(run.runId, view.stepId);
  const answer: AssembledAnswer | undefined =
    snapshot.answer === undefined
      ? undefined
      : assembleAnswer(view.api, snapshot.answer.text, snapshot.answer.events !== undefined);
  return {
    model: answer?.model || view.model,
    status: view.status,
    inputTokens: view.inputTokens,
    outputTokens: view.outputTokens,
    costNanoUsd: view.costNanoUsd,
    toolCalls: answer?.toolCalls ?? [],
    finishReason: answer?.finishReason ?? view.finishReason,
    text: answer?.text ?? "",
    missing: snapshot.missing.filter((m) => m.startsWith("answer")),
  };
}

/** Tool calls compared by name and by their arguments parsed (key order and spacing aside). */
export function sameCalls(
  a: readonly { name: string; arguments: string }[],
  b: readonly { name: string; arguments: string }[],
): boolean {
  return (
    a.length === b.length &&
    a.every((call, i) => call.name === b[i]!.name && sameJson(call.arguments, b[i]!.arguments))
  );
}

function sameJson(a: string, b: string): boolean {
  try {
    return canonical(JSON.parse(a)) === canonical(JSON.parse(b));
  } catch {
    return a === b;
  }
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([x], [y]) =>
      x < y ? -1 : x > y ? 1 : 0,
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** The most lines of each side a diff lines up; past them the rest is shown removed and added. */
const MAX_DIFF_LINES = 2_000;

/** A line diff by longest common subsequence: " " in both, "-" only in `a`, "+" only in `b`. */
export function lineDiff(a: string, b: string): { op: " " | "-" | "+"; line: string }[] {
  const x = a === "" ? [] : a.split("\n");
  const y = b === "" ? [] : b.split("\n");
  const m = Math.min(x.length, MAX_DIFF_LINES);
  const n = Math.min(y.length, MAX_DIFF_LINES);
  // lengths[i][j]: the longest common subsequence of x[i..m) and y[j..n).
  const lengths = Array.from({ length: m + 1 }, () => new Uint32Array(n + 1));
  for (let i = m - 1; i >= 0; i--) {
    for (let j = n - 1; j >= 0; j--) {
      lengths[i]![j] =
        x[i] === y[j] ? lengths[i + 1]![j + 1]! + 1 : Math.max(lengths[i + 1]![j]!, lengths[i]![j + 1]!);
    }
  }
  const out: { op: " " | "-" | "+"; line: string }[] = [];
  let i = 0;
  let j = 0;
  while (i < m && j < n) {
    if (x[i] === y[j]) {
      out.push({ op: " ", line: x[i]! });
      i += 1;
      j += 1;
    } else if (lengths[i + 1]![j]! >= lengths[i]![j + 1]!) out.push({ op: "-", line: x[i++]! });
    else out.push({ op: "+", line: y[j++]! });
  }
  while (i < x.length) out.push({ op: "-", line: x[i++]! });
  while (j < y.length) out.push({ op: "+", line: y[j++]! });
  return out;
}

/** Two runs' steps as `holdfast diff` prints them. */
export function renderDiff(runA: string, runB: string, diffs: readonly StepDiff[]): string {
  const lines = [`- ${runA}`, `+ ${runB}`];
  for (const d of diffs) {
    lines.push("", `step ${d.step}`);
    const row = (label: string, f: (s: SideOfStep) => string) => {
      const va = d.a === null ? "(no step)" : f(d.a);
      const vb = d.b === null ? "(no step)" : f(d.b);
      lines.push(
        va === vb
          ? `  ${label.padEnd(11)} ${va}`
          : `  ${label.padEnd(11)} - ${va}\n  ${"".padEnd(11)} + ${vb}`,
      );
    };
    row("model", (s) => s.model || "-");
    row("status", (s) => s.status);
    row("tokens", (s) => `${s.inputTokens} in, ${s.outputTokens} out`);
    row("cost", (s) => nanoUsd(s.costNanoUsd));
    row("finish", (s) => s.finishReason || "-");
    row("tool calls", (s) =>
      s.toolCalls.length === 0 ? "none" : s.toolCalls.map((c) => `${c.name}(${c.arguments})`).join(", "),
    );
    for (const side of [d.a, d.b]) {
      if (side !== null && side.missing.length > 0) lines.push(`  missing     ${side.missing.join("; ")}`);
    }
    if (d.text.every((t) => t.op === " ")) lines.push(`  text        same (${d.text.length} lines)`);
    else {
      lines.push("  text");
      for (const t of d.text) lines.push(`    ${t.op} ${t.line}`);
    }
  }
  return lines.join("\n");
}
