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
    String.raw`(\b(?:x-api-key|x-goog-api-key|api[-_]?key|access[-_]?token|authorization)["']?\s*[:=]\s*["']?(?:(?:Bearer|Basic)\s+)?)[^\s"',;&]+`,
    // OpenAI's "Incorrect API key provided: <echo>.", whatever the key looked like.
    String.raw`(\bAPI key provided:\s*)[^\s]*[^\s.]`,
    // OpenAI (sk-, sk-proj-, sk-svcacct-), Anthropic (sk-ant-), OpenRouter (sk-or-),
    // Groq (gsk_), xAI (xai-), Google (AIza). Masked echoes like "sk-bad***...1234" keep
    // their prefix, so the class takes "*" and "." too; a sentence's final "." is left.
    String.raw`\b(?:sk-|gsk_|xai-|AIza)[\w\-.*…]*[\w*]`,
    // A masked echo of a key with an unknown prefix: "abc123***...wxyz", "hfk_ab****".
    String.raw`[\w\-]*(?:\*{3,}|\*+(?:\.{3}|…))(?:[\w\-.*…]*[\w*])?`,
    // JSON Web Tokens.
    String.raw`\beyJ[\w\-]+\.[\w\-]+\.[\w\-]*`,
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

// The last characters providers name a key by ("the key ending in wxyz", "sk-…wxyz").
const TAIL = 4;
// Shorter secrets are not keys a provider masks; their tail alone would be noise.
const MIN_MASKED = 12;

/**
 * Removes the secrets given, known for this request: each in full, and its tail where it
 * stands as a word or behind a mask ("…wxyz", "****wxyz", "ending in wxyz"). Cheap enough
 * for every string recorded about a call; `scrubSecrets` adds the shape-based patterns.
 */
export function redactKnownSecrets(text: string, secrets: readonly string[]): string {
  let scrubbed = text;
  // Longest first: a secret that contains another must go whole, not leave a remainder.
  const known = secrets.filter((secret) => secret.length > 0).sort((a, b) => b.length - a.length);
  for (const secret of known) {
    if (scrubbed.includes(secret)) scrubbed = scrubbed.replaceAll(secret, REDACTED);
  }
  for (const secret of known) {
    if (secret.length < MIN_MASKED) continue;
    const tail = secret.slice(-TAIL);
    if (!scrubbed.includes(tail)) continue;
    scrubbed = scrubbed.replace(
      // The masked head in front of it ("sk-proj-…", "****") goes with it.
      new RegExp(`(?<![A-Za-z0-9])(?:[\\w-]*[*.\u2026]+)?${escapeRegExp(tail)}(?![A-Za-z0-9])`, "g"),
      REDACTED,
    );
  }
  return scrubbed;
}

/**
 * Every string in a recorded value (an event payload: plain objects, arrays, strings)
 * with the request's secrets redacted. Returns the value itself when nothing changed.
 */
export function redactSecretsDeep<T>(value: T, secrets: readonly string[]): T {
  if (secrets.length === 0) return value;
  return walk(value, secrets) as T;
}

function walk(value: unknown, secrets: readonly string[]): unknown {
  if (typeof value === "string") return redactKnownSecrets(value, secrets);
  if (Array.isArray(value)) {
    let changed = false;
    const out = value.map((item) => {
      const next = walk(item, secrets);
      changed ||= next !== item;
      return next;
    });
    return changed ? out : value;
  }
  if (value !== null && typeof value === "object" && !(value instanceof Uint8Array)) {
    let out: Record<string, unknown> | undefined;
    for (const [key, item] of Object.entries(value)) {
      const next = walk(item, secrets);
      if (next !== item) {
        out ??= { ...(value as Record<string, unknown>) };
        out[key] = next;
      }
    }
    return out ?? value;
  }
  return value;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
