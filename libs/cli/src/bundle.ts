import { once } from "node:events";
import { createWriteStream, readFileSync, statSync } from "node:fs";
import { parseArgs } from "node:util";
import { type Bus, connectBus } from "@holdfast/bus";
import {
  describeRun,
  durableRunOf,
  type QuarantinedEvent,
  type RunLog,
  type RunView,
  runViewJson,
  type StoredEnvelope,
} from "@holdfast/events";
import { Envelope } from "@holdfast/proto";
import {
  type AnswerManifest,
  openSnapshots,
  patternDigest,
  type Redaction,
  type RequestManifest,
  type StepSnapshot,
} from "@holdfast/snapshots";
import { COMMON_OPTIONS, stackConfig } from "./common.js";
import { CliError } from "./errors.js";
import { readerConnection } from "./stack.js";
import type { ShownStep } from "./step.js";

export const EXPORT_USAGE = `holdfast export <run> [-o FILE] [--jsonl] [--data-dir DIR] [--config FILE]

Writes one bundle for an incident review: the run as holdfast show folds it, every event
of it decoded (in order, with its stream sequence), every operator decision, every step
with its request and answer exactly as stored (redacted), and the redaction that applied.
-o writes to FILE (default: standard output); --jsonl writes a line per record, as each is
read, instead of one JSON document. holdfast show --bundle FILE [<step>] reads it back with
no stack running. The format is described in docs/snapshots.md.`;

/** The largest bundle `show --bundle` reads (a string JavaScript can hold, with room). */
const MAX_BUNDLE_BYTES = 400 * 1024 * 1024;

/** What a bundle says it is. */
export const BUNDLE_FORMAT = "holdfast.run-bundle";
export const BUNDLE_VERSION = 1;

/** A step as a bundle holds it: its texts exactly as stored. */
export interface BundleStep {
  readonly step: number;
  readonly stepId: string;
  readonly request: {
    readonly api: string;
    readonly text: string;
    readonly clientText?: string;
    readonly bytes: number;
    readonly redactedPieces: number;
    readonly storedAtMs: number;
  } | null;
  readonly answer: {
    readonly status: number;
    readonly streamed: boolean;
    readonly text: string;
    readonly bytes: number;
    readonly redactedPieces: number;
    readonly storedAtMs: number;
  } | null;
  readonly missing: readonly string[];
  readonly redaction: Redaction | null;
}

/** An event as a bundle holds it: the envelope in its JSON form, with its place in the stream. */
export interface BundleEvent {
  readonly streamSequence: number;
  readonly envelope: unknown;
  /** Set when this version could not read the event (a later type or version): kept as it was. */
  readonly unknown?: "type" | "version";
}

export interface Bundle {
  readonly format: typeof BUNDLE_FORMAT;
  readonly version: typeof BUNDLE_VERSION;
  readonly exportedAtMs: number;
  readonly runId: string;
  /** The run as `holdfast show --json` and the control API's GET runs/:id give it. */
  readonly run: unknown;
  readonly events: readonly BundleEvent[];
  /** Messages of the run's subject set aside unread (their bytes in base64). */
  readonly quarantined: readonly unknown[];
  /** Holds, resumes, stops, trips and gate decisions, with who and why, in order. */
  readonly decisions: readonly unknown[];
  readonly steps: readonly BundleStep[];
  /** Every redaction its steps' gateways applied; each pattern by digest, and whether this exporter's configuration has it. */
  readonly redaction: {
    readonly credentials: string;
    readonly patterns: readonly { readonly sha256: string; readonly inExportingConfig: boolean }[];
  };
}

export async function exportRun(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON_OPTIONS,
      output: { type: "string", short: "o" },
      jsonl: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(EXPORT_USAGE);
  const runId = positionals[0];
  if (runId === undefined || positionals.length > 1)
    throw new CliError(`give exactly one run id\n\n${EXPORT_USAGE}`, 2);
  const { config } = stackConfig(values);
  const bus = await connectBus({ ...readerConnection(config), name: "holdfast-cli" });
  const out =
    values.output === undefined ? process.stdout : createWriteStream(values.output, { mode: 0o600 });
  const write = async (text: string) => {
    if (!out.write(text)) await once(out, "drain");
  };
  try {
    const records = bundleRecords(bus, runId, config.redact.patterns);
    if (values.jsonl) {
      for await (const record of records) await write(`${JSON.stringify(record)}\n`);
    } else {
      const all: BundleRecord[] = [];
      for await (const record of records) all.push(record);
      await write(`${JSON.stringify(bundleFromRecords(all), null, 2)}\n`);
    }
  } finally {
    await bus.close();
    if (out !== process.stdout) {
      out.end();
      await once(out, "close");
    }
  }
}

/** One JSONL record of a bundle. */
export type BundleRecord =
  | {
      kind: "header";
      format: typeof BUNDLE_FORMAT;
      version: typeof BUNDLE_VERSION;
      exportedAtMs: number;
      runId: string;
    }
  | { kind: "run"; run: unknown }
  | ({ kind: "event" } & BundleEvent)
  | { kind: "quarantined"; event: unknown }
  | { kind: "decision"; decision: unknown }
  | ({ kind: "step" } & BundleStep)
  | ({ kind: "redaction" } & Bundle["redaction"]);

/**
 * A run's bundle as records, in the order `--jsonl` writes them; each step read when its
 * record is due, so a long run is never held whole.
 */
export async function* bundleRecords(
  bus: Bus,
  runId: string,
  configuredPatterns: readonly string[],
  clock: () => number = Date.now,
): AsyncGenerator<BundleRecord> {
  const history = await bus.readRun(runId);
  if (history.events.length === 0 && history.quarantined.length === 0)
    throw new CliError(`no run named ${JSON.stringify(runId)}`);
  const view = describeRun(runId, history);
  const durable = durableRunOf(
    runId,
    history.events.map((e) => e.envelope),
  );
  yield { kind: "header", format: BUNDLE_FORMAT, version: BUNDLE_VERSION, exportedAtMs: clock(), runId };
  yield { kind: "run", run: runViewJson(view, durable) };
  for (const event of history.events)
    yield { kind: "event", ...eventRecord(event.envelope, event.streamSequence) };
  for (const event of history.quarantined) yield { kind: "quarantined", event: quarantinedJson(event) };
  for (const decision of view.control) yield { kind: "decision", decision };
  // One reader for the whole run: a conversation's steps share most of their pieces.
  const reader = await openSnapshots(bus);
  const digests = new Set<string>();
  let credentials = "";
  for (const step of view.steps) {
    const snapshot = await reader.step(runId, step.stepId);
    for (const digest of snapshot.redaction?.patterns ?? []) digests.add(digest);
    credentials ||= snapshot.redaction?.credentials ?? "";
    yield { kind: "step", ...bundleStep(step.step, step.stepId, snapshot) };
  }
  const configured = new Set(configuredPatterns.map(patternDigest));
  yield {
    kind: "redaction",
    credentials,
    patterns: [...digests].map((sha256) => ({ sha256, inExportingConfig: configured.has(sha256) })),
  };
}

function eventRecord(envelope: StoredEnvelope, streamSequence: number): BundleEvent {
  const json = Envelope.toJSON(envelope as Envelope);
  return "unknown" in envelope && envelope.unknown !== undefined
    ? { streamSequence, envelope: json, unknown: envelope.unknown }
    : { streamSequence, envelope: json };
}

function quarantinedJson(event: QuarantinedEvent): unknown {
  return { ...event, data: Buffer.from(event.data).toString("base64") };
}

function bundleStep(step: number, stepId: string, snapshot: StepSnapshot): BundleStep {
  const { request, answer } = snapshot;
  return {
    step,
    stepId,
    request:
      request === undefined
        ? null
        : {
            api: request.api,
            text: request.forwardedText,
            ...(request.clientText === undefined ? {} : { clientText: request.clientText }),
            bytes: request.forwarded.bytes,
            redactedPieces: request.redacted,
            storedAtMs: request.at,
          },
    answer:
      answer === undefined
        ? null
        : {
            status: answer.status,
            streamed: answer.events !== undefined,
            text: answer.text,
            bytes: (answer.body ?? answer.events)?.bytes ?? 0,
            redactedPieces: answer.redacted,
            storedAtMs: answer.at,
          },
    missing: snapshot.missing,
    redaction: snapshot.redaction ?? null,
  };
}

/** A bundle read back from a file: one JSON document, or JSONL records. */
export function readBundle(path: string): Bundle {
  let text: string;
  try {
    // A bundle past the longest string JavaScript holds cannot be read whole: said so.
    if (statSync(path).size > MAX_BUNDLE_BYTES)
      throw new Error(
        `it is larger than ${MAX_BUNDLE_BYTES / 1024 / 1024} MiB; read its JSONL form a record at a time`,
      );
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new CliError(`cannot read the bundle ${path}: ${(error as Error).message}`);
  }
  const first = text.trimStart();
  let bundle: Bundle;
  try {
    if (first.startsWith('{"kind":"header"')) {
      const records = text
        .split("\n")
        .filter((line) => line.trim() !== "")
        .map((line) => JSON.parse(line) as BundleRecord);
      bundle = bundleFromRecords(records);
    } else bundle = JSON.parse(text) as Bundle;
  } catch (error) {
    throw new CliError(`${path} is not a Holdfast bundle: ${(error as Error).message}`);
  }
  if (
    bundle === null ||
    typeof bundle !== "object" ||
    bundle.format !== BUNDLE_FORMAT ||
    bundle.version !== BUNDLE_VERSION
  )
    throw new CliError(
      `${path} is not a Holdfast bundle of version ${BUNDLE_VERSION} (format ${String(bundle?.format)})`,
    );
  const defect = bundleDefect(bundle);
  if (defect !== undefined) throw new CliError(`${path} is not a bundle holdfast export wrote: ${defect}`);
  return bundle;
}

/** The largest quarantined message a bundle may carry (base64): the log's own bound is far below. */
const MAX_QUARANTINED_CHARS = 16 * 1024 * 1024;

/**
 * What is wrong with a bundle's shape, if anything: a file is read as it was written, or
 * not at all, never half-trusted (a length that is no string's would be allocated whole).
 */
function bundleDefect(bundle: Bundle): string | undefined {
  const isObject = (v: unknown): v is Record<string, unknown> =>
    typeof v === "object" && v !== null && !Array.isArray(v);
  const isCount = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
  if (typeof bundle.runId !== "string") return "its runId is not a string";
  if (!Array.isArray(bundle.events) || !Array.isArray(bundle.steps) || !Array.isArray(bundle.quarantined))
    return "its events, steps and quarantined are not all lists";
  for (const [i, e] of bundle.events.entries()) {
    if (!isObject(e) || !isCount(e.streamSequence) || !isObject(e.envelope))
      return `event ${i + 1} is malformed`;
    if (e.unknown !== undefined && e.unknown !== "type" && e.unknown !== "version")
      return `event ${i + 1} is malformed`;
  }
  for (const [i, q] of bundle.quarantined.entries()) {
    if (
      !isObject(q) ||
      typeof q.data !== "string" ||
      q.data.length > MAX_QUARANTINED_CHARS ||
      !isCount(q.streamSequence)
    )
      return `quarantined message ${i + 1} is malformed`;
  }
  for (const [i, s] of bundle.steps.entries()) {
    if (!isObject(s) || !isCount(s.step) || typeof s.stepId !== "string" || !Array.isArray(s.missing))
      return `step record ${i + 1} is malformed`;
    const side = (v: unknown, fields: readonly string[]) =>
      v === null ||
      (isObject(v) &&
        typeof v.text === "string" &&
        isCount(v.bytes) &&
        fields.every((f) => v[f] !== undefined) &&
        (v.clientText === undefined || typeof v.clientText === "string"));
    if (!side(s.request, ["api"]) || !side(s.answer, ["status", "streamed"]))
      return `step record ${i + 1} is malformed`;
  }
  return undefined;
}

/** The records of a JSONL bundle as one document, synchronously. */
function bundleFromRecords(records: readonly BundleRecord[]): Bundle {
  const header = records.find((r) => r.kind === "header");
  if (header === undefined || header.kind !== "header") throw new Error("it has no header record");
  const strip = <T extends { kind: string }>(r: T) => {
    const { kind: _kind, ...rest } = r;
    return rest;
  };
  const redaction = records.find((r) => r.kind === "redaction");
  return {
    format: header.format,
    version: header.version,
    exportedAtMs: header.exportedAtMs,
    runId: header.runId,
    run: records.flatMap((r) => (r.kind === "run" ? [r.run] : []))[0] ?? null,
    events: records.filter((r) => r.kind === "event").map((r) => strip(r) as BundleEvent),
    quarantined: records.flatMap((r) => (r.kind === "quarantined" ? [r.event] : [])),
    decisions: records.flatMap((r) => (r.kind === "decision" ? [r.decision] : [])),
    steps: records.filter((r) => r.kind === "step").map((r) => strip(r) as BundleStep),
    redaction:
      redaction === undefined ? { credentials: "", patterns: [] } : (strip(redaction) as Bundle["redaction"]),
  };
}

/** The run a bundle holds, folded again from its events as `holdfast show` folds the log. */
export function bundleRun(bundle: Bundle): { view: RunView; log: RunLog } {
  const events = bundle.events.map((e) => {
    const envelope = Envelope.fromJSON(e.envelope);
    const stored = (
      e.unknown === undefined ? envelope : { ...envelope, payload: undefined, unknown: e.unknown }
    ) as StoredEnvelope;
    return { envelope: stored, streamSequence: e.streamSequence };
  });
  const quarantined = bundle.quarantined.map((q) => {
    const event = q as QuarantinedEvent & { data: string };
    return { ...event, data: new Uint8Array(Buffer.from(event.data, "base64")) };
  });
  const log: RunLog = { events, quarantined };
  return { view: describeRun(bundle.runId, log), log };
}

/** Step `n` of a bundle, as `holdfast show` shows a step from the log. */
export function bundleStepShown(bundle: Bundle, view: RunView, n: number): ShownStep {
  const stepView = view.steps.find((s) => s.step === n);
  const stored = bundle.steps.find((s) => s.step === n);
  if (stepView === undefined || stored === undefined) {
    throw new CliError(`the bundle's run has no step ${n} (it has ${bundle.steps.length})`);
  }
  // Its texts are that step's only if the events say so: an edited bundle is refused, not paired up.
  if (stored.stepId !== stepView.stepId) {
    throw new CliError(
      `the bundle's step ${n} is ${stored.stepId}, not the step its events name (${stepView.stepId})`,
    );
  }
  const { request, answer } = stored;
  const base = { v: 1 as const, run: bundle.runId, step: stored.stepId };
  const snapshot: StepSnapshot = {
    ...(request === null
      ? {}
      : {
          request: {
            ...base,
            at: request.storedAtMs,
            api: request.api,
            forwarded: { bytes: request.bytes, parts: [] },
            ...(request.clientText === undefined
              ? {}
              : {
                  client: { bytes: Buffer.byteLength(request.clientText), parts: [] },
                  clientText: request.clientText,
                }),
            redacted: request.redactedPieces,
            forwardedText: request.text,
          } satisfies RequestManifest & { forwardedText: string; clientText?: string },
        }),
    ...(answer === null
      ? {}
      : {
          answer: {
            ...base,
            at: answer.storedAtMs,
            status: answer.status,
            ...(answer.streamed
              ? { events: { bytes: answer.bytes, parts: [] } }
              : { body: { bytes: answer.bytes, parts: [] } }),
            redacted: answer.redactedPieces,
            text: answer.text,
          } satisfies AnswerManifest & { text: string },
        }),
    missing: stored.missing,
    ...(stored.redaction === null ? {} : { redaction: stored.redaction }),
  };
  return { view: stepView, snapshot };
}
