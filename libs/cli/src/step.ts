import type { Bus } from "@holdfast/bus";
import type { RunView, StepView } from "@holdfast/events";
import {
  assembleAnswer,
  openSnapshots,
  type StepSnapshot,
  stepJson as snapshotJson,
} from "@holdfast/snapshots";
import { CliError } from "./errors.js";
import { terminalSafe } from "./format.js";

/** Which bytes `holdfast show <run> <step> --raw` prints. */
export const RAW_SIDES = ["request", "client", "answer"] as const;
export type RawSide = (typeof RAW_SIDES)[number];

/** A step of a run, by its number in `holdfast show <run>`, with its snapshot read back. */
export interface ShownStep {
  readonly view: StepView;
  readonly snapshot: StepSnapshot;
}

/** Reads step number `n` of the run `state` folds, and its snapshot from the buckets. */
export async function readStep(bus: Bus, state: RunView, n: number): Promise<ShownStep> {
  const view = state.steps.find((s) => s.step === n);
  if (view === undefined) {
    throw new CliError(
      `run ${JSON.stringify(state.runId)} has no step ${n} (it has ${state.steps.length}: 1 to ${state.steps.length})`,
    );
  }
  const reader = await openSnapshots(bus);
  return { view, snapshot: await reader.step(state.runId, view.stepId) };
}

/** A step number as given on the command line. */
export function stepNumber(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1)
    throw new CliError(`a step is a number from 1 (got ${JSON.stringify(text)})`, 2);
  return n;
}

/** The bytes of one side, exactly as stored (--raw). */
export function rawSide(shown: ShownStep, side: RawSide): string {
  const { request, answer, missing } = shown.snapshot;
  const text =
    side === "request" ? request?.forwardedText : side === "client" ? request?.clientText : answer?.text;
  if (text !== undefined) return text;
  if (side === "client" && request !== undefined)
    throw new CliError("Holdfast forwarded this request as the client sent it: see --raw request");
  throw new CliError(
    `this step's ${side === "answer" ? "answer" : "request"} is not stored (${missing.join("; ")})`,
  );
}

/** A step as `--json` prints it (and the control API's GET runs/:id/steps/:n answers it). */
export function stepJson(runId: string, shown: ShownStep): unknown {
  return snapshotJson(runId, shown.view, shown.snapshot);
}

/** A step as `holdfast show <run> <step>` prints it for a person. */
export function renderStep(runId: string, shown: ShownStep): string {
  const { view, snapshot } = shown;
  const { request, answer } = snapshot;
  const lines = [
    `run         ${runId}`,
    `step        ${view.step} (${view.stepId})`,
    `api         ${view.api}${view.stream ? ", streamed" : ""}`,
    `model       ${view.model || "-"}`,
    `status      ${view.status}${view.upstreamStatus === null ? "" : ` (provider ${view.upstreamStatus})`}`,
  ];
  if (snapshot.missing.length > 0) lines.push(`missing     ${snapshot.missing.join("; ")}`);
  if (request !== undefined) {
    const note = request.redacted > 0 ? `, ${request.redacted} piece(s) redacted` : "";
    lines.push(
      "",
      `Request as forwarded (${request.forwarded.bytes} bytes${note})`,
      "",
      pretty(request.forwardedText),
    );
    if (request.clientText !== undefined) {
      lines.push(
        "",
        `Request as the client sent it (${request.client?.bytes ?? 0} bytes)`,
        "",
        pretty(request.clientText),
      );
    }
  }
  if (answer !== undefined) {
    const content = answer.body ?? answer.events;
    const note = answer.redacted > 0 ? ", redacted" : "";
    if (answer.events !== undefined) {
      const said = assembleAnswer(view.api, answer.text, true);
      const calls = said.toolCalls.map((c) => `  tool call   ${c.name}(${c.arguments})`);
      lines.push(
        "",
        `Answer: ${answer.status}, a stream of ${content?.bytes ?? 0} bytes${note}; put together:`,
        "",
        said.text,
        ...calls,
        "",
        "Its events as received:",
        "",
        answer.text.trimEnd(),
      );
    } else {
      lines.push(
        "",
        `Answer: ${answer.status}, ${content?.bytes ?? 0} bytes${note}`,
        "",
        pretty(answer.text),
      );
    }
  }
  return terminalSafe(lines.join("\n"));
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function pretty(text: string): string {
  const value = parsed(text);
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}
