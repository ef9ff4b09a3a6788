import { pino } from "pino";

export const CENSOR = "[redacted]";

/** Header names that carry credentials, as any provider SDK or HTTP framework spells them. */
export const SECRET_HEADERS = [
  "authorization",
  "proxy-authorization",
  "x-api-key",
  "api-key",
  "x-goog-api-key",
  // A tenant's Holdfast gateway key.
  "x-holdfast-key",
  // The control token an operator's replay, fork or compare carries to the gateway.
  "x-holdfast-control-token",
  "cookie",
  "set-cookie",
] as const;

/** Object fields that carry credentials. */
export const SECRET_FIELDS = [
  "apiKey",
  "api_key",
  "password",
  "token",
  "accessToken",
  "access_token",
  "refreshToken",
  "refresh_token",
  "secret",
  "clientSecret",
  "client_secret",
] as const;

// Compared case- and separator-insensitively: "X-Api-Key", "x_api_key" and "xApiKey" are one key.
const normalise = (key: string): string => key.toLowerCase().replace(/[-_]/g, "");
const SECRET_KEYS = new Set([...SECRET_HEADERS, ...SECRET_FIELDS].map(normalise));
export const isSecretKey = (key: string): boolean => SECRET_KEYS.has(normalise(key));

// Anything nested deeper is dropped rather than printed unchecked.
const MAX_DEPTH = 16;

/**
 * Returns `value` with every secret-named key censored, at any depth and in any spelling.
 * Objects are copied only where something changes, so a clean log line costs one walk.
 * Errors become pino's serialized form first, so their enumerable fields (an SDK error's
 * request headers, say) are checked like any other object.
 */
export const scrub = (value: unknown): unknown => visit(value, 0, new Set());

const visit = (input: unknown, depth: number, ancestors: Set<object>): unknown => {
  if (input === null || typeof input !== "object") return input;
  const value: object = input instanceof Error ? (pino.stdSerializers.err(input) as object) : input;
  if (ancestors.has(value)) return "[Circular]";
  if (ArrayBuffer.isView(value) || typeof (value as { toJSON?: unknown }).toJSON === "function") return value;
  if (depth >= MAX_DEPTH) return "[too deep]";

  ancestors.add(value);
  try {
    let copy: Record<string, unknown> | unknown[] | undefined;
    if (Array.isArray(value)) {
      value.forEach((item: unknown, index) => {
        const next = visit(item, depth + 1, ancestors);
        if (next !== item) {
          copy ??= [...value];
          (copy as unknown[])[index] = next;
        }
      });
    } else {
      for (const key of Object.keys(value)) {
        const item = read(value, key);
        const next = isSecretKey(key) && item !== undefined ? CENSOR : visit(item, depth + 1, ancestors);
        if (next !== item) {
          copy ??= { ...value };
          // defineProperty: an own "__proto__" key must stay a key, not become the prototype.
          Object.defineProperty(copy, key, {
            value: next,
            enumerable: true,
            writable: true,
            configurable: true,
          });
        }
      }
    }
    return copy ?? value;
  } finally {
    ancestors.delete(value);
  }
};

// A throwing getter would otherwise make the log call itself throw.
const read = (value: object, key: string): unknown => {
  try {
    return (value as Record<string, unknown>)[key];
  } catch {
    return "[unreadable]";
  }
};

/**
 * Paths for pino's own `redact`, covering the shapes services log on purpose: fastify's
 * `req`/`res`, bare `headers` maps, and credential fields one level down. `scrub` backs
 * them up for every other depth and spelling.
 */
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_HEADERS.flatMap((header) => [
    `req.headers["${header}"]`,
    `res.headers["${header}"]`,
    `headers["${header}"]`,
    `*.headers["${header}"]`,
    `["${header}"]`,
    `*["${header}"]`,
  ]),
  ...SECRET_FIELDS.flatMap((field) => [field, `*.${field}`]),
];
