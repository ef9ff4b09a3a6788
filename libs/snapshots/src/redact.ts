/** A JSON string token. Linear on valid JSON, where every quote that opens one closes it; used on nothing else. */
const STRING = /"(?:[^"\\]|\\.)*"/g;
/** A JSON number, outside strings. */
const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
/**
 * Keys whose string value is a credential, whatever it looks like: an MCP tool's
 * `authorization`, a header map's `X-Api-Key`, a tool call's `password`.
 */
const CREDENTIAL_KEY =
  /^(?:x-api-key|x-goog-api-key|x-holdfast-key|api[-_]?key|access[-_]?token|refresh[-_]?token|(?:proxy-)?authorization|password|passwd|client[-_]?secret|secret[-_]?key|private[-_]?key)$/i;
const REDACTED_VALUE = '"[redacted]"';
/** A stream's lines: `data: …` carries JSON (or not), the rest is framing. */
const SSE_FIELD = /^(?:data|event|id|retry):/m;

/**
 * `text` with `clean` applied to what it says, however it is spelt, and still the text it
 * was: a JSON text has each string cleaned as the string says it (an escape, "\n" or
 * "\u0073k-…" or a nested document's \", hides nothing from a pattern) and written back as
 * JSON only when it changed; a number that `clean` changes becomes the string it made; a
 * string under a key that names a credential (`authorization`, `api_key`, `password`, …) is
 * redacted whole. A stream has each `data:` line that is JSON treated so, and every other
 * line cleaned as it is; any other text is cleaned as it is.
 */
export function redactStrings(text: string, clean: (value: string) => string): string {
  if (isJson(text)) return redactJson(text, clean);
  if (SSE_FIELD.test(text)) {
    return text
      .split("\n")
      .map((line) => {
        if (!line.startsWith("data:")) return clean(line);
        const head = line.startsWith("data: ") ? "data: " : "data:";
        const data = line.slice(head.length);
        // A line's "\r" (CRLF framing) stays where it was.
        const body = data.endsWith("\r") ? data.slice(0, -1) : data;
        const tail = body === data ? "" : "\r";
        return isJson(body) ? `${head}${redactJson(body, clean)}${tail}` : clean(line);
      })
      .join("\n");
  }
  return clean(text);
}

function isJson(text: string): boolean {
  const first = text.trimStart()[0];
  if (first !== "{" && first !== "[") return false;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** A valid JSON text, its strings and numbers cleaned, credentials under their key redacted. */
function redactJson(text: string, clean: (value: string) => string): string {
  let out = "";
  let last = 0;
  let credentialKey = false;
  for (const match of text.matchAll(STRING)) {
    const at = match.index;
    const token = match[0];
    const between = text.slice(last, at);
    out += cleanNumbers(between, clean);
    const value = JSON.parse(token) as string;
    // A value right after a key that names a credential: gone whole.
    const isValue = credentialKey && /^\s*:\s*$/.test(between);
    credentialKey = false;
    if (isValue && value !== "") out += REDACTED_VALUE;
    else {
      const cleaned = clean(value);
      out += cleaned === value ? token : JSON.stringify(cleaned);
      // A key: what follows its colon is its value.
      if (
        !isValue &&
        CREDENTIAL_KEY.test(value) &&
        /^\s*:/.test(text.slice(at + token.length, at + token.length + 64))
      )
        credentialKey = true;
    }
    last = at + token.length;
  }
  return out + cleanNumbers(text.slice(last), clean);
}

/** Numbers between strings, cleaned; one `clean` changes becomes the string it made, so the JSON stays JSON. */
function cleanNumbers(segment: string, clean: (value: string) => string): string {
  if (!/\d/.test(segment)) return segment;
  return segment.replace(NUMBER, (number) => {
    const cleaned = clean(number);
    return cleaned === number ? number : JSON.stringify(cleaned);
  });
}
