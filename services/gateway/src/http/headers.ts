/** A header sent more than once with different values, where one value is needed. */
export class DuplicateHeaderError extends Error {
  override readonly name = "DuplicateHeaderError";
  constructor(readonly header: string) {
    super(`The header ${header} was sent more than once with different values; send it once.`);
  }
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Request headers as the client sent them, for the values Holdfast records (run ids,
 * tags, trace ids). Node reads header bytes as Latin-1, which turns UTF-8 (`run-é日本`)
 * into mojibake, and joins repeated headers with ", ". Here a value is decoded as UTF-8
 * when its bytes are valid UTF-8, and read as Latin-1 (each byte one character, as HTTP
 * historically defines them) when they are not; and a header sent twice with different
 * values is an error, since either reading would be a guess.
 */
export class RequestHeaders {
  readonly #raw: readonly string[];

  /** `rawHeaders` as Node gives them: name, value, name, value, … */
  constructor(rawHeaders: readonly string[]) {
    this.#raw = rawHeaders;
  }

  /** The value of `name` (trimmed; undefined when absent or empty). Throws DuplicateHeaderError. */
  get(name: string): string | undefined {
    const wanted = name.toLowerCase();
    let found: string | undefined;
    for (let i = 0; i + 1 < this.#raw.length; i += 2) {
      if (this.#raw[i]!.toLowerCase() !== wanted) continue;
      const value = decode(this.#raw[i + 1]!).trim();
      if (found !== undefined && value !== found) throw new DuplicateHeaderError(name);
      found = value;
    }
    return found === undefined || found.length === 0 ? undefined : found;
  }
}

function decode(latin1: string): string {
  // Pure ASCII reads the same either way; most values are.
  if (!/[\u0080-\u00ff]/.test(latin1)) return latin1;
  try {
    return UTF8.decode(Buffer.from(latin1, "latin1"));
  } catch {
    return latin1;
  }
}
