/** A request target the gateway routes on, or why it will not. */
export type NormalizedTarget = { ok: true; url: string } | { ok: false; message: string };

// RFC 3986 §2.3: percent-encodings of these mean the same as the character itself.
const UNRESERVED = /%(4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|3[0-9]|2D|2E|5F|7E)/gi;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this refuses
const CONTROL = /[\u0000-\u001f\u007f]|%[01][0-9A-F]|%7F/i;

/**
 * One spelling per path, decided once before routing, so that every spelling a provider
 * would serve as a metered endpoint is routed (and metered) as that endpoint: repeated
 * slashes are one, a trailing slash goes, percent-encoded unreserved characters are
 * decoded. What a provider might resolve differently from us is refused instead: dot
 * segments (`/v1/../x`, also encoded), encoded slashes and backslashes, control characters.
 * The query string is kept as it came.
 */
export function normalizeTarget(target: string): NormalizedTarget {
  // An agent's calls come by a handful of targets: each is worked out once.
  const known = normalized.get(target);
  if (known !== undefined) return known;
  const result = normalizeNew(target);
  if (target.length > NORMALIZED_KEY_MAX) return result;
  if (normalized.size >= NORMALIZED_MAX) normalized.clear();
  normalized.set(target, result);
  return result;
}

// Bounded, whatever targets clients send: at most 1,024 of at most 512 characters.
const normalized = new Map<string, NormalizedTarget>();
const NORMALIZED_MAX = 1_024;
const NORMALIZED_KEY_MAX = 512;

function normalizeNew(target: string): NormalizedTarget {
  const q = target.indexOf("?");
  const rawPath = q === -1 ? target : target.slice(0, q);
  const query = q === -1 ? "" : target.slice(q);
  if (!rawPath.startsWith("/")) return { ok: false, message: "The request path must start with '/'." };
  if (CONTROL.test(rawPath)) return { ok: false, message: "The request path contains a control character." };
  if (/%2F|%5C|\\/i.test(rawPath)) {
    return { ok: false, message: "The request path contains an encoded slash or a backslash." };
  }
  const decoded = rawPath.replace(UNRESERVED, (encoded) =>
    String.fromCharCode(Number.parseInt(encoded.slice(1), 16)),
  );
  const segments = decoded.split("/").filter((segment) => segment.length > 0);
  if (segments.some((segment) => segment === "." || segment === "..")) {
    return { ok: false, message: "The request path contains a '.' or '..' segment." };
  }
  return { ok: true, url: `/${segments.join("/")}${query}` };
}
