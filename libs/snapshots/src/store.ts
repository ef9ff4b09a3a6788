import { createHash } from "node:crypto";
import { tokenOf } from "@holdfast/events";

/**
 * How snapshots are laid out in their two buckets.
 *
 * SNAPSHOT_PARTS holds content by its address: the key is the SHA-256 of the text
 * (base64url), the value the text behind "=" or, for a text longer than a message may
 * be, the addresses of its chunks behind "+" (a JSON array). A piece written twice is the
 * same value under the same key: kept once.
 *
 * SNAPSHOT_STEPS holds a manifest per side of a step, under `<run token>.<step id>.q`
 * (the request, written with the step's start) and `.a` (the answer, with its outcome).
 * A manifest names the pieces its texts are made of, in order; a request may say that its
 * first pieces are an earlier step's (`base`), so a long conversation's manifests grow
 * with what each step adds, not with the whole history.
 */

/** A text as stored: its pieces' addresses in order, and the earlier step whose first pieces it starts with. */
export interface StoredText {
  /** Its length in UTF-8 bytes as stored (redaction may have changed it): what reassembling it must give. */
  readonly bytes: number;
  /** The pieces after the base's, in order. */
  readonly parts: readonly string[];
  /** The first `parts` pieces of that step's forwarded request (or its client's, `side`) start this text. */
  readonly base?: { readonly step: string; readonly parts: number; readonly side?: "client" };
  /** Why it was not stored (larger than snapshots.max_bytes): `parts` is then empty. */
  readonly omitted?: string;
  /**
   * The text itself, in the manifest, for an answer short enough (INLINE_CHARS): an
   * answer is its step's own, so storing it by address would only add a message.
   */
  readonly text?: string;
}

export interface RequestManifest {
  readonly v: 1;
  readonly run: string;
  readonly step: string;
  readonly at: number;
  readonly api: string;
  /** The request as Holdfast forwarded it. */
  readonly forwarded: StoredText;
  /** The request as the client sent it, when Holdfast forwarded something else. */
  readonly client?: StoredText;
  /** Pieces that redaction changed (credentials, redact.patterns): those bytes are not the traffic's. */
  readonly redacted: number;
  /** The address of the redaction that applied (a Redaction), stored as a piece. */
  readonly redaction?: string;
}

/**
 * The redaction a gateway applied to what it stored: credentials always, and its
 * redact.patterns, named by their SHA-256 (hex) and never by their text, which may itself
 * spell what it hides.
 */
export interface Redaction {
  readonly v: 1;
  readonly credentials: string;
  readonly patterns: readonly string[];
}

/** The redaction of a gateway with these patterns, as stored. */
export function redactionOf(patterns: readonly string[]): Redaction {
  return {
    v: 1,
    credentials:
      "the call's own credentials (in full, masked or in pieces) and anything shaped like a key or a bearer token",
    patterns: patterns.map(patternDigest),
  };
}

/** How a redact pattern is named in a Redaction. */
export function patternDigest(pattern: string): string {
  return createHash("sha256").update(pattern, "utf8").digest("hex");
}

export interface AnswerManifest {
  readonly v: 1;
  readonly run: string;
  readonly step: string;
  readonly at: number;
  /** The provider's status. */
  readonly status: number;
  /** A whole answer's body, as received (decompressed). */
  readonly body?: StoredText;
  /** A streamed answer's events, as received (decompressed), in order. */
  readonly events?: StoredText;
  readonly redacted: number;
  readonly redaction?: string;
}

/** The longest answer kept in its manifest rather than as a piece of its own. */
export const INLINE_CHARS = 16 * 1024;

/** The longest text stored as one value: a longer one is stored in chunks this long (in characters, at most 4 bytes each). */
export const CHUNK_CHARS = 200_000;

/** A text's address. */
export function contentKey(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("base64url");
}

const STEP_ID = /^[A-Za-z0-9-]{1,64}$/;

/** Where a step's manifest is kept (`q` its request, `a` its answer). */
export function manifestKey(runId: string, stepId: string, side: "q" | "a"): string {
  const step = STEP_ID.test(stepId) ? stepId : `_${Buffer.from(stepId).toString("base64url")}`;
  return `${tokenOf(runId)}.${step}.${side}`;
}

/** The values a text is stored as: its own key's, and its chunks' when it has them. */
export function storedValues(text: string): { key: string; values: [string, string][] } {
  const key = contentKey(text);
  if (text.length <= CHUNK_CHARS) return { key, values: [[key, `=${text}`]] };
  const values: [string, string][] = [];
  const chunks: string[] = [];
  for (let at = 0; at < text.length; ) {
    let end = Math.min(text.length, at + CHUNK_CHARS);
    // Never between the two halves of a surrogate pair: each chunk must be text on its own.
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end -= 1;
    const chunk = text.slice(at, end);
    at = end;
    const chunkKey = contentKey(chunk);
    chunks.push(chunkKey);
    values.push([chunkKey, `=${chunk}`]);
  }
  values.push([key, `+${JSON.stringify(chunks)}`]);
  return { key, values };
}
