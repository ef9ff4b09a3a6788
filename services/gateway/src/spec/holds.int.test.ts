import { LimitKind, RunAction, UnparkReason } from "@holdfast/events";
import { afterAll, beforeAll, describe, it } from "vitest";
import { holdRuleAdded, holdRuleLifted, run } from "./events.js";
import { chat, messages, responses } from "./requests.js";
import { answered, appended, forwarded, type GatewayWorld, gatewayWorld } from "./specification.js";

// Holds, stops, limits and standing rules, as an operator sees them: a held run's call is
// parked (nothing reaches the provider) and goes on when the run is resumed; a stopped run's
// call is refused; a call that would cross a run's limit trips the run first.

const TWO_STEPS = "two-steps";
const ONE_DOLLAR = 1_000_000_000;

let world: GatewayWorld;
beforeAll(async () => {
  world = await gatewayWorld({
    config: {
      limits_by_tag: { [TWO_STEPS]: { max_steps: 2 } },
      hold: { keepalive_ms: 1_000 },
    },
  });
});
afterAll(async () => {
  await world?.close();
});

const earlier = (runId: string, tag = "") => [
  ...run(runId, tag).step(1, { nanoUsd: ONE_DOLLAR / 1000, inputTokens: 10, outputTokens: 5 }),
];

describe("a held run's call is parked, and goes on when the run is resumed", () => {
  it("Chat Completions: parked (nothing sent), then released by the operator's resume, answered and recorded", async () => {
    await world
      .specification()
      .given(...earlier("held-chat"), run("held-chat").held())
      .when(chat({ run: "held-chat", content: "after the hold" }), {
        meanwhile: async (log) => {
          await log.appended("held-chat", "CallParked");
          await log.append(run("held-chat").resumed());
        },
      })
      .then(
        answered(200, { choices: [{ message: { content: "Fake reply to: after the hold" } }] }),
        appended("held-chat", [
          { type: "CallParked" },
          { type: "RunResumed" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_RELEASED },
          { type: "StepStarted", step: 2 },
          { type: "StepCompleted", outcome: { step: 2 } },
        ]),
        forwarded(1),
      );
  });

  it("Anthropic Messages, streamed: parked, then released and streamed", async () => {
    const outcome = await world
      .specification()
      .given(...earlier("held-messages"), run("held-messages").held())
      .when(messages({ run: "held-messages", content: "wait for me", stream: true }), {
        meanwhile: async (log) => {
          await log.appended("held-messages", "CallParked");
          await log.append(run("held-messages").resumed());
        },
      })
      .then(
        answered(200),
        appended("held-messages", [
          { type: "CallParked", stream: true },
          { type: "RunResumed" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_RELEASED },
          { type: "StepStarted", step: 2, stream: true },
          { type: "StepCompleted", outcome: { step: 2 } },
        ]),
        forwarded(1),
      );
    if (!outcome.response.body.includes("event: message_stop")) {
      throw new Error(`the released stream did not end: ${outcome.response.body.slice(-300)}`);
    }
  });

  it("a parked call of a run the operator then stops is refused, and never sent", async () => {
    await world
      .specification()
      .given(...earlier("held-then-stopped"), run("held-then-stopped").held())
      .when(responses({ run: "held-then-stopped" }), {
        meanwhile: async (log) => {
          await log.appended("held-then-stopped", "CallParked");
          await log.append(run("held-then-stopped").stopped());
        },
      })
      .then(
        answered(409, { error: { code: "run_stopped" } }),
        appended("held-then-stopped", [
          { type: "CallParked" },
          { type: "RunStopped" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_STOPPED },
        ]),
        forwarded(0),
      );
  });
});

describe("a stopped run's calls are refused", () => {
  it("Chat Completions: 409 run_stopped, nothing sent, nothing recorded", async () => {
    const outcome = await world
      .specification()
      .given(...earlier("stopped"), run("stopped").stopped())
      .when(chat({ run: "stopped" }))
      .then(answered(409, { error: { code: "run_stopped" } }), appended("stopped", []), forwarded(0));
    // The SDKs would retry a 409 twice; this one says not to.
    if (outcome.response.headers["x-should-retry"] !== "false") {
      throw new Error("a stopped run's refusal did not say x-should-retry: false");
    }
  });
});

describe("a call that would cross a run's limit trips the run before it is sent", () => {
  const limitedCall = (run: string) => chat({ run, tag: TWO_STEPS });
  const STEPS_1_2 = [
    { type: "StepStarted", step: 1 },
    { type: "StepCompleted", outcome: { step: 1 } },
    { type: "StepStarted", step: 2 },
    { type: "StepCompleted", outcome: { step: 2 } },
  ] as const;

  it("max_steps: 2, the third call trips the run (held) and is parked, nothing sent, until a resume with a larger window", async () => {
    await world
      .specification()
      .given()
      .when(limitedCall("limited"), {
        earlier: [limitedCall("limited"), limitedCall("limited")],
        meanwhile: async (log) => {
          await log.appended("limited", "CallParked");
          await log.append(run("limited", TWO_STEPS).resumed("one more", { maxSteps: 3 }));
        },
      })
      .then(
        answered(200),
        appended("limited", [
          ...STEPS_1_2,
          {
            type: "RunTripped",
            trip: { limit: LimitKind.LIMIT_KIND_STEPS, limitValue: 2, spentValue: 2 },
            action: RunAction.RUN_ACTION_HOLD,
          },
          { type: "CallParked" },
          { type: "RunResumed" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_RELEASED },
          { type: "StepStarted", step: 3 },
          { type: "StepCompleted", outcome: { step: 3 } },
        ]),
        // The two earlier calls, and the third once resumed: never before.
        forwarded(3),
      );
  });

  it("with on_trip: stop, the call that would cross max_steps is refused 409 and the run stopped", async () => {
    await world
      .specification({ on_trip: "stop", limits_by_tag: { [TWO_STEPS]: { max_steps: 2 } } })
      .given()
      .when(limitedCall("limited-stop"), {
        earlier: [limitedCall("limited-stop"), limitedCall("limited-stop")],
      })
      .then(
        answered(409, { error: { code: "run_stopped" } }),
        appended("limited-stop", [
          ...STEPS_1_2,
          {
            type: "RunTripped",
            trip: { limit: LimitKind.LIMIT_KIND_STEPS, limitValue: 2, spentValue: 2 },
            action: RunAction.RUN_ACTION_STOP,
          },
        ]),
        forwarded(2),
      );
  });

  it("a run another gateway served up to its limit (one this gateway never saw) is tripped before anything is sent", async () => {
    // Its steps are not in this gateway's cache: admission must not let the call go while
    // its start is appended, or the provider is sent a call the log then refuses.
    await world
      .specification({ on_trip: "stop", limits_by_tag: { [TWO_STEPS]: { max_steps: 2 } } })
      .given(
        ...run("elsewhere-stop", TWO_STEPS).step(1, { nanoUsd: 1, inputTokens: 1, outputTokens: 1 }),
        ...run("elsewhere-stop", TWO_STEPS).step(2, { nanoUsd: 1, inputTokens: 1, outputTokens: 1 }),
      )
      .when(limitedCall("elsewhere-stop"))
      .then(
        answered(409, { error: { code: "run_stopped" } }),
        appended("elsewhere-stop", [
          {
            type: "RunTripped",
            trip: { limit: LimitKind.LIMIT_KIND_STEPS, limitValue: 2, spentValue: 2 },
            action: RunAction.RUN_ACTION_STOP,
          },
        ]),
        forwarded(0),
      );
  });

  it("held the same way, such a run's call is sent once, after the resume", async () => {
    await world
      .specification()
      .given(
        ...run("elsewhere-held", TWO_STEPS).step(1, { nanoUsd: 1, inputTokens: 1, outputTokens: 1 }),
        ...run("elsewhere-held", TWO_STEPS).step(2, { nanoUsd: 1, inputTokens: 1, outputTokens: 1 }),
      )
      .when(limitedCall("elsewhere-held"), {
        meanwhile: async (log) => {
          await log.appended("elsewhere-held", "CallParked");
          await log.append(run("elsewhere-held", TWO_STEPS).resumed("one more", { maxSteps: 3 }));
        },
      })
      .then(
        answered(200),
        appended("elsewhere-held", [
          { type: "RunTripped", action: RunAction.RUN_ACTION_HOLD },
          { type: "CallParked" },
          { type: "RunResumed" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_RELEASED },
          { type: "StepStarted", step: 3 },
          { type: "StepCompleted", outcome: { step: 3 } },
        ]),
        forwarded(1),
      );
  });

  it("a run under its limit goes on", async () => {
    await world
      .specification()
      .given(...run("under-limit", TWO_STEPS).step(1, { nanoUsd: 1, inputTokens: 1, outputTokens: 1 }))
      .when(chat({ run: "under-limit", tag: TWO_STEPS }))
      .then(
        answered(200),
        appended("under-limit", [
          { type: "StepStarted", step: 2 },
          { type: "StepCompleted", outcome: { step: 2 } },
        ]),
        forwarded(1),
      );
  });
});

describe("a standing hold catches a run at its first call", () => {
  it("a rule on a tag holds a run that never called: held by the rule, parked, then released once lifted and resumed", async () => {
    await world
      .specification()
      .given(holdRuleAdded("rule-frozen", { tag: "frozen" }, "freeze frozen"))
      .when(chat({ run: "brand-new", tag: "frozen", content: "first ever" }), {
        meanwhile: async (log) => {
          await log.appended("brand-new", "CallParked");
          await log.append(holdRuleLifted("rule-frozen"), run("brand-new", "frozen").resumed());
        },
      })
      .then(
        answered(200, { choices: [{ message: { content: "Fake reply to: first ever" } }] }),
        appended("brand-new", [
          { type: "RunHeldByRule", ruleId: "rule-frozen", reason: "freeze frozen" },
          { type: "CallParked" },
          { type: "RunResumed" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_RELEASED },
          { type: "StepStarted", step: 1 },
          { type: "StepCompleted", outcome: { step: 1 } },
        ]),
        forwarded(1),
      );
  });
});

describe("budgets across runs, as far as the gateway decides them", () => {
  it("a run a spent budget tripped (held) has its call parked until an operator resumes it", async () => {
    await world
      .specification()
      .given(
        ...earlier("budget-tripped", "team"),
        run("budget-tripped", "team").tripped({
          limit: LimitKind.LIMIT_KIND_DAILY_BUDGET,
          limitValue: ONE_DOLLAR,
          spentValue: ONE_DOLLAR,
          budgetKey: "team",
          period: "2026-12-07",
        }),
      )
      .when(chat({ run: "budget-tripped", tag: "team" }), {
        meanwhile: async (log) => {
          await log.appended("budget-tripped", "CallParked");
          await log.append(run("budget-tripped", "team").resumed());
        },
      })
      .then(
        answered(200),
        appended("budget-tripped", [
          { type: "CallParked" },
          { type: "RunResumed" },
          { type: "CallUnparked", how: UnparkReason.UNPARK_REASON_RELEASED },
          { type: "StepStarted", step: 2 },
          { type: "StepCompleted", outcome: { step: 2 } },
        ]),
      );
  });

  it("a budgeted run's call is not sent while the budget service cannot be reached (503, retry)", async () => {
    await world
      .specification({
        budgets: { team: { daily_usd: 10 } },
        // Nothing listens there: the budget service is down.
        budget: { url: "127.0.0.1:1" },
      })
      .given()
      .when(chat({ run: "budget-down", tag: "team" }))
      .then(answered(503, { error: { code: "holdfast_budget_unavailable" } }), forwarded(0));
  });
});
