import { scrubSecrets } from "@holdfast/providers";
import { redactStrings } from "./redact.js";
import { pieceEndsAfter } from "./split.js";
import {
  type AnswerManifest,
  INLINE_CHARS,
  manifestKey,
  type RequestManifest,
  redactionOf,
  type StoredText,
  storedValues,
} from "./store.js";
import { redactStream } from "./stream.js";

/**
 * Puts a value under a key of one bucket; rejects when it was not stored. `deferred`: it
 * may wait a moment to share a write with the next publish (an answer's, with the call's
 * outcome, which waits so too).
 */
export type Put = (key: string, value: string, deferred: boolean) => Promise<void>;

export interface SnapshotWriterOptions {
  /** SNAPSHOT_PARTS. */
  readonly putPart: Put;
  /** SNAPSHOT_STEPS. */
  readonly putManifest: Put;
  /** redact.patterns: each match is stored as [redacted]. */
  readonly patterns: readonly string[];
  readonly clock?: () => number;
  /** Runs whose last request is remembered, to start the next one's manifest from it. */
  readonly maxRuns?: number;
  /** Manifests in a chain of bases at most: past it a request's manifest names every piece. */
  readonly maxDepth?: number;
  /** Addresses known stored, not written again (forgotten all at once past this many). */
  readonly maxKnown?: number;
  /** Characters of remembered requests kept at most, over every run (the oldest go first). */
  readonly maxRememberedChars?: number;
  /** snapshots.max_bytes: a request or answer larger is not stored; its manifest says why. */
  readonly maxBytes?: number;
  /** A snapshot could not be stored: the call goes on; this is told why. */
  readonly onFailure?: (error: unknown, what: { runId: string; stepId: string; side: "q" | "a" }) => void;
}

/** The last request of a run this gateway stored (one per side): the next starts from its pieces. */
interface Remembered {
  readonly step: string;
  readonly side: "forwarded" | "client";
  readonly text: string;
  readonly ends: readonly number[];
  readonly keys: readonly string[];
  /** Each piece's length as stored (redacted), in UTF-8 bytes. */
  readonly sizes: readonly number[];
  readonly depth: number;
  readonly secrets: string;
}

const REDACTED = "[redacted]";

/**
 * The most pieces one text is cut into: past it the rest is one piece. A body of a
 * million tiny elements would otherwise cost a write, a hash and a manifest entry each.
 */
export const MAX_PIECES = 4_096;

/** One snapshot's writes, and whether they may wait to share a write with the call's outcome. */
interface Writes {
  readonly list: Promise<void>[];
  readonly deferred: boolean;
}

/**
 * Stores each step's request and answer by content, on the gateway that made the call.
 * Nothing here is awaited on the client's path: a write is queued with the step's own
 * events (the same round of writes) and its acknowledgement handled when it comes. A
 * write that fails never fails the call; it is counted and told.
 *
 * What is stored is redacted first: the call's own credentials and anything shaped like a
 * key (the scrubber every recorded string goes through), and every match of
 * redact.patterns. The traffic is never changed. Headers are never stored.
 */
export class SnapshotWriter {
  private readonly patterns: readonly RegExp[];
  private readonly runs = new Map<string, Remembered>();
  private readonly known = new Set<string>();
  private readonly clock: () => number;
  private readonly maxRuns: number;
  private readonly maxDepth: number;
  private readonly maxKnown: number;
  private readonly maxRememberedChars: number;
  private readonly maxBytes: number;
  private rememberedChars = 0;
  /** Pieces being written now: one twice in a text, or in two calls at once, is written once. */
  private readonly writing = new Map<string, Promise<void>>();
  /** Snapshot sides (a request's, an answer's) stored, and not stored. */
  readonly counts = { stored: 0, failed: 0 };
  /** The redaction this writer applies, stored as a piece every manifest names. */
  private readonly redaction: { key: string; values: [string, string][] };

  constructor(private readonly options: SnapshotWriterOptions) {
    this.patterns = options.patterns.map((pattern) => new RegExp(pattern, "gu"));
    this.clock = options.clock ?? Date.now;
    this.maxRuns = options.maxRuns ?? 2_048;
    this.maxDepth = options.maxDepth ?? 64;
    this.maxKnown = options.maxKnown ?? 200_000;
    this.maxRememberedChars = options.maxRememberedChars ?? 64 * 1024 * 1024;
    this.maxBytes = options.maxBytes ?? 32 * 1024 * 1024;
    // Stored as it is, not scrubbed: it holds digests and fixed words, no content.
    this.redaction = storedValues(JSON.stringify(redactionOf(options.patterns)));
  }

  /**
   * Stores a step's request: as forwarded, and as the client sent it when that differs.
   * Resolves true once stored (never rejects).
   */
  request(
    runId: string,
    stepId: string,
    api: string,
    forwarded: Buffer | string,
    client: Buffer | string | undefined,
    secrets: readonly string[],
  ): Promise<boolean> {
    const writes: Writes = { list: [], deferred: false };
    const text = typeof forwarded === "string" ? forwarded : forwarded.toString("utf8");
    const secretsTag = secrets.join("\n");
    const remembered: Remembered[] = [];
    const side = (which: "forwarded" | "client", sideText: string) => {
      const stored = this.text(runId, stepId, which, sideText, secrets, secretsTag, writes);
      if (stored.remembered !== undefined) remembered.push(stored.remembered);
      return stored;
    };
    const sent = side("forwarded", text);
    let redacted = sent.redacted;
    let clientText: StoredText | undefined;
    if (client !== undefined) {
      const asSent = typeof client === "string" ? client : client.toString("utf8");
      if (asSent !== text) {
        const stored = side("client", asSent);
        redacted += stored.redacted;
        clientText = stored.stored;
      }
    }
    const manifest: RequestManifest = {
      v: 1,
      run: runId,
      step: stepId,
      at: this.clock(),
      api,
      forwarded: sent.stored,
      ...(clientText === undefined ? {} : { client: clientText }),
      redacted,
      ...this.redactionPiece(writes),
    };
    // The manifest last: once it is stored, every piece it names is; and only then may a
    // later step build on it.
    return this.finish(
      writes,
      manifestKey(runId, stepId, "q"),
      manifest,
      { runId, stepId, side: "q" },
      () => {
        for (const entry of remembered) this.remember(runId, entry);
      },
    );
  }

  /**
   * One side of a request, as stored: its pieces written (those not known stored), and
   * its manifest entry, starting from the pieces it shares with the same side of the run's
   * last request here.
   */
  private text(
    runId: string,
    stepId: string,
    which: "forwarded" | "client",
    text: string,
    secrets: readonly string[],
    secretsTag: string,
    writes: Writes,
  ): { stored: StoredText; redacted: number; remembered?: Remembered } {
    const length = Buffer.byteLength(text);
    if (length > this.maxBytes) {
      return {
        stored: { bytes: length, parts: [], omitted: `larger than snapshots.max_bytes (${this.maxBytes})` },
        redacted: 0,
      };
    }
    const found = this.runs.get(memoryKey(which, runId));
    // A call admitted twice (after a hold) is the same step: it never builds on itself.
    const prev =
      found !== undefined && found.step !== stepId && found.secrets === secretsTag ? found : undefined;
    const shared = prev === undefined ? 0 : sharedPieces(prev, text);
    // What the last request shared is cut as it was: only what follows is read.
    const ends = capped(pieceEndsAfter(text, prev?.ends ?? [], shared));
    const keys: string[] = prev === undefined ? [] : prev.keys.slice(0, shared);
    const sizes: number[] = prev === undefined ? [] : prev.sizes.slice(0, shared);
    let redacted = 0;
    let start = shared === 0 ? 0 : ends[shared - 1]!;
    for (let i = shared; i < ends.length; i++) {
      const stored = this.piece(text.slice(start, ends[i]), secrets, writes);
      if (stored.redacted) redacted += 1;
      keys.push(stored.key);
      sizes.push(stored.bytes);
      start = ends[i]!;
    }
    const bytes = sizes.reduce((sum, size) => sum + size, 0);
    const depth = shared > 0 && prev !== undefined && prev.depth < this.maxDepth ? prev.depth + 1 : 0;
    const stored: StoredText =
      depth > 0 && prev !== undefined
        ? {
            bytes,
            parts: keys.slice(shared),
            base: {
              step: prev.step,
              parts: shared,
              ...(which === "client" ? { side: "client" as const } : {}),
            },
          }
        : { bytes, parts: keys };
    return {
      stored,
      redacted,
      remembered: { step: stepId, side: which, text, ends, keys, sizes, depth, secrets: secretsTag },
    };
  }

  /** Stores a step's answer: a whole body, or a stream's events as received. Resolves true once stored. */
  answer(
    runId: string,
    stepId: string,
    status: number,
    answer: { readonly body: string } | { readonly events: string; readonly omitted?: number },
    secrets: readonly string[],
  ): Promise<boolean> {
    const writes: Writes = { list: [], deferred: true };
    const text = "body" in answer ? answer.body : answer.events;
    // A stream past the bound was not kept whole as it came: how long it was is all there is.
    const length =
      "omitted" in answer && answer.omitted !== undefined ? answer.omitted : Buffer.byteLength(text);
    const over = length > this.maxBytes;
    let content: StoredText;
    let redacted = false;
    if (over)
      content = { bytes: length, parts: [], omitted: `larger than snapshots.max_bytes (${this.maxBytes})` };
    else if (text.length <= INLINE_CHARS) {
      const clean = this.redact(text, secrets, "events" in answer);
      redacted = clean !== text;
      content = { bytes: Buffer.byteLength(clean), parts: [], text: clean };
    } else {
      const stored = this.piece(text, secrets, writes, "events" in answer);
      redacted = stored.redacted;
      content = { bytes: stored.bytes, parts: [stored.key] };
    }
    const manifest: AnswerManifest = {
      v: 1,
      run: runId,
      step: stepId,
      at: this.clock(),
      status,
      ...("body" in answer ? { body: content } : { events: content }),
      redacted: redacted ? 1 : 0,
      ...this.redactionPiece(writes),
    };
    return this.finish(writes, manifestKey(runId, stepId, "a"), manifest, { runId, stepId, side: "a" });
  }

  /** Forgets a run's last request (its calls now go to another gateway, or it ended). */
  forget(runId: string): void {
    for (const which of ["forwarded", "client"] as const) this.drop(memoryKey(which, runId));
  }

  /**
   * The redaction's address, its piece written with the first manifest (and again after a
   * failure); none when it is the one every gateway applies (credentials, no patterns).
   */
  private redactionPiece(writes: Writes): { redaction?: string } {
    if (this.patterns.length === 0) return {};
    const { key, values } = this.redaction;
    this.write(key, values, writes);
    return { redaction: key };
  }

  /** Writes a piece unless it is known stored or being written (then its write is waited on). */
  private write(key: string, values: [string, string][], writes: Writes): void {
    if (this.known.has(key)) return;
    const inFlight = this.writing.get(key);
    if (inFlight !== undefined) {
      writes.list.push(inFlight);
      return;
    }
    const written = Promise.all(values.map(([k, v]) => this.options.putPart(k, v, writes.deferred))).then(
      () => {
        // Known once its writes are acknowledged; a failure leaves it to be written again.
        if (this.known.size >= this.maxKnown) this.known.clear();
        this.known.add(key);
      },
    );
    this.writing.set(key, written);
    const settled = () => this.writing.delete(key);
    written.then(settled, settled);
    writes.list.push(written);
  }

  /**
   * What is stored of a text: credentials and redact.patterns taken out of every string in
   * it, and, for a stream, out of the text its events carry joined.
   */
  private redact(raw: string, secrets: readonly string[], stream = false): string {
    const clean = (value: string) => {
      let cleaned = scrubSecrets(value, secrets);
      for (const pattern of this.patterns) cleaned = cleaned.replace(pattern, REDACTED);
      return cleaned;
    };
    const text = redactStrings(raw, clean);
    return stream ? redactStream(text, clean) : text;
  }

  private piece(
    raw: string,
    secrets: readonly string[],
    writes: Writes,
    stream = false,
  ): { key: string; bytes: number; redacted: boolean } {
    const text = this.redact(raw, secrets, stream);
    const { key, values } = storedValues(text);
    this.write(key, values, writes);
    return { key, bytes: Buffer.byteLength(text), redacted: text !== raw };
  }

  private finish(
    writes: Writes,
    key: string,
    manifest: RequestManifest | AnswerManifest,
    what: { runId: string; stepId: string; side: "q" | "a" },
    stored?: () => void,
  ): Promise<boolean> {
    // Queued in the same round as the pieces (one write to the socket); counted as stored
    // only when every piece and the manifest are.
    writes.list.push(this.options.putManifest(key, JSON.stringify(manifest), writes.deferred));
    return Promise.all(writes.list).then(
      () => {
        this.counts.stored += 1;
        stored?.();
        return true;
      },
      (error: unknown) => {
        this.counts.failed += 1;
        if (what.side === "q") this.forget(what.runId);
        this.options.onFailure?.(error, what);
        return false;
      },
    );
  }

  private remember(runId: string, remembered: Remembered): void {
    const key = memoryKey(remembered.side, runId);
    this.drop(key);
    this.runs.set(key, remembered);
    this.rememberedChars += remembered.text.length;
    // The oldest first, past as many runs or as many characters as it may keep.
    while (this.runs.size > 2 * this.maxRuns || this.rememberedChars > this.maxRememberedChars) {
      const oldest = this.runs.keys().next().value;
      if (oldest === undefined) break;
      this.drop(oldest);
    }
  }

  private drop(key: string): void {
    const found = this.runs.get(key);
    if (found === undefined) return;
    this.runs.delete(key);
    this.rememberedChars -= found.text.length;
  }
}

/** Where a run's last request of one side is remembered. */
function memoryKey(which: "forwarded" | "client", runId: string): string {
  return `${which === "client" ? "c" : "f"}\u0000${runId}`;
}

/** Cuts past MAX_PIECES merged into the last piece. */
function capped(ends: number[]): number[] {
  if (ends.length <= MAX_PIECES) return ends;
  return [...ends.slice(0, MAX_PIECES - 1), ends[ends.length - 1]!];
}

/**
 * How many of `prev`'s pieces start `text` too (the last, the text after the arrays, never:
 * what follows it differs). A conversation that grew by its end shares all the others,
 * which one native prefix compare tells; otherwise the longest run is found by halving.
 */
function sharedPieces(prev: Remembered, text: string): number {
  const agrees = (n: number) => n === 0 || text.startsWith(prev.text.slice(0, prev.ends[n - 1]));
  let hi = prev.ends.length - 1;
  if (agrees(hi)) return hi;
  let lo = 0;
  hi -= 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (agrees(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
