/** A JSON string token: a quote, then characters or escapes, then a quote. Unambiguous, so linear. */
const STRING = /"(?:[^"\\]|\\.)*"/g;

/**
 * `text` with `clean` applied to every string in it as the string says it, not as JSON
 * spells it: an escape ("\n", "\u0073k-…", a nested document's \") hides nothing from a
 * pattern, and what is replaced is written back as JSON, so the text stays the JSON it
 * was. Only the strings `clean` changes are rewritten; every other byte is kept. What lies
 * outside strings (a stream's `data:` lines, a body that is not JSON) is cleaned as it is.
 */
export function redactStrings(text: string, clean: (value: string) => string): string {
  let out = "";
  let last = 0;
  for (const match of text.matchAll(STRING)) {
    const at = match.index;
    const token = match[0];
    if (at > last) out += clean(text.slice(last, at));
    let value: string;
    try {
      value = JSON.parse(token) as string;
    } catch {
      // Not a JSON string after all (an odd escape in a text that is no JSON): as it is.
      out += clean(token);
      last = at + token.length;
      continue;
    }
    const cleaned = clean(value);
    out += cleaned === value ? token : JSON.stringify(cleaned);
    last = at + token.length;
  }
  if (last < text.length) out += clean(text.slice(last));
  return out;
}
