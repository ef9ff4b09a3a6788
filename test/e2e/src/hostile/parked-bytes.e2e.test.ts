import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_LABELS, type Operator, operatorOf } from "../operator.js";
import { API_KEY, type Stack, startStack } from "../stack.js";

// A parked call keeps its request's body until it goes on: 100 calls of 32 MiB parked on
// one held run were 3.2 GB. hold.max_parked_bytes bounds what they hold in all.

let stack: Stack;
let operator: Operator;
beforeAll(async () => {
  stack = await startStack({ config: { hold: { keepalive_ms: 1_000, max_parked_bytes: 1024 * 1024 } } });
  operator = await operatorOf(stack);
});
afterAll(async () => {
  await operator?.close();
  await stack?.close();
});

describe("the bodies parked calls hold", () => {
  const big = (runId: string) =>
    fetch(`${new URL(stack.gatewayUrl).origin}/v1/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${API_KEY}`,
        "x-holdfast-run": runId,
      },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "x".repeat(400_000) }],
      }),
    }).then(async (response) => ({
      status: response.status,
      retryAfter: response.headers.get("retry-after"),
      body: (await response.json()) as Record<string, unknown>,
    }));

  it("are bounded by hold.max_parked_bytes: a call past it is refused 429, and the parked ones go on when resumed", async () => {
    expect((await big("heavy")).status).toBe(200);
    await stack.settled("heavy", 1);
    await operator.runs.execute("heavy", NO_LABELS, {
      type: "HoldRun",
      actor: operator.actor,
      reason: "look",
    });
    const before = stack.provider.requests.length;
    const parked = [big("heavy"), big("heavy")];
    await waitFor(async () => ((await stack.run("heavy")).parked === 2 ? true : undefined), {
      timeoutMs: 10_000,
      message: "two calls of 400 kB were not parked",
    });
    const refused = await big("heavy");
    expect(refused.status).toBe(429);
    expect(refused.retryAfter).toBe("30");
    expect(refused.body).toMatchObject({
      error: { code: "holdfast_too_many_parked", message: expect.stringContaining("hold.max_parked_bytes") },
    });
    const metrics = await (await fetch(`${new URL(stack.gatewayUrl).origin}/holdfast/metrics`)).text();
    expect(metrics).toContain('holdfast_parked_calls_refused_total{bound="bytes"} 1');
    expect(metrics).toMatch(/^holdfast_parked_bytes 8\d{5}$/m);
    expect(stack.provider.requests.length).toBe(before);

    await operator.runs.execute("heavy", NO_LABELS, {
      type: "ResumeRun",
      actor: operator.actor,
      reason: "go on",
      onlyIfHeld: false,
    });
    expect((await Promise.all(parked)).map((a) => a.status)).toEqual([200, 200]);
    expect(stack.provider.requests.length).toBe(before + 2);
  });
});
