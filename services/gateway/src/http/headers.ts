/** A header sent more than once with different values, where one value is needed. */
export class DuplicateHeaderError extends Error {
  override readonly name = "DuplicateHeaderError";
  constructor(readonly header: string) {
    super(`The header ${header} was sent more than once with different values; send it once.`);
  }
}

/** A header value that is partly UTF-8 and partly not: no reading of it is more than a guess. */
export class UndecodableHeaderError extends Error {
  override readonly name = "UndecodableHeaderError";
  constructor(readonly header: string) {
    super(
      `The header ${header} is not valid UTF-8: some of its bytes are UTF-8 characters and some are not. Send it as UTF-8.`,
    );
  }
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Request headers as the client sent them, for the values Holdfast records (run ids,
 * tags, trace ids). Node reads header bytes as Latin-1, which turns UTF-8 (`run-é日本`)
 * into mojibake, and joins repeated headers with ", ". Here a value is decoded as UTF-8
 * when its bytes are valid UTF-8; read as Latin-1 (each byte one character, as HTTP
 * historically defines them and as Python's http.client sends a str) when no part of it
 * is UTF-8; and refused when it mixes the two (UTF-8 characters, then a byte like 0xFF
 * that is not), since a Latin-1 reading would record mojibake (`Ã©ÿ`). A header sent twice
 * with different values is an error too: either reading would be a guess.
 */
export class RequestHeaders {
  readonly #raw: readonly string[];

  /** `rawHeaders` as Node gives them: name, value, name, value, … */
  constructor(rawHeaders: readonly string[]) {
    this.#raw = rawHeaders;
  }

  /**
   * The value of `name` (trimmed; undefined when absent or empty). Throws
   * DuplicateHeaderError or UndecodableHeaderError.
   */
  get(name: string): string | undefined {
    const wanted = name.toLowerCase();
    let found: string | undefined;
    for (let i = 0; i + 1 < this.#raw.length; i += 2) {
      if (this.#raw[i]!.toLowerCase() !== wanted) continue;
      const value = decode(this.#raw[i + 1]!, name).trim();
      if (found !== undefined && value !== found) throw new DuplicateHeaderError(name);
      found = value;
    }
    return found === undefined || found.length === 0 ? undefined : found;
  }
}

function decode(latin1: string, name: string): string {
  // Pure ASCII reads the same either way; most values are.
  if (!/[\u0080-\u00ff]/.test(latin1)) return latin1;
  const bytes = Buffer.from(latin1, "latin1");
  try {
    return UTF8.decode(bytes);
  } catch {
    if (holdsUtf8Character(bytes)) throw new UndecodableHeaderError(name);
    return latin1;
  }
}

/** Some bytes of `bytes` form a well-formed multi-byte UTF-8 character. */
function holdsUtf8Character(bytes: Buffer): boolean {
  for (let i = 0; i < bytes.length; i++) {
    const lead = bytes[i]!;
    if (lead < 0xc2 || lead > 0xf4) continue;
    const size = lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    try {
      UTF8.decode(bytes.subarray(i, i + size));
      return true;
    } catch {
      // Not a character here; a later byte may start one.
    }
  }
  return false;
}
