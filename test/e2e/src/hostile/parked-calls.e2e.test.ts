import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_LABELS, type Operator, operatorOf } from "../operator.js";
import { API_KEY, type Stack, startStack } from "../stack.js";

// An attack run parked 2,686 calls on one held run in 30 s, each holding a connection (a
// file descriptor) for as long as the run stayed held: parked calls had no bound. Now a
// run may have hold.max_parked_per_run calls parked on a gateway, and the gateway
// hold.max_parked in all; a call past either is refused at once, 429 with retry-after in
// its API's error shape, and nothing is recorded for it but a count.

let stack: Stack;
let operator: Operator;

beforeAll(async () => {
  stack = await startStack({
    config: { hold: { keepalive_ms: 1_000, max_parked_per_run: 2, max_parked: 3 } },
  });
  operator = await operatorOf(stack);
});
afterAll(async () => {
  await operator?.close();
  await stack?.close();
});

const origin = () => new URL(stack.gatewayUrl).origin;

interface Answer {
  status: number;
  retryAfter: string | null;
  body: Record<string, unknown>;
}

/** One model call, answered whenever it is (a parked one when its run is resumed). */
function call(runId: string, api: "openai" | "anthropic", stream = false): Promise<Answer> {
  const [path, body] =
    api === "openai"
      ? ["/v1/chat/completions", { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }]
      : [
          "/v1/messages",
          {
            model: "claude-3-5-haiku-20241022",
            max_tokens: 64,
            stream,
            messages: [{ role: "user", content: "hi" }],
          },
        ];
  return fetch(`${origin()}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${API_KEY}`,
      "x-api-key": API_KEY,
      "anthropic-version": "2023-06-01",
      "x-holdfast-run": runId,
    },
    body: JSON.stringify(body),
  }).then(async (response) => {
    const text = await response.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      parsed = { text };
    }
    return { status: response.status, retryAfter: response.headers.get("retry-after"), body: parsed };
  });
}

async function heldRun(runId: string): Promise<void> {
  expect((await call(runId, "openai")).status).toBe(200);
  await stack.settled(runId, 1);
  await operator.runs.execute(runId, NO_LABELS, {
    type: "HoldRun",
    actor: operator.actor,
    reason: "look first",
  });
}

const resume = (runId: string) =>
  operator.runs.execute(runId, NO_LABELS, {
    type: "ResumeRun",
    actor: operator.actor,
    reason: "go on",
    onlyIfHeld: false,
  });

/** The gateway's health details (no token is configured and it listens on loopback). */
async function health(): Promise<{
  parked: number;
  parked_refused: { per_run: number; per_gateway: number };
}> {
  return (await (await fetch(`${origin()}/holdfast/health`)).json()) as {
    parked: number;
    parked_refused: { per_run: number; per_gateway: number };
  };
}

/** The first of `calls` to be answered while the others wait, and the others. */
async function firstAnswered(
  calls: Promise<Answer>[],
): Promise<{ first: Answer; waiting: Promise<Answer>[] }> {
  const index = await Promise.race(calls.map((c, i) => c.then(() => i)));
  return { first: await calls[index]!, waiting: calls.filter((_, i) => i !== index) };
}

describe("calls of held runs past the parking's bounds", () => {
  it("are refused 429 with retry-after in their API's shape, recorded nowhere, and the parked ones go on when resumed", async () => {
    await heldRun("crowded");
    await heldRun("second");
    const forwardedBefore = stack.provider.requests.length;

    // Three calls of one run, two places for it: one is refused at once.
    const crowded = await firstAnswered([
      call("crowded", "openai"),
      call("crowded", "openai"),
      call("crowded", "openai"),
    ]);
    expect(crowded.first.status).toBe(429);
    expect(crowded.first.retryAfter).toBe("30");
    expect(crowded.first.body).toMatchObject({
      error: {
        type: "rate_limit_error",
        code: "holdfast_too_many_parked",
        message: expect.stringContaining("hold.max_parked_per_run"),
      },
    });
    await waitFor(async () => ((await stack.run("crowded")).parked === 2 ? true : undefined), {
      timeoutMs: 10_000,
      message: "the crowded run's two calls were not parked",
    });

    // A third place on the gateway for another run, then none: refused in Anthropic's shape,
    // a streaming call before its 200 goes out.
    const parkedStream = call("second", "anthropic", true);
    await waitFor(async () => ((await health()).parked === 3 ? true : undefined), {
      timeoutMs: 10_000,
      message: "the second run's call was not parked",
    });
    const full = await call("second", "anthropic", true);
    expect(full.status).toBe(429);
    expect(full.retryAfter).toBe("30");
    expect(full.body).toMatchObject({
      type: "error",
      error: { type: "rate_limit_error", message: expect.stringContaining("hold.max_parked") },
    });

    // Counted, and recorded nowhere: no parking, no step, nothing sent.
    expect(await health()).toMatchObject({ parked: 3, parked_refused: { per_run: 1, per_gateway: 1 } });
    const metrics = await (await fetch(`${origin()}/holdfast/metrics`)).text();
    expect(metrics).toContain('holdfast_parked_calls_refused_total{bound="per_run"} 1');
    expect(metrics).toContain('holdfast_parked_calls_refused_total{bound="per_gateway"} 1');
    expect(metrics).toContain("holdfast_parked_calls 3");
    const [first, second] = [await stack.run("crowded"), await stack.run("second")];
    expect(first.parked).toBe(2);
    expect(second.parked).toBe(1);
    expect(first.steps).toHaveLength(1);
    expect(second.steps).toHaveLength(1);
    expect(stack.provider.requests.length).toBe(forwardedBefore);

    // Resumed, the parked calls go on as if never held.
    await resume("crowded");
    await resume("second");
    expect((await Promise.all(crowded.waiting)).map((a) => a.status)).toEqual([200, 200]);
    expect((await parkedStream).status).toBe(200);
    expect((await stack.settled("crowded", 3)).completed).toBe(3);
    expect((await stack.settled("second", 2)).completed).toBe(2);
    expect(stack.provider.requests.length).toBe(forwardedBefore + 3);
    expect((await health()).parked).toBe(0);
  });
});
