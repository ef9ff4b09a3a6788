/**
 * The 1xx interim response a waiting non-streaming client tolerates, by its User-Agent;
 * undefined when it tolerates none (or is unknown: an unexpected 1xx breaks some stacks,
 * so an unknown client gets nothing and may time out, which costs nothing).
 *
 * Measured on this machine (test/e2e/src/interim.e2e.test.ts):
 * - Python's httpx (the OpenAI and Anthropic Python SDKs' transport) skips every 1xx,
 *   and each one it reads restarts its read timeout: a held call outlives the client's
 *   own timeout;
 * - Node's undici (fetch, and the OpenAI and Anthropic Node SDKs) skips 102 and 103 but
 *   fails the request on a 100; a 103 restarts fetch's headers timeout, but the Node SDKs'
 *   `timeout` is a deadline on the response headers that no interim response extends, so
 *   a Node agent held past it must stream (a held stream's headers go out at once) or
 *   raise its timeout.
 */
export function interimFor(userAgent: string | undefined): 100 | 103 | undefined {
  if (userAgent === undefined) return undefined;
  if (PYTHON.test(userAgent)) return 100;
  if (NODE.test(userAgent)) return 103;
  return undefined;
}

// "python-httpx/0.27.0", "OpenAI/Python 1.x", "Anthropic/Python 0.x", "python-requests/2.x".
const PYTHON = /\b(python-httpx|python-requests|aiohttp|OpenAI\/Python|Anthropic\/Python)\b/i;
// "OpenAI/JS 6.x", "Anthropic/JS 1.x", Node's fetch ("node"), "undici".
const NODE = /(^node$|\bundici\b|OpenAI\/JS|Anthropic\/JS)/i;
