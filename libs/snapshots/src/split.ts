/**
 * A request body cut into pieces whose concatenation is the body, byte for byte: each
 * element of a top-level array that grows from call to call (a conversation's messages,
 * a Responses input, the tools) starts a piece, with the comma before it (a short one
 * joins those after it, up to MIN_PIECE_CHARS), and the text between them forms the
 * others. Two calls of one conversation then share every piece of what they share, so
 * storing pieces by content keeps each message once.
 *
 * The cut is made on the text, not on a parse: whatever the client's serializer wrote
 * (spacing, key order, escapes, number forms) comes back exactly.
 */

/**
 * The least a piece holds (in characters) before a cut is made: smaller elements join the
 * ones after them. Whether a cut is made depends only on the text before it, so two calls
 * of one conversation still cut their shared beginning alike; and a short answer costs no
 * piece (and no stored message) of its own.
 */
export const MIN_PIECE_CHARS = 1_024;

/** Top-level keys whose array elements are pieces of their own. */
export const SPLIT_KEYS: ReadonlySet<string> = new Set(["messages", "input", "tools", "contents", "system"]);

/**
 * Where each piece ends in `text`: ends[i] is one past piece i's last character, and the
 * last is text.length. A text that is not a JSON object (or not one this scanner can
 * follow) is one piece.
 */
export function pieceEnds(text: string): number[] {
  try {
    return new Scanner(text).object();
  } catch {
    return [text.length];
  }
}

/**
 * The same as pieceEnds(text), given that `text` starts with the text of `shared` cuts
 * another text was cut at (`ends`, its first `shared`): only what follows is read.
 */
export function pieceEndsAfter(text: string, ends: readonly number[], shared: number): number[] {
  if (shared === 0) return pieceEnds(text);
  try {
    return new Scanner(text).resume(ends.slice(0, shared));
  } catch {
    return [text.length];
  }
}

/** The pieces themselves, in order. */
export function splitPieces(text: string): string[] {
  const ends = pieceEnds(text);
  const pieces: string[] = [];
  let start = 0;
  for (const end of ends) {
    pieces.push(text.slice(start, end));
    start = end;
  }
  return pieces;
}

class NotJson extends Error {}

const WS = new Set([0x20, 0x0a, 0x0d, 0x09]);

class Scanner {
  private pos = 0;
  private ends: number[] = [];

  constructor(private readonly text: string) {}

  /** The top-level object, cut where its split arrays' elements start. */
  object(): number[] {
    const t = this.text;
    this.space();
    this.expect(0x7b); // {
    this.space();
    if (t.charCodeAt(this.pos) === 0x7d) {
      this.pos += 1;
      return this.finish();
    }
    return this.members();
  }

  /**
   * The rest of the object from a cut `ends` already made (the last of them): where a
   * split array's element, or its end, starts. What comes before is not read again.
   */
  resume(ends: readonly number[]): number[] {
    this.ends = [...ends];
    this.pos = ends[ends.length - 1]!;
    this.elements();
    return this.afterValue() ? this.finish() : this.members();
  }

  /** Members from a key on, to the object's end. */
  private members(): number[] {
    const t = this.text;
    for (;;) {
      this.space();
      const keyStart = this.pos;
      this.string();
      const key = t.slice(keyStart + 1, this.pos - 1);
      this.space();
      this.expect(0x3a); // :
      this.space();
      if (SPLIT_KEYS.has(key) && t.charCodeAt(this.pos) === 0x5b) {
        this.expect(0x5b); // [
        this.space();
        if (t.charCodeAt(this.pos) === 0x5d) this.pos += 1;
        else {
          this.cut(this.pos);
          this.elements();
        }
      } else this.value();
      if (this.afterValue()) return this.finish();
    }
  }

  /** After a member's value: true at the object's end, false before the next member. */
  private afterValue(): boolean {
    this.space();
    const c = this.text.charCodeAt(this.pos);
    this.pos += 1;
    if (c === 0x2c) return false; // ,
    if (c === 0x7d) return true; // }
    throw new NotJson();
  }

  /**
   * A split array's elements from one's start (or a comma, or the closing bracket) to
   * past its closing bracket: a piece from each element's start (its comma's, past the
   * first) to the next.
   */
  private elements(): void {
    const t = this.text;
    for (;;) {
      this.space();
      let c = t.charCodeAt(this.pos);
      if (c !== 0x2c && c !== 0x5d) {
        this.value();
        this.space();
        c = t.charCodeAt(this.pos);
      }
      // A comma starts the next element's piece; the closing bracket, the text after the array.
      if (c !== 0x2c && c !== 0x5d) throw new NotJson();
      this.cut(this.pos);
      this.pos += 1;
      if (c === 0x5d) return;
    }
  }

  private cut(at: number): void {
    const last = this.ends.length === 0 ? 0 : this.ends[this.ends.length - 1]!;
    if (at - last >= MIN_PIECE_CHARS) this.ends.push(at);
  }

  private finish(): number[] {
    // Anything after the object (whitespace) ends the last piece.
    this.ends.push(this.text.length);
    return this.ends;
  }

  private value(): void {
    const t = this.text;
    const c = t.charCodeAt(this.pos);
    if (c === 0x22) {
      this.string();
      return;
    }
    if (c === 0x7b || c === 0x5b) {
      this.nested();
      return;
    }
    // A number, true, false or null: up to the next delimiter.
    const start = this.pos;
    while (this.pos < t.length) {
      const d = t.charCodeAt(this.pos);
      if (d === 0x2c || d === 0x7d || d === 0x5d || WS.has(d)) break;
      this.pos += 1;
    }
    if (this.pos === start) throw new NotJson();
  }

  /** An object or array, skipped whole: only strings and brackets matter inside. */
  private nested(): void {
    const t = this.text;
    let depth = 0;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c === 0x22) {
        this.string();
        continue;
      }
      this.pos += 1;
      if (c === 0x7b || c === 0x5b) depth += 1;
      else if (c === 0x7d || c === 0x5d) {
        depth -= 1;
        if (depth === 0) return;
      }
    }
    throw new NotJson();
  }

  private string(): void {
    const t = this.text;
    if (t.charCodeAt(this.pos) !== 0x22) throw new NotJson();
    let i = this.pos + 1;
    for (;;) {
      const quote = t.indexOf('"', i);
      if (quote < 0) throw new NotJson();
      // A quote escaped by an odd run of backslashes is part of the string.
      let slashes = 0;
      for (let j = quote - 1; j > this.pos && t.charCodeAt(j) === 0x5c; j--) slashes += 1;
      i = quote + 1;
      if (slashes % 2 === 0) break;
    }
    this.pos = i;
  }

  private space(): void {
    while (this.pos < this.text.length && WS.has(this.text.charCodeAt(this.pos))) this.pos += 1;
  }

  private expect(code: number): void {
    if (this.text.charCodeAt(this.pos) !== code) throw new NotJson();
    this.pos += 1;
  }
}
