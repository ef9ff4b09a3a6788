import { emptySelector, FLEET } from "@holdfast/events";
import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_LABELS, type Operator, operatorOf } from "./operator.js";
import { API_KEY, type Stack, startStack, stillPending } from "./stack.js";

// A passed-through /v1/* call that names a run is governed as the run is, like a metered
// call: a stopped run's is refused in its API's shape, a held run's is parked until the
// run is resumed, and a run past one of its limits is tripped before the call goes on. A
// call that cannot spend (a read, a cancel) goes on whatever the run.

let stack: Stack;
let operator: Operator;
const ONE_STEP_TAG = "one-step";

beforeAll(async () => {
  stack = await startStack({
    config: {
      hold: { keepalive_ms: 1_000, max_parked_per_run: 1 },
      limits_by_tag: { [ONE_STEP_TAG]: { max_steps: 1 } },
    },
  });
  operator = await operatorOf(stack);
});
afterAll(async () => {
  await operator?.close();
  await stack?.close();
});

const call = (method: string, path: string, runId: string, body?: unknown, tag?: string) =>
  fetch(`${new URL(stack.gatewayUrl).origin}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${API_KEY}`,
      "x-holdfast-run": runId,
      ...(tag === undefined ? {} : { "x-holdfast-tag": tag }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  }).then(async (response) => ({
    status: response.status,
    headers: response.headers,
    body: await response.text(),
  }));

/** A run that has made one metered call, so it exists. */
async function runWithOneStep(runId: string, tag?: string): Promise<void> {
  const first = await call(
    "POST",
    "/v1/chat/completions",
    runId,
    { model: "gpt-4o-mini", messages: [{ role: "user", content: "first" }] },
    tag,
  );
  expect(first.status).toBe(200);
  await stack.settled(runId, 1);
}

const forwardedSince = (before: number) =>
  stack.provider.requests.slice(before).map((r) => `${r.method} ${r.path}`);
const LEGACY = { model: "gpt-3.5-turbo-instruct", prompt: "go on" };

describe("a passed-through call that names a run", () => {
  it("of a stopped run is refused 409 in its API's shape, not to be retried; a read still goes on", async () => {
    await runWithOneStep("pt-stopped");
    await operator.runs.execute("pt-stopped", NO_LABELS, {
      type: "StopRun",
      actor: operator.actor,
      reason: "enough",
    });
    await waitFor(async () => ((await stack.run("pt-stopped")).status === "stopped" ? true : undefined), {
      timeoutMs: 10_000,
    });
    const before = stack.provider.requests.length;
    const refused = await call("POST", "/v1/embeddings", "pt-stopped", {
      model: "text-embedding-3-small",
      input: "x",
    });
    expect(refused.status).toBe(409);
    expect(refused.headers.get("x-should-retry")).toBe("false");
    expect(JSON.parse(refused.body)).toMatchObject({ error: { code: "run_stopped" } });
    expect(JSON.parse(refused.body).error.message).toContain("pt-stopped");

    const read = await call("GET", "/v1/models", "pt-stopped");
    expect(read.status).not.toBe(409);
    expect(forwardedSince(before)).toEqual(["GET /v1/models"]);
  });

  it("of a held run is parked, nothing forwarded, and goes on when the run is resumed", async () => {
    await runWithOneStep("pt-held");
    await operator.runs.execute("pt-held", NO_LABELS, {
      type: "HoldRun",
      actor: operator.actor,
      reason: "look first",
    });
    const before = stack.provider.requests.length;
    const parkedCall = call("POST", "/v1/completions", "pt-held", LEGACY);
    await waitFor(async () => ((await stack.run("pt-held")).parked > 0 ? true : undefined), {
      timeoutMs: 10_000,
      message: "the passed-through call was not parked",
    });
    expect(await stillPending(parkedCall, 1_000)).toBe(true);
    // Parking is bounded for these calls too (hold.max_parked_per_run: 1 here).
    const past = await call("POST", "/v1/completions", "pt-held", LEGACY);
    expect(past.status).toBe(429);
    expect(past.headers.get("retry-after")).toBe("30");
    expect(JSON.parse(past.body)).toMatchObject({ error: { code: "holdfast_too_many_parked" } });
    expect(forwardedSince(before)).toEqual([]);

    await operator.runs.execute("pt-held", NO_LABELS, {
      type: "ResumeRun",
      actor: operator.actor,
      reason: "carry on",
      onlyIfHeld: false,
      limits: undefined,
    });
    const answered = await parkedCall;
    expect(answered.status).not.toBe(409);
    expect(forwardedSince(before)).toEqual(["POST /v1/completions"]);
  });

  it("of a run past its step limit trips the run first, as its next metered call would, and is parked", async () => {
    await runWithOneStep("pt-over", ONE_STEP_TAG);
    const before = stack.provider.requests.length;
    const parkedCall = call("POST", "/v1/completions", "pt-over", LEGACY, ONE_STEP_TAG);
    const run = await waitFor(
      async () => {
        const view = await stack.run("pt-over");
        return view.status === "held" && view.parked > 0 ? view : undefined;
      },
      { timeoutMs: 10_000, message: "the run was not tripped and the call parked" },
    );
    expect(run.hold).toMatchObject({ kind: "trip", trip: { limit: "steps", limitValue: 1, spentValue: 1 } });
    expect(forwardedSince(before)).toEqual([]);

    await operator.runs.execute("pt-over", NO_LABELS, {
      type: "StopRun",
      actor: operator.actor,
      reason: "over its limit",
    });
    expect((await parkedCall).status).toBe(409);
    expect(forwardedSince(before)).toEqual([]);
  });

  it("of a run a standing hold matches, one that never made a metered call, is parked as its first step would be", async () => {
    const selector = { ...emptySelector(), tag: "pt-frozen" };
    await operator.fleet.execute(FLEET, NO_LABELS, {
      type: "AddHoldRule",
      ruleId: "rule-pt-frozen",
      selector,
      actor: operator.actor,
      reason: "freeze pt-frozen",
    });
    const before = stack.provider.requests.length;
    const parkedCall = call(
      "POST",
      "/v1/embeddings",
      "pt-ruled",
      { model: "text-embedding-3-small", input: "x" },
      "pt-frozen",
    );
    const run = await waitFor(
      async () => {
        const view = await stack.run("pt-ruled");
        return view.status === "held" && view.parked > 0 ? view : undefined;
      },
      { timeoutMs: 10_000, message: "the rule did not hold the run and park its call" },
    );
    expect(run.hold).toMatchObject({ kind: "rule", ruleId: "rule-pt-frozen" });
    expect(forwardedSince(before)).toEqual([]);

    await operator.fleet.execute(FLEET, NO_LABELS, {
      type: "LiftHoldRules",
      selector,
      actor: operator.actor,
      reason: "thaw",
    });
    await operator.runs.execute("pt-ruled", NO_LABELS, {
      type: "ResumeRun",
      actor: operator.actor,
      reason: "thaw",
      onlyIfHeld: false,
      limits: undefined,
    });
    // Forwarded once resumed (the fake provider has no embeddings: its own 404).
    expect((await parkedCall).status).toBe(404);
    expect(forwardedSince(before)).toEqual(["POST /v1/embeddings"]);
  });
});
