import { RouteReason, RunAction } from "@holdfast/events";
import { PredictAction } from "@holdfast/proto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toolCallApproved, toolCallDenied } from "./events.js";
import { chat } from "./requests.js";
import {
  type AppendedEvent,
  answered,
  appended,
  forwarded,
  type GatewayWorld,
  gatewayWorld,
} from "./specification.js";

// The features that decide at the gateway's hooks, each through its main path: routing a
// model alias to its targets, the tool-call gate holding a dangerous answer until an
// operator decides, and rate-limit prediction waiting for a key's window.

let world: GatewayWorld;
beforeAll(async () => {
  world = await gatewayWorld({
    config: {
      hold: { keepalive_ms: 1_000 },
      tool_gate: { deny: [{ name: "delete_*" }] },
      predict: { wait_threshold_s: 5, max_wait_s: 20 },
    },
  });
});
afterAll(async () => {
  await world?.close();
});

/** The gate's id, step and number of the answer it held, for an operator's decision on it. */
function gatedOf(event: AppendedEvent): { gateId: string; stepId: string; step: number } {
  return { gateId: event.gateId as string, stepId: event.stepId as string, step: event.step as number };
}

describe("routing a model alias", () => {
  it("sends the call to the route's target with the target's model; the agent sees the alias; the start records the choice", async () => {
    const fake = `${world.provider.url}/v1`;
    const outcome = await world
      .specification({ routes: { fast: { targets: [{ upstream: fake, model: "gpt-4o-mini" }] } } })
      .given()
      .when(chat({ run: "routed", model: "fast", content: "route me" }))
      .then(
        answered(200, { model: "fast", choices: [{ message: { content: "Fake reply to: route me" } }] }),
        appended("routed", [
          {
            type: "StepStarted",
            step: 1,
            route: {
              alias: "fast",
              target: 0,
              model: "gpt-4o-mini",
              reason: RouteReason.ROUTE_REASON_HEADROOM,
            },
          },
          { type: "StepCompleted", outcome: { step: 1 } },
        ]),
        forwarded(1),
      );
    // The provider was asked for the target's model, not the alias.
    expect(outcome.forwarded[0]?.body).toMatchObject({ model: "gpt-4o-mini" });
    // Its outcome records the model that served it.
    expect(outcome.appended("routed")[1]).toMatchObject({
      outcome: { model: expect.stringMatching(/^gpt-4o-mini/) },
    });
  });

  it("falls back to the next target when the first cannot be reached: a retry to it is recorded, and the call answered", async () => {
    const fake = `${world.provider.url}/v1`;
    await world
      .specification({
        routes: {
          gone: {
            targets: [
              // Nothing listens there.
              { upstream: "http://127.0.0.1:9/v1", model: "gpt-4o-mini" },
              { upstream: fake, model: "gpt-4o-mini" },
            ],
          },
        },
      })
      .given()
      .when(chat({ run: "routed-fallback", model: "gone", content: "find a way" }))
      .then(
        answered(200, { choices: [{ message: { content: "Fake reply to: find a way" } }] }),
        appended("routed-fallback", [
          { type: "StepStarted", step: 1, route: { alias: "gone", target: 0 } },
          {
            type: "StepRetried",
            step: 1,
            attempt: 2,
            route: { target: 1, reason: RouteReason.ROUTE_REASON_FALLBACK },
          },
          { type: "StepCompleted", outcome: { step: 1, upstreamStatus: 200 } },
        ]),
        forwarded(1),
      );
  });
});

describe("the tool-call gate holds an answer asking for a dangerous tool", () => {
  const dangerous = (run: string) =>
    chat({ run, content: `clean up [[call:delete_repo {"name":"prod-db"}]]`, tools: ["delete_repo"] });

  it("recorded and held until an operator approves; then the agent gets the provider's exact answer", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(dangerous("gate-approve"), {
        meanwhile: async (log) => {
          const gated = await log.appended("gate-approve", "ToolCallGated");
          await log.append(toolCallApproved("gate-approve", gatedOf(gated)));
        },
      })
      .then(
        answered(200, {
          choices: [
            { finish_reason: "tool_calls", message: { tool_calls: [{ function: { name: "delete_repo" } }] } },
          ],
        }),
        appended("gate-approve", [
          { type: "StepStarted", step: 1 },
          { type: "StepCompleted", outcome: { step: 1 }, finishReason: "tool_calls" },
          {
            type: "ToolCallGated",
            step: 1,
            rule: "tool_gate.deny[0]",
            action: RunAction.RUN_ACTION_HOLD,
            toolCalls: [{ name: "delete_repo" }],
          },
          { type: "ToolCallApproved" },
        ]),
        forwarded(1),
      );
    const args = (
      outcome.body as { choices: { message: { tool_calls: { function: { arguments: string } }[] } }[] }
    ).choices[0]?.message.tool_calls[0]?.function.arguments;
    expect(JSON.parse(args ?? "{}")).toEqual({ name: "prod-db" });
  });

  it("denied by an operator: the agent gets a 403 in its API's shape instead of the answer", async () => {
    await world
      .specification()
      .given()
      .when(dangerous("gate-deny"), {
        meanwhile: async (log) => {
          const gated = await log.appended("gate-deny", "ToolCallGated");
          await log.append(toolCallDenied("gate-deny", gatedOf(gated)));
        },
      })
      .then(
        answered(403, { error: { code: "tool_call_denied" } }),
        appended("gate-deny", [
          { type: "StepStarted" },
          { type: "StepCompleted" },
          { type: "ToolCallGated", rule: "tool_gate.deny[0]" },
          { type: "ToolCallDenied" },
        ]),
      );
  });

  it("an answer asking for a harmless tool is delivered at once", async () => {
    await world
      .specification()
      .given()
      .when(chat({ run: "gate-harmless", content: `[[call:read_file {"path":"a"}]]`, tools: ["read_file"] }))
      .then(
        answered(200, { choices: [{ finish_reason: "tool_calls" }] }),
        appended("gate-harmless", [
          { type: "StepStarted" },
          { type: "StepCompleted", finishReason: "tool_calls" },
        ]),
      );
  });
});

describe("rate-limit prediction", () => {
  // What the provider said of the key with its last answer: no tokens left of 6,000, whole
  // again in 1.5 s. One reading does not tell how the window refills, so nothing is counted
  // back before that reset.
  const spent = JSON.stringify({
    "x-ratelimit-limit-requests": "10000",
    "x-ratelimit-remaining-requests": "9999",
    "x-ratelimit-reset-requests": "6ms",
    "x-ratelimit-limit-tokens": "6000",
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-tokens": "1.5s",
  });

  it("a call the key's window has no room for waits for its reset instead of drawing a 429, and its start says so", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(chat({ run: "predict-wait", content: "second", maxTokens: 20 }), {
        earlier: [
          chat({
            run: "predict-wait",
            content: "first",
            maxTokens: 20,
            headers: { "x-fake-rate-limits": spent },
          }),
        ],
      })
      .then(
        answered(200, { choices: [{ message: { content: "Fake reply to: second" } }] }),
        appended("predict-wait", [
          { type: "StepStarted", step: 1, prediction: { action: PredictAction.PREDICT_ACTION_CONTINUE } },
          { type: "StepCompleted", outcome: { step: 1 } },
          {
            type: "StepStarted",
            step: 2,
            prediction: { action: PredictAction.PREDICT_ACTION_WAIT, dimension: "tokens" },
          },
          { type: "StepCompleted", outcome: { step: 2 } },
        ]),
        forwarded(2),
      );
    const started = outcome.appended("predict-wait")[2];
    // It waited for the reset, 1.5 s after the first answer.
    expect((started?.prediction as { waitedMs?: number } | undefined)?.waitedMs).toBeGreaterThan(1_300);
    // Nothing the provider refused.
    expect(world.provider.requests.filter((r) => r.status === 429)).toHaveLength(0);
  });
});
