/**
 * The 1xx interim response a waiting non-streaming client tolerates, by its User-Agent;
 * undefined when it tolerates none (or is unknown: an unexpected 1xx breaks some stacks,
 * so an unknown client gets nothing and may time out, which costs nothing).
 *
 * Measured on this machine (test/e2e/src/interim.e2e.test.ts):
 * - Python's httpx (the OpenAI and Anthropic Python SDKs' transport) skips a `100
 *   Continue`, and each one it reads resets its read timeout;
 * - Node's undici (fetch, and the OpenAI and Anthropic Node SDKs) skips `103 Early
 *   Hints`; their SDKs' `timeout` is a deadline on the whole request that no interim
 *   response extends, so a Node agent held past it must stream or raise its timeout.
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
