import type { Bus } from "@holdfast/bus";
import {
  type AnswerManifest,
  contentKey,
  manifestKey,
  type Redaction,
  type RequestManifest,
  redactionOf,
  type StoredText,
} from "./store.js";

/** Reads a value of one bucket; undefined when it has none. */
export type Get = (key: string) => Promise<string | undefined>;

/** A step's snapshot as read back: each side's manifest and its text, or why it is missing. */
export interface StepSnapshot {
  readonly request?: RequestManifest & { readonly forwardedText: string; readonly clientText?: string };
  readonly answer?: AnswerManifest & { readonly text: string };
  /** What could not be read, and why (a side never stored, a piece gone). */
  readonly missing: readonly string[];
  /** The redaction the request's (else the answer's) gateway applied, when it says. */
  readonly redaction?: Redaction;
}

/** The most bases a request's manifest is followed through: more is a loop, not a conversation. */
const MAX_CHAIN = 65;
/** The most pieces one text is made of, bases included: a writer cuts at most 4,096 per text. */
const MAX_PARTS = 4_096 * (MAX_CHAIN + 1);
/** Pieces read at once. */
const READ_AHEAD = 64;

/**
 * Reads snapshots back from their buckets: a step's manifests, their bases, and every
 * piece they name, fetched together; each piece checked against its address.
 */
export class SnapshotReader {
  private readonly pieces = new Map<string, Promise<string>>();

  constructor(
    private readonly getPart: Get,
    private readonly getManifest: Get,
  ) {}

  async step(runId: string, stepId: string): Promise<StepSnapshot> {
    const missing: string[] = [];
    const [request, answer] = await Promise.all([
      this.side(runId, stepId, "q", async (manifest: RequestManifest) => {
        const forwardedText = await this.text(runId, manifest.forwarded);
        const clientText =
          manifest.client === undefined ? undefined : await this.text(runId, manifest.client);
        return { ...manifest, forwardedText, ...(clientText === undefined ? {} : { clientText }) };
      }),
      this.side(runId, stepId, "a", async (manifest: AnswerManifest) => {
        const stored = manifest.body ?? manifest.events;
        if (stored === undefined) throw new Error("its manifest names no content");
        return { ...manifest, text: await this.text(runId, stored) };
      }),
    ]);
    if (typeof request === "string") missing.push(`request: ${request}`);
    if (typeof answer === "string") missing.push(`answer: ${answer}`);
    const redactionKey =
      (typeof request === "string" ? undefined : request.redaction) ??
      (typeof answer === "string" ? undefined : answer.redaction);
    // A manifest that names none had the redaction every gateway applies: credentials alone.
    const stored = typeof request !== "string" || typeof answer !== "string";
    let redaction: Redaction | undefined = stored ? redactionOf([]) : undefined;
    if (redactionKey !== undefined) {
      try {
        redaction = JSON.parse(await this.piece(redactionKey)) as Redaction;
      } catch (error) {
        missing.push(`redaction: ${(error as Error).message}`);
      }
    }
    return {
      ...(typeof request === "string" ? {} : { request }),
      ...(typeof answer === "string" ? {} : { answer }),
      missing,
      ...(redaction === undefined ? {} : { redaction }),
    };
  }

  /** One side of a step read whole, or why it cannot be. */
  private async side<M extends RequestManifest | AnswerManifest, T>(
    runId: string,
    stepId: string,
    side: "q" | "a",
    read: (manifest: M) => Promise<T>,
  ): Promise<T | string> {
    try {
      const manifest = await this.manifest<M>(runId, stepId, side);
      if (manifest === undefined) return "not stored";
      return await read(manifest);
    } catch (error) {
      return (error as Error).message;
    }
  }

  /** The addresses of a stored text's pieces, its bases' first, in order. */
  async partsOf(runId: string, stored: StoredText, depth = 0): Promise<string[]> {
    if (stored.omitted !== undefined) throw new Error(`not stored: ${stored.omitted}`);
    if (stored.text !== undefined) return [];
    if (stored.parts.length > MAX_PARTS)
      throw new Error(`it names ${stored.parts.length} pieces, more than a writer cuts`);
    if (stored.base === undefined) return [...stored.parts];
    if (depth >= MAX_CHAIN) throw new Error(`its chain of earlier steps is longer than ${MAX_CHAIN}`);
    const base = await this.manifest<RequestManifest>(runId, stored.base.step, "q");
    if (base === undefined)
      throw new Error(`the earlier step ${stored.base.step} it builds on is not stored`);
    const side = stored.base.side === "client" ? base.client : base.forwarded;
    if (side === undefined)
      throw new Error(`the earlier step ${stored.base.step} has no client request to build on`);
    const before = await this.partsOf(runId, side, depth + 1);
    if (before.length < stored.base.parts)
      throw new Error(`the earlier step ${stored.base.step} has fewer pieces than it names`);
    return [...before.slice(0, stored.base.parts), ...stored.parts];
  }

  async text(runId: string, stored: StoredText): Promise<string> {
    if (stored.text !== undefined) {
      if (Buffer.byteLength(stored.text) !== stored.bytes)
        throw new Error(`holds ${Buffer.byteLength(stored.text)} bytes, not the ${stored.bytes} it says`);
      return stored.text;
    }
    const parts = await this.partsOf(runId, stored);
    if (parts.length > MAX_PARTS) throw new Error(`it names ${parts.length} pieces, more than a writer cuts`);
    // A bounded number at once: a long conversation's pieces are thousands of reads.
    const texts = new Array<string>(parts.length);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < parts.length; i = next++) texts[i] = await this.piece(parts[i]!);
    };
    await Promise.all(Array.from({ length: Math.min(READ_AHEAD, parts.length) }, worker));
    const text = texts.join("");
    if (Buffer.byteLength(text) !== stored.bytes)
      throw new Error(`reassembled to ${Buffer.byteLength(text)} bytes, not the ${stored.bytes} stored`);
    return text;
  }

  private async manifest<T extends RequestManifest | AnswerManifest>(
    runId: string,
    stepId: string,
    side: "q" | "a",
  ): Promise<T | undefined> {
    const value = await this.getManifest(manifestKey(runId, stepId, side));
    if (value === undefined) return undefined;
    const parsed = JSON.parse(value) as T;
    // A manifest is read only for the run and step it names: a key is never trusted alone.
    if (parsed.v !== 1 || parsed.run !== runId || parsed.step !== stepId)
      throw new Error(`the manifest under ${manifestKey(runId, stepId, side)} is not this step's`);
    return parsed;
  }

  private piece(key: string, chunk = false): Promise<string> {
    // A chunk is read on its own, never from the cache: a list naming itself would wait on itself.
    if (chunk) return this.readPiece(key, true);
    let found = this.pieces.get(key);
    if (found === undefined) {
      found = this.readPiece(key, chunk);
      this.pieces.set(key, found);
      found.catch(() => this.pieces.delete(key));
    }
    return found;
  }

  private async readPiece(key: string, chunk: boolean): Promise<string> {
    const value = await this.getPart(key);
    if (value === undefined) throw new Error(`a piece it names (${key}) is not stored`);
    let text: string;
    if (value.startsWith("=")) text = value.slice(1);
    else if (value.startsWith("+") && !chunk) {
      // Chunks are text: a chunk that lists chunks is no piece a writer made (and could loop).
      const chunks = JSON.parse(value.slice(1)) as unknown;
      if (!Array.isArray(chunks) || chunks.length > 1_000 || !chunks.every((c) => typeof c === "string"))
        throw new Error(`the piece ${key} lists its chunks in no form this version reads`);
      text = (await Promise.all(chunks.map((c: string) => this.piece(c, true)))).join("");
    } else throw new Error(`the piece ${key} is in no form this version reads`);
    if (contentKey(text) !== key) throw new Error(`the piece ${key} does not hash to its address`);
    return text;
  }
}

/** A reader over a deployment's snapshot buckets, as the bus opens them. */
export async function openSnapshots(bus: Pick<Bus, "keyValue">): Promise<SnapshotReader> {
  const [parts, manifests] = await Promise.all([
    bus.keyValue("SNAPSHOT_PARTS"),
    bus.keyValue("SNAPSHOT_STEPS"),
  ]);
  return new SnapshotReader(
    async (key) => (await parts.get(key))?.value,
    async (key) => (await manifests.get(key))?.value,
  );
}
