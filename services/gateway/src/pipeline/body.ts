import { CHARS_PER_TOKEN } from "@holdfast/predict";
import type { ApiShape, RequestView } from "@holdfast/providers";

/** Tokens estimated from a size in bytes or characters (about four a token), before any usage is known. */
export function tokensOf(size: number): number {
  return Math.ceil(size / CHARS_PER_TOKEN);
}

/**
 * A call's request body, parsed once (as the request was read) and carried through the
 * stages. Features read it parsed (`value`) and change it only by an amendment the
 * pipeline applies (`replace`, `withModel`); the bytes sent upstream are made once, when
 * first asked for, and then only again after a change: the client's own bytes when no
 * feature changed the body (with what the API shape adds, a stream's usage opt-in,
 * spliced in), serialized once when one did.
 */
export class RequestBody {
  #value: Record<string, unknown>;
  /** The body as JSON text (the client's bytes until a feature changes it). */
  #raw: Buffer | undefined;
  /** What is sent upstream, once asked for. */
  #bytes: Buffer | undefined;

  constructor(
    private readonly shape: ApiShape,
    private readonly view: RequestView,
    value: Record<string, unknown>,
    /** The body as the client sent it. */
    readonly client: Buffer,
  ) {
    this.#value = value;
    this.#raw = client;
  }

  /** The body as parsed (and as features amended it). Not to be changed in place. */
  get value(): Readonly<Record<string, unknown>> {
    return this.#value;
  }

  /** The bytes forwarded to the provider. */
  get bytes(): Buffer {
    if (this.#bytes === undefined) {
      this.#raw ??= Buffer.from(JSON.stringify(this.#value));
      this.#bytes = this.shape.upstreamBody(this.#value, this.view, this.#raw) ?? this.#raw;
    }
    return this.#bytes;
  }

  /** Replaces the body (a compaction; `json` its serialization, if made): its bytes are made anew when next asked for. */
  replace(value: Record<string, unknown>, json?: Buffer): void {
    this.#value = value;
    this.#raw = json;
    this.#bytes = undefined;
  }

  /** Asks for another model (a route target's), unless the body already does. */
  withModel(model: string): void {
    if (this.#value.model !== model) this.replace({ ...this.#value, model });
  }
}
