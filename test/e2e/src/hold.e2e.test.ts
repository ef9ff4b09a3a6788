import { spawn } from "node:child_process";
import { request as httpRequest } from "node:http";
import Anthropic from "@anthropic-ai/sdk";
import {
  type Actor,
  ActorKind,
  createIdGenerator,
  emptySelector,
  FLEET,
  type FleetCommand,
  type FleetState,
  type RunCommand,
  type RunState,
  type Selector,
} from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { fleetAggregate, Ledger, runAggregate } from "@holdfast/runs";
import { ensurePythonHttpx, waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, sleep, startStack, stillPending } from "./stack.js";

// Hold instead of kill, through the official SDKs. An operator's hold, resume and stop
// are events appended to the run (here through the same ledger the control API uses);
// whichever gateway holds the parked call releases it.
let stack: Stack;
let runs: Ledger<RunState, RunCommand>;
let fleet: Ledger<FleetState, FleetCommand>;
let closeOperator: () => Promise<void>;
const operator: Actor = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };
const STEP_LIMITED_TAG = "three-steps";

beforeAll(async () => {
  stack = await startStack({
    config: {
      hold: { keepalive_ms: 1_000 },
      limits_by_tag: { [STEP_LIMITED_TAG]: { max_steps: 2 } },
    },
    provider: { chunkDelayMs: 1 },
  });
  // An operator's commands, appended as the control service appends them.
  const bus = await stack.connect("control");
  const common = {
    bus,
    log: createLogger({ name: "operator", level: "silent" }),
    clock: Date.now,
    newId: createIdGenerator(),
  };
  runs = new Ledger({ aggregate: runAggregate, ...common });
  fleet = new Ledger({ aggregate: fleetAggregate, ...common });
  closeOperator = () => bus.close();
});
afterAll(async () => {
  await closeOperator?.();
  await stack?.close();
});

const NO_LABELS = { tag: "", tenant: "" };
const hold = (runId: string) =>
  runs.execute(runId, NO_LABELS, { type: "HoldRun", actor: operator, reason: "look first" });
const resume = (runId: string, limits?: { maxSteps: number }) =>
  runs.execute(runId, NO_LABELS, {
    type: "ResumeRun",
    actor: operator,
    reason: "carry on",
    onlyIfHeld: false,
    limits: limits && { maxSteps: limits.maxSteps, maxCostNanoUsd: 0, maxMinutes: 0, maxTokensPerMinute: 0 },
  });
const stop = (runId: string) =>
  runs.execute(runId, NO_LABELS, { type: "StopRun", actor: operator, reason: "enough" });

/** A run that has made one call, so it exists; then held. */
async function heldRun(runId: string): Promise<void> {
  await stack
    .client({ headers: { "X-Holdfast-Run": runId } })
    .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "first" }] });
  await stack.settled(runId, 1);
  await hold(runId);
}

/** Resolves once the run has a call parked on a gateway. */
const parked = (runId: string) =>
  waitFor(async () => ((await stack.run(runId)).parked > 0 ? true : undefined), {
    timeoutMs: 10_000,
    message: `no call of ${runId} was parked`,
  });

describe("a held run's call is parked, not refused", () => {
  it("streams past the client's own timeout, then delivers exactly the provider's answer on resume (Chat Completions)", async () => {
    await heldRun("held-stream");
    const before = stack.provider.requests.length;
    // A 1.5 s timeout: the SDK gives up on headers that do not come in time, never on a
    // stream that has started and is only quiet (a held stream's 200 goes out at once).
    const client = new OpenAI({
      apiKey: API_KEY,
      baseURL: stack.gatewayUrl,
      timeout: 1_500,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "held-stream" },
    });
    const request = {
      model: "gpt-4o-mini",
      stream: true as const,
      messages: [{ role: "user" as const, content: "Tell me about lighthouses" }],
    };
    const answer = (async () => {
      let text = "";
      for await (const chunk of await client.chat.completions.create(request))
        text += chunk.choices[0]?.delta.content ?? "";
      return text;
    })();
    await parked("held-stream");
    expect(await stillPending(answer, 3_000)).toBe(true);
    // Nothing reached the provider while it was parked.
    expect(stack.provider.requests.length).toBe(before);
    await resume("held-stream");
    expect(await answer).toBe("Fake reply to: Tell me about lighthouses");

    const run = await stack.settled("held-stream", 2);
    expect(run.steps.map((s) => s.status)).toEqual(["completed", "completed"]);
    expect(run.control.map((c) => [c.what, c.how])).toEqual([
      ["held", ""],
      ["parked", ""],
      ["resumed", ""],
      ["unparked", "released"],
    ]);
  });

  it("parks a non-streaming call, 1xx keepalives only for clients that tolerate them, and resume goes on (Responses)", async () => {
    await heldRun("held-responses");
    const call = stack
      .client({ headers: { "X-Holdfast-Run": "held-responses" } })
      .responses.create({ model: "gpt-4o-mini", input: "Say hello" });
    await parked("held-responses");
    expect(await stillPending(call, 1_500)).toBe(true);
    await resume("held-responses");
    expect((await call).output_text).toBe("Fake reply to: Say hello");
  });

  it("releases a call parked on one gateway when the resume comes from anywhere (two gateways, Messages)", async () => {
    await heldRun("held-elsewhere");
    const other = await stack.extraGateway({});
    const anthropic = new Anthropic({
      apiKey: API_KEY,
      baseURL: new URL(other.baseUrl).origin,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "held-elsewhere" },
    });
    const message = anthropic.messages
      .stream({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 64,
        messages: [{ role: "user", content: "hi" }],
      })
      .finalMessage();
    await parked("held-elsewhere");
    const run = await stack.run("held-elsewhere");
    expect(run.control.find((c) => c.what === "parked")?.gateway).not.toBe(run.steps[0]?.gateway);
    await resume("held-elsewhere");
    expect((await message).content[0]).toMatchObject({ type: "text", text: "Fake reply to: hi" });
  });

  it("answers a stopped run's parked call, and every later one, with a conflict error in the SDK's shape", async () => {
    await heldRun("stopped-run");
    const openai = stack.client({ headers: { "X-Holdfast-Run": "stopped-run" } });
    const waiting = openai.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "again" }] })
      .catch((e: unknown) => e);
    await parked("stopped-run");
    await stop("stopped-run");
    const error = await waiting;
    expect(error).toBeInstanceOf(OpenAI.ConflictError);
    expect((error as InstanceType<typeof OpenAI.ConflictError>).type).toBe("suspended");

    const later = await stack
      .anthropic({ headers: { "X-Holdfast-Run": "stopped-run" } })
      .messages.create({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 16,
        messages: [{ role: "user", content: "hi" }],
      })
      .catch((e: unknown) => e);
    expect(later).toBeInstanceOf(Anthropic.ConflictError);

    // A stream held and then stopped has its 200 already: the stop arrives as its error event.
    await resume("stopped-run");
    await hold("stopped-run");
    const stream = openai.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    const drained = (async () => {
      for await (const _ of await stream) {
        // drain
      }
    })().catch((e: unknown) => e);
    await waitFor(async () => ((await stack.run("stopped-run")).parked > 0 ? true : undefined), {
      timeoutMs: 10_000,
    });
    await stop("stopped-run");
    const streamed = await drained;
    expect(streamed).toBeInstanceOf(OpenAI.APIError);
    expect((streamed as Error).message).toMatch(/stopped run/);

    // Nothing of a stopped run reached the provider, and it can be resumed again.
    await resume("stopped-run");
    await openai.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "back" }],
    });
    const run = await stack.settled("stopped-run", 2);
    expect(run.steps.map((s) => s.status)).toEqual(["completed", "completed"]);
  });

  it("tells the SDKs not to retry a stopped run's 409 (x-should-retry: false): with their default retries, one request each", async () => {
    await heldRun("stopped-no-retry");
    await stop("stopped-no-retry");
    const sent: string[] = [];
    // What reaches the gateway: every request the SDK makes goes through this fetch.
    const counting: typeof fetch = (input, init) => {
      sent.push(new URL(input instanceof Request ? input.url : String(input)).pathname);
      return fetch(input, init);
    };
    const headers = { "X-Holdfast-Run": "stopped-no-retry" };
    // Default retries (two) and timeouts: what an agent gets when it changes only the base URL.
    const openai = new OpenAI({
      apiKey: API_KEY,
      baseURL: stack.gatewayUrl,
      defaultHeaders: headers,
      fetch: counting,
    });
    const anthropic = new Anthropic({
      apiKey: API_KEY,
      baseURL: new URL(stack.gatewayUrl).origin,
      defaultHeaders: headers,
      fetch: counting,
    });
    const chat = await openai.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "again" }] })
      .catch((e: unknown) => e);
    const responses = await openai.responses
      .create({ model: "gpt-4o-mini", input: "again" })
      .catch((e: unknown) => e);
    const messages = await anthropic.messages
      .create({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 16,
        messages: [{ role: "user", content: "hi" }],
      })
      .catch((e: unknown) => e);
    expect(chat).toBeInstanceOf(OpenAI.ConflictError);
    expect(responses).toBeInstanceOf(OpenAI.ConflictError);
    expect(messages).toBeInstanceOf(Anthropic.ConflictError);
    expect(sent).toEqual(["/v1/chat/completions", "/v1/responses", "/v1/messages"]);
    for (const error of [chat, responses, messages] as { headers: Headers; message: string }[]) {
      expect(error.headers.get("x-should-retry")).toBe("false");
      expect(error.message).toMatch(/stopped run/);
    }
  });

  it("drops a parked call whose client leaves: recorded, nothing forwarded, nothing charged", async () => {
    await heldRun("gives-up");
    const controller = new AbortController();
    const call = stack
      .client({ headers: { "X-Holdfast-Run": "gives-up" } })
      .chat.completions.create(
        { model: "gpt-4o-mini", messages: [{ role: "user", content: "hello?" }] },
        { signal: controller.signal },
      )
      .catch((e: unknown) => e);
    await parked("gives-up");
    // Counted from here: a gateway that had not heard of the hold yet may have forwarded the
    // call and dropped it when the log said held (see docs/architecture.md, Admission).
    const before = stack.provider.requests.length;
    controller.abort();
    await call;
    const run = await waitFor(
      async () => {
        const state = await stack.run("gives-up");
        return state.parked === 0 ? state : undefined;
      },
      { timeoutMs: 10_000, message: "the abandoned call was never unparked" },
    );
    expect(run.control.at(-1)).toMatchObject({ what: "unparked", how: "client_gone" });
    expect(run.steps).toHaveLength(1);
    expect(stack.provider.requests.length).toBe(before);
  });
});

describe("limits and standing rules hold a run before the call that would cross them", () => {
  it("trips max_steps at the third call; a resume with --steps gives a window of its own", async () => {
    const client = stack.client({
      headers: { "X-Holdfast-Run": "step-limited", "X-Holdfast-Tag": STEP_LIMITED_TAG },
    });
    const ask = () =>
      client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "go" }] });
    const before = stack.provider.requests.length;
    await ask();
    await ask();
    const third = ask();
    await parked("step-limited");
    const tripped = await stack.run("step-limited");
    expect(tripped.status).toBe("held");
    expect(tripped.hold).toMatchObject({
      kind: "trip",
      trip: { limit: "steps", limitValue: 2, spentValue: 2 },
    });
    expect(stack.provider.requests.length - before).toBe(2);

    await resume("step-limited", { maxSteps: 3 });
    await third;
    await ask();
    await ask();
    const fourth = ask();
    await waitFor(async () => ((await stack.run("step-limited")).status === "held" ? true : undefined), {
      timeoutMs: 10_000,
    });
    const run = await stack.run("step-limited");
    expect(run.hold?.trip).toMatchObject({ limit: "steps", limitValue: 3 });
    expect(run.steps).toHaveLength(5);
    await resume("step-limited");
    await fourth;
  });

  it("a standing hold by tag catches a run that has never called, at its first call, until lifted", async () => {
    const selector: Selector = { ...emptySelector(), tag: "frozen" };
    await fleet.execute(FLEET, NO_LABELS, {
      type: "AddHoldRule",
      ruleId: "rule-frozen",
      selector,
      actor: operator,
      reason: "freeze frozen",
    });
    const before = stack.provider.requests.length;
    const call = stack
      .client({ headers: { "X-Holdfast-Run": "brand-new", "X-Holdfast-Tag": "frozen" } })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "first ever" }] });
    await parked("brand-new");
    const run = await stack.run("brand-new");
    expect(run.hold).toMatchObject({ kind: "rule", ruleId: "rule-frozen", reason: "freeze frozen" });
    expect(stack.provider.requests.length).toBe(before);
    // Lifting the rule and resuming the run lets the first call go on; a new run with the tag is no longer held.
    await fleet.execute(FLEET, NO_LABELS, {
      type: "LiftHoldRules",
      selector,
      actor: operator,
      reason: "thaw",
    });
    await resume("brand-new");
    await call;
    await stack
      .client({ headers: { "X-Holdfast-Run": "also-new", "X-Holdfast-Tag": "frozen" } })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "free" }] });
    expect((await stack.settled("also-new", 1)).status).toBe("idle");
  });
});

describe("keepalives for a held non-streaming call, per client", () => {
  /** Sends a held call with this User-Agent over a raw socket and collects the 1xx it gets. */
  async function interims(runId: string, userAgent: string): Promise<{ statuses: number[]; status: number }> {
    await heldRun(runId);
    const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "ping" }] });
    const url = new URL(`${stack.gatewayUrl}/chat/completions`);
    const statuses: number[] = [];
    const answered = new Promise<number>((resolve, reject) => {
      const request = httpRequest(
        url,
        {
          method: "POST",
          headers: {
            "content-type": "application/json",
            authorization: `Bearer ${API_KEY}`,
            "user-agent": userAgent,
            "x-holdfast-run": runId,
          },
        },
        (response) => {
          response.resume();
          response.on("end", () => resolve(response.statusCode ?? 0));
        },
      );
      request.on("information", (info) => statuses.push(info.statusCode));
      request.on("error", reject);
      request.end(body);
    });
    await parked(runId);
    await sleep(2_300);
    await resume(runId);
    return { statuses, status: await answered };
  }

  it.each([
    ["OpenAI/JS 6.30.1", 103],
    ["python-httpx/0.23.3", 100],
    ["curl/7.88.1", undefined],
  ])("%s gets %s while held, and its answer after the resume", async (userAgent, expected) => {
    const { statuses, status } = await interims(`interim-${userAgent.replace(/\W/g, "")}`, userAgent);
    expect(status).toBe(200);
    if (expected === undefined) expect(statuses).toEqual([]);
    else {
      expect(statuses.length).toBeGreaterThanOrEqual(2);
      expect(new Set(statuses)).toEqual(new Set([expected]));
    }
  });

  it("keeps Python's httpx waiting past its own timeout, with 100 Continue every keepalive", async () => {
    const python = await ensurePythonHttpx();
    await heldRun("held-python");
    // httpx's timeout is per read: each 1xx it reads starts it again. A keepalive every
    // second, a timeout of 3 s (a loaded machine may be late with one), held for twice that.
    const script = `
import httpx, json, sys
r = httpx.post(sys.argv[1], timeout=3, headers={"authorization": "Bearer ${API_KEY}", "x-holdfast-run": "held-python"},
               json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "from python"}]})
print(json.dumps({"status": r.status_code, "content": r.json()["choices"][0]["message"]["content"]}))
`;
    const child = spawn(python.python, ["-c", script, `${stack.gatewayUrl}/chat/completions`], {
      env: { ...process.env, PYTHONPATH: python.pythonPath },
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    await parked("held-python");
    await sleep(6_500);
    expect(child.exitCode, err).toBeNull();
    await resume("held-python");
    expect(await exited, err).toBe(0);
    expect(JSON.parse(out)).toEqual({ status: 200, content: "Fake reply to: from python" });
  });
});
