import { createServer, type IncomingHttpHeaders, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, sleep, startStack, stillPending } from "./stack.js";

// A provider key behind an OpenAI-compatible server that sends no rate-limit headers: only a
// 429 with `retry-after` (whole seconds) when its bucket is empty. Nothing can be predicted
// of such a key, so the gateway learns from its 429s how many calls it lets through at once
// (AIMD: half of what was in flight on a 429, one more per window of successes), and retries
// each 429 inside (the agents never see one). Between the gateway and the fake provider, a
// pass-through that deletes every `x-ratelimit-*` header (and `retry-after-ms`) plays that
// server; it can also refuse the next call of a key itself.

const KEY_FLEET = "sk-silent-fleet-0000000000000000000";
const KEY_GONE = "sk-silent-gone-00000000000000000000";

// The fleet's key: 2 requests in its bucket, refilled at 4 a second, each call taking 500 ms
// at the provider: about two calls at once are what the key carries.
const BUCKET = { rpm: 2, windowMs: 500 };
const LATENCY_MS = 500;
const AGENTS = 8;
const CALLS_EACH = 4;

interface Sent {
  readonly atMs: number;
  /** Calls of its key at the provider when it was sent, itself included. */
  readonly atOnce: number;
  endedAtMs: number | undefined;
  status: number | undefined;
}

interface Stripping {
  readonly url: string;
  /** The next call of this key is refused here with a 429 and `retry-after: 1`, never forwarded. */
  refuseNext(apiKey: string): void;
  /** Each call forwarded for this key: when it was sent and answered, its status, and how many were at the provider with it. */
  sent(apiKey: string): readonly Sent[];
  close(): Promise<void>;
}

/** A pass-through to `target` that drops every rate-limit header but a whole-seconds retry-after. */
async function startStripping(target: string): Promise<Stripping> {
  const upstream = new URL(target);
  const refusing = new Set<string>();
  const sent = new Map<string, Sent[]>();
  const server: Server = createServer((req, res) => {
    const apiKey = bearer(req.headers);
    if (apiKey !== undefined && refusing.delete(apiKey)) {
      req.resume();
      const body = JSON.stringify({
        error: {
          message: "Rate limit reached. Please try again later.",
          type: "requests",
          code: "rate_limit_exceeded",
        },
      });
      res.writeHead(429, { "content-type": "application/json", "retry-after": "1" });
      res.end(body);
      return;
    }
    const mine = sent.get(apiKey ?? "") ?? [];
    sent.set(apiKey ?? "", mine);
    const call: Sent = {
      atMs: Date.now(),
      atOnce: mine.filter((s) => s.endedAtMs === undefined).length + 1,
      endedAtMs: undefined,
      status: undefined,
    };
    mine.push(call);
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: upstream.host },
      },
      (answer) => {
        const headers: Record<string, string | string[]> = {};
        for (const [name, value] of Object.entries(answer.headers)) {
          if (value === undefined || name.startsWith("x-ratelimit-") || name === "retry-after-ms") continue;
          headers[name] = name === "retry-after" ? String(Math.ceil(Number(value))) : value;
        }
        call.status = answer.statusCode;
        call.endedAtMs = Date.now();
        res.writeHead(answer.statusCode ?? 502, headers);
        answer.pipe(res);
      },
    );
    out.on("error", () => res.destroy());
    // The gateway hung up (its client left): so does this hop, as a real server's would.
    res.on("close", () => {
      call.endedAtMs ??= Date.now();
      out.destroy();
    });
    req.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    refuseNext: (apiKey) => refusing.add(apiKey),
    sent: (apiKey) => sent.get(apiKey) ?? [],
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function bearer(headers: IncomingHttpHeaders): string | undefined {
  return headers.authorization?.replace(/^Bearer\s+/i, "");
}

let stack: Stack;
let stripping: Stripping;
let gateway: { baseUrl: string; close(): Promise<void> };

beforeAll(async () => {
  stack = await startStack({
    // Retries enough that a 429 an overshoot costs is always absorbed inside the gateway.
    config: { predict: { max_retries: 10, max_wait_s: 60 }, hold: { keepalive_ms: 1_000 } },
    provider: { limitsByKey: { [KEY_FLEET]: BUCKET } },
  });
  stripping = await startStripping(stack.provider.url);
  gateway = await stack.extraGateway({ upstream: `${stripping.url}/v1` });
});
afterAll(async () => {
  await stripping?.close();
  await stack?.close();
});

const client = (apiKey: string, runId: string, headers: Record<string, string> = {}) =>
  new OpenAI({
    apiKey,
    baseURL: gateway.baseUrl,
    maxRetries: 0,
    timeout: 60_000,
    defaultHeaders: { "X-Holdfast-Run": runId, ...headers },
  });

/** What the provider answered one key: how many it refused with a 429, and how many it served. */
function provider(apiKey: string): { refused: number; served: number } {
  const mine = stack.provider.requests.filter((r) => r.apiKey === apiKey);
  return {
    refused: mine.filter((r) => r.status === 429).length,
    served: mine.filter((r) => r.status === 200).length,
  };
}

describe("a key whose provider sends no rate-limit headers", () => {
  it("a fleet of 8 agents on it sees only 200s, and the provider refuses far fewer calls than it serves", async () => {
    const statuses: number[] = [];
    const agent = async (i: number) => {
      const chat = client(KEY_FLEET, `silent-fleet-${i}`, { "x-fake-latency-ms": String(LATENCY_MS) });
      for (let n = 0; n < CALLS_EACH; n++) {
        try {
          await chat.chat.completions.create({
            model: "gpt-4o-mini",
            max_tokens: 16,
            messages: [{ role: "user", content: `agent ${i} call ${n}` }],
          });
          statuses.push(200);
        } catch (error) {
          statuses.push(error instanceof OpenAI.APIError ? (error.status ?? 0) : 0);
        }
      }
    };
    await Promise.all(Array.from({ length: AGENTS }, (_, i) => agent(i)));

    // No agent saw a 429 (nor anything else): every refusal was retried inside the gateway.
    expect(statuses).toEqual(Array.from({ length: AGENTS * CALLS_EACH }, () => 200));
    const seen = provider(KEY_FLEET);
    // The bounds. Without a limit, every waiting call goes at once whenever a cooldown ends: 8
    // calls on a bucket of 2, most of them refused again (51 and 57 refusals for the 32 calls
    // in two runs of the code before the limit). With it, the first overshoot (the fleet's
    // first calls, sent before any refusal) costs up to the 8 in flight; its first 429 halves
    // the limit to 4 (of 8 in flight), and from then on a refused call gives its slot back
    // and is sent again only with one, so once the calls sent before that refusal are
    // answered, the provider never has more than 4 of the key's calls at once (the limit
    // grows back by one per window of successes, which a key carrying about 2 at once refuses
    // long before it reaches 5). Each later overshoot costs what was in flight, a few
    // refusals: fewer refusals than calls served (13 and 15 in two runs).
    const sends = stripping.sent(KEY_FLEET);
    const firstRefusal = sends.find((s) => s.status === 429);
    expect(firstRefusal).toBeDefined();
    const overshootAnsweredMs = Math.max(
      ...sends.filter((s) => s.atMs <= firstRefusal!.endedAtMs!).map((s) => s.endedAtMs ?? Infinity),
    );
    const later = sends.filter((s) => s.atMs > overshootAnsweredMs);
    expect(later.length).toBeGreaterThan(AGENTS);
    expect(Math.max(...later.map((s) => s.atOnce))).toBeLessThanOrEqual(AGENTS / 2);
    expect(seen.refused).toBeGreaterThan(0);
    expect(seen.refused).toBeLessThan(seen.served);
  }, 120_000);

  it("a call whose client leaves while it waits for a slot, or mid-call, gives its slot back", async () => {
    const chat = client(KEY_GONE, "silent-gone");
    const ask = (headers: Record<string, string> = {}, signal?: AbortSignal) =>
      chat.chat.completions.create(
        { model: "gpt-4o-mini", max_tokens: 16, messages: [{ role: "user", content: "hello" }] },
        { headers, ...(signal === undefined ? {} : { signal }) },
      );
    const forwarded = () => stack.provider.requests.filter((r) => r.apiKey === KEY_GONE).length;

    // The key answers without headers; then one refusal with one call in flight makes its
    // limit 1 (half of one, at least one), and the retry's success raises it to 2.
    await ask();
    stripping.refuseNext(KEY_GONE);
    await ask();
    expect(forwarded()).toBe(2);

    // Two calls the provider never answers hold both slots.
    const first = new AbortController();
    const second = new AbortController();
    const hanging = [
      ask({ "x-fake-latency-ms": "50000" }, first.signal),
      ask({ "x-fake-latency-ms": "50000" }, second.signal),
    ];
    for (const call of hanging) call.catch(() => undefined);
    await waitFor(() => (forwarded() === 4 ? true : undefined), {
      timeoutMs: 10_000,
      message: "the two hanging calls never reached the provider",
    });

    // A third waits for a slot (it is not forwarded), and its client leaves while it waits.
    const waiting = new AbortController();
    const third = ask({}, waiting.signal);
    third.catch(() => undefined);
    expect(await stillPending(third, 1_000)).toBe(true);
    expect(forwarded()).toBe(4);
    waiting.abort();
    await expect(third).rejects.toThrow(/abort/i);

    // The first hanging call's client leaves mid-call.
    first.abort();
    await expect(hanging[0]).rejects.toThrow(/abort/i);
    await sleep(200);

    // Its slot is free again (and the third's place did not take it): the next call goes on
    // at once, while the second still holds the other slot.
    const next = await ask();
    expect(next.choices[0]?.message).toBeDefined();
    expect(await stillPending(hanging[1]!, 0)).toBe(true);
    expect(forwarded()).toBe(5);

    second.abort();
    await expect(hanging[1]).rejects.toThrow(/abort/i);
    // Every call of the run ended: the three whose clients left recorded as such (the one
    // that waited for a slot never reached the provider: counted above).
    const run = await stack.settled("silent-gone", 6);
    expect(run.steps.filter((s) => s.failure?.reason === "client_aborted")).toHaveLength(3);
  }, 60_000);
});
