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
 * every exact secret given, every bearer token, and anything shaped like a provider key
 * or a provider's masked echo of one, each replaced by "[redacted]". Holdfast promises a
 * key is never stored, logged or put in an event; this is the last line of that promise.
 */
export function scrubSecrets(text: string, secrets: readonly string[]): string {
  let scrubbed = text;
  // Longest first: a secret that contains another must go whole, not leave a remainder.
  const exact = secrets.filter((secret) => secret.length > 0).sort((a, b) => b.length - a.length);
  for (const secret of exact) {
    if (scrubbed.includes(secret)) scrubbed = scrubbed.replaceAll(secret, REDACTED);
  }
  return scrubbed.replace(
    CREDENTIAL,
    (match: string, bearer?: string, header?: string, provided?: string) => {
      const label = bearer ?? header ?? provided;
      if (label !== undefined) return `${label}${REDACTED}`;
      // A run of asterisks in prose is not a key.
      return ALNUM.test(match) ? REDACTED : match;
    },
  );
}
