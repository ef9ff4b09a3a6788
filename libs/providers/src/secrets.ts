const REDACTED = "[redacted]";
const ALNUM = /[A-Za-z0-9]/;

/*
 * Shapes of credentials that must never reach a log, an event or an error message, even
 * when they are not the keys Holdfast was configured with (a client's own key, a key for
 * another provider). Each alternative consumes the whole credential, masked or not. A
 * capture group, where there is one, is a label kept in front of the redaction so the
 * message still says what was there.
 */
const CREDENTIAL = new RegExp(
  [
    // "Bearer <token>" in an echoed header. Real tokens are long; a short word after
    // "Bearer" is prose ("using Bearer auth") and stays readable.
    String.raw`(\bBearer\s+)[^\s"',;]{8,}`,
    // "x-api-key: <token>", "api_key=<token>" and the like, in echoed headers, JSON, URLs.
    String.raw`(\b(?:x-api-key|x-goog-api-key|x-holdfast-key|api[-_]?key|access[-_]?token|authorization)["']?\s*[:=]\s*["']?(?:(?:Bearer|Basic)\s+)?)[^\s"',;&]+`,
    // OpenAI's "Incorrect API key provided: <echo>.", whatever the key looked like.
    String.raw`(\bAPI key provided:\s*)[^\s]*[^\s.]`,
    // OpenAI (sk-, sk-proj-, sk-svcacct-), Anthropic (sk-ant-), OpenRouter (sk-or-),
    // Groq (gsk_), xAI (xai-), Google (AIza), a Holdfast tenant's gateway key (hfk_).
    // Masked echoes like "sk-bad***...1234" keep their prefix, so the class takes "*" and
    // "." too; a sentence's final "." is left.
    String.raw`\b(?:sk-|gsk_|xai-|AIza|hfk_)[\w\-.*…]*[\w*]`,
    // A masked echo of a key with an unknown prefix: "abc123***...wxyz", "hfk_ab****". Tried
    // only where a run of word characters starts (a match inside one starts at its start
    // too), so a long run without a mask is read once, not once per character.
    String.raw`(?<![\w\-])[\w\-]*(?:\*{3,}|\*+(?:\.{3}|…))(?:[\w\-.*…]*[\w*])?`,
    // JSON Web Tokens. Tried only where a run of word characters and dashes starts: from
    // every "eyJ" of a long run the rest of it would be read again.
    String.raw`(?<![\w\-])eyJ[\w\-]+\.[\w\-]+\.[\w\-]*`,
  ].join("|"),
  "gi",
);

/**
 * Removes credentials from text that may leave the process (error messages above all):
 * every secret given, in full and in the masked forms providers echo, every bearer token,
 * and anything shaped like a provider key or a provider's masked echo of one, each
 * replaced by "[redacted]". Holdfast promises a key is never stored, logged or put in an
 * event; this is the last line of that promise.
 */
export function scrubSecrets(text: string, secrets: readonly string[]): string {
  return redactKnownSecrets(text, secrets).replace(
    CREDENTIAL,
    (match: string, bearer?: string, header?: string, provided?: string) => {
      const label = bearer ?? header ?? provided;
      if (label !== undefined) return `${label}${REDACTED}`;
      // A run of asterisks in prose is not a key.
      return ALNUM.test(match) ? REDACTED : match;
    },
  );
}

// The last characters providers name a key by ("the key ending in wxyz", "sk-…wxyz"); a
// mask may show one fewer ("…xyz").
const TAIL = 4;
// Shorter secrets are not keys a provider masks; their pieces alone would be noise.
const MIN_MASKED = 12;
// Longer ones are no provider's key (Anthropic's, the longest, are about 110 characters):
// looking for their pieces would cost the text's length times theirs.
const MAX_INDEXED = 256;
// How far before a key's tail its masked head is looked for ("sk-proj-…wxyz").
const HEAD_REACH = 256;
// A piece of a key is redacted when it shows this many characters of the secret part (what
// follows the vendor's prefix): a random key shares no such run with ordinary text.
const FRAGMENT = 8;
// A head of the key ("sk-proj-abc…", a key cut short) is redacted from this length on,
// when it shows at least HEAD_SECRET characters past the vendor's prefix.
const HEAD = 10;
const HEAD_SECRET = 3;
// Pieces are found through the key's runs of GRAM characters: every piece redacted is at
// least FRAGMENT long, so it holds a run starting at one of every STRIDE positions of the
// text, and only those positions are looked up.
const GRAM = 6;
const STRIDE = FRAGMENT - GRAM + 1;
// Vendors' fixed prefixes, which every key of theirs shares, so they tell nothing of one:
// OpenAI (sk-, sk-proj-, sk-svcacct-, sk-admin-), Anthropic (sk-ant-api03-, …), OpenRouter
// (sk-or-v1-), Groq (gsk_), xAI (xai-), Google (AIza), and a short lowercase label ("hf_").
const VENDOR_PREFIX = /^(?:sk-(?:proj|svcacct|admin|ant-[a-z]+\d*|or-v\d+)-|sk-|AIza|[a-z][a-z0-9]{0,5}[-_])/;
// Mask characters a provider puts where it hides part of a key.
const MASK = String.raw`(?:[*\u2026]+|\.{2,})`;
const MASKED_BEFORE = new RegExp(String.raw`[\w-]*${MASK}$`);
const MASKED_AFTER = new RegExp(String.raw`^${MASK}[\w-]*`);

/** What finding a known key's pieces needs, computed once per key. */
interface KeyIndex {
  readonly key: string;
  /** Where the secret part starts, after the vendor's prefix. */
  readonly secretStart: number;
  /** Each GRAM-long run of the key, and where in the key it starts. */
  readonly grams: ReadonlyMap<string, readonly number[]>;
  /** The runs' hashes (`gramHash`) as a bit set: most of the text is ruled out with no string made. */
  readonly hashes: Uint32Array;
  /** The last TAIL characters as a word or behind a mask, the last TAIL - 1 behind a mask. */
  readonly tail: RegExp;
}

/**
 * Removes the secrets given, known for this request: each in full; any piece of one that
 * shows FRAGMENT characters of its secret part (the key without its `sk-proj-`, a key cut
 * short, `…Qx9Zr2Lw4…`) or a head of it (`sk-proj-abc…`), together with the mask around
 * the piece; and its tail where it stands as a word or behind a mask (`…wxyz`,
 * `****wxyz`, `sk-...xyz`, "ending in wxyz"). Cheap enough for every string recorded
 * about a call: the text is looked up at one of every STRIDE positions against the
 * key's own runs. `scrubSecrets` adds the shape-based patterns.
 */
export function redactKnownSecrets(text: string, secrets: readonly string[]): string {
  return redactPrepared(text, prepared(secrets));
}

function redactPrepared(text: string, { known, indexes }: Prepared): string {
  let scrubbed = text;
  for (const secret of known) {
    if (scrubbed.includes(secret)) scrubbed = scrubbed.replaceAll(secret, REDACTED);
  }
  for (const index of indexes) {
    if (scrubbed.length >= FRAGMENT) scrubbed = redactPieces(scrubbed, index);
    if (scrubbed.includes(index.key.slice(-(TAIL - 1)))) scrubbed = redactTail(scrubbed, index);
  }
  return scrubbed;
}

// A request's secrets are redacted from every string recorded about it: what that needs is
// computed once per secrets array, and forgotten with it.
const PREPARED = new WeakMap<readonly string[], Prepared>();

interface Prepared {
  known: string[];
  indexes: KeyIndex[];
}

function prepared(secrets: readonly string[]): Prepared {
  let found = PREPARED.get(secrets);
  if (found === undefined) {
    // Longest first: a secret that contains another must go whole, not leave a remainder.
    const known = secrets.filter((secret) => secret.length > 0).sort((a, b) => b.length - a.length);
    // A key longer than any provider's is not looked for in pieces: whole, it still is.
    found = {
      known,
      indexes: known
        .filter((secret) => secret.length >= MIN_MASKED && secret.length <= MAX_INDEXED)
        .map(indexOf),
    };
    PREPARED.set(secrets, found);
  }
  return found;
}

function redactPieces(text: string, index: KeyIndex): string {
  const { key, grams, secretStart } = index;
  const spans: [number, number][] = [];
  let i = 0;
  while (i + GRAM <= text.length) {
    const hash = gramHash(text, i);
    const starts =
      (index.hashes[hash >>> 5]! & (1 << (hash & 31))) === 0 ? undefined : grams.get(text.slice(i, i + GRAM));
    let next = i + STRIDE;
    for (const q of starts ?? []) {
      // The longest run text and key share through this hit.
      let from = i;
      let at = q;
      while (from > 0 && at > 0 && text[from - 1] === key[at - 1]) {
        from -= 1;
        at -= 1;
      }
      let to = i + GRAM;
      while (to < text.length && at + (to - from) < key.length && text[to] === key[at + (to - from)]) to += 1;
      const length = to - from;
      const secretShown = at + length - Math.max(at, secretStart);
      if (secretShown >= FRAGMENT || (at === 0 && length >= HEAD && secretShown >= HEAD_SECRET)) {
        spans.push([from, to]);
        next = Math.max(next, to - (FRAGMENT - 1));
      }
    }
    i = next;
  }
  if (spans.length === 0) return text;
  let out = "";
  let done = 0;
  for (const [from, to] of widen(text, spans)) {
    out += `${text.slice(done, from)}${REDACTED}`;
    done = to;
  }
  return out + text.slice(done);
}

/** The spans in order, merged, each with the mask and masked word on either side. */
function widen(text: string, spans: [number, number][]): [number, number][] {
  const widened = spans
    .map(([from, to]): [number, number] => {
      const before = MASKED_BEFORE.exec(text.slice(Math.max(0, from - 64), from));
      const after = MASKED_AFTER.exec(text.slice(to, to + 64));
      return [from - (before?.[0].length ?? 0), to + (after?.[0].length ?? 0)];
    })
    .sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const span of widened) {
    const last = merged.at(-1);
    if (last !== undefined && span[0] <= last[1]) last[1] = Math.max(last[1], span[1]);
    else merged.push(span);
  }
  return merged;
}

const HASH_MASK = 0xffff;

/**
 * The key's tail where it stands as a word or behind a mask, with the masked head in
 * front of it: `index.tail` tried only around each place the tail's last characters occur
 * (the text a word's run of characters before it, at most HEAD_REACH back), so a long run
 * of word characters is read about once, not once per character.
 */
function redactTail(text: string, index: KeyIndex): string {
  const short = index.key.slice(-(TAIL - 1));
  const spans: [number, number][] = [];
  let scanned = 0;
  for (let at = text.indexOf(short); at >= 0; at = text.indexOf(short, at + 1)) {
    let start = at;
    const floor = Math.max(0, at - HEAD_REACH, scanned);
    while (start > floor && HEAD_CHAR.test(text[start - 1]!)) start -= 1;
    scanned = at;
    // One character either side, for the pattern's look-behind and look-ahead.
    const from = Math.max(0, start - 1);
    const window = text.slice(from, Math.min(text.length, at + TAIL + 1));
    index.tail.lastIndex = 0;
    for (let m = index.tail.exec(window); m !== null; m = index.tail.exec(window)) {
      spans.push([from + m.index, from + m.index + m[0].length]);
      if (m[0].length === 0) index.tail.lastIndex += 1;
    }
  }
  if (spans.length === 0) return text;
  spans.sort((a, b) => a[0] - b[0]);
  let out = "";
  let end = 0;
  for (const [from, to] of spans) {
    if (to <= end) continue;
    out += `${text.slice(end, Math.max(end, from))}${from >= end ? REDACTED : ""}`;
    end = to;
  }
  return out + text.slice(end);
}

// What a masked head before a key's tail is made of ("sk-proj-", "****", "…").
const HEAD_CHAR = /[\w\-*.\u2026]/;

/** A 16-bit hash of the GRAM characters of `text` from `at`. */
function gramHash(text: string, at: number): number {
  let hash = 0;
  for (let k = at; k < at + GRAM; k++) hash = (Math.imul(hash, 31) + text.charCodeAt(k)) | 0;
  return (hash ^ (hash >>> 16)) & HASH_MASK;
}

function indexOf(key: string): KeyIndex {
  const grams = new Map<string, number[]>();
  const hashes = new Uint32Array((HASH_MASK + 1) / 32);
  for (let at = 0; at + GRAM <= key.length; at++) {
    const hash = gramHash(key, at);
    hashes[hash >>> 5]! |= 1 << (hash & 31);
    const gram = key.slice(at, at + GRAM);
    const starts = grams.get(gram);
    if (starts === undefined) grams.set(gram, [at]);
    else starts.push(at);
  }
  const tail = escapeRegExp(key.slice(-TAIL));
  const shortTail = escapeRegExp(key.slice(-(TAIL - 1)));
  return {
    key,
    secretStart: VENDOR_PREFIX.exec(key)?.[0].length ?? 0,
    grams,
    hashes,
    tail: new RegExp(
      // The masked head in front of it ("sk-proj-…", "****") goes with it.
      String.raw`(?<![A-Za-z0-9])(?:(?:[\w-]*[*.\u2026]+)?${tail}|[\w-]*${MASK}${shortTail})(?![A-Za-z0-9])`,
      "g",
    ),
  };
}

/**
 * Every string in a recorded value (an event payload: plain objects, arrays, strings)
 * with the request's secrets redacted. Returns the value itself when nothing changed.
 */
export function redactSecretsDeep<T>(value: T, secrets: readonly string[]): T {
  if (secrets.length === 0) return value;
  return walk(value, prepared(secrets)) as T;
}

function walk(value: unknown, secrets: Prepared): unknown {
  if (typeof value === "string") return redactPrepared(value, secrets);
  if (value === null || typeof value !== "object" || value instanceof Uint8Array) return value;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      const next = walk(item, secrets);
      if (next !== item) {
        out ??= value.slice();
        out[i] = next;
      }
    }
    return out ?? value;
  }
  const record = value as Record<string, unknown>;
  let out: Record<string, unknown> | undefined;
  for (const key in record) {
    if (!Object.hasOwn(record, key)) continue;
    const item = record[key];
    const next = walk(item, secrets);
    if (next !== item) {
      out ??= { ...record };
      out[key] = next;
    }
  }
  return out ?? value;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
