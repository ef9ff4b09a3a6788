import {
  ActorKind,
  CompactionMode,
  describeRun,
  type EventPayload,
  LimitKind,
  makeEnvelope,
  RouteReason,
  RouteStanding,
  RunAction,
  StepCompleted,
  StepRetried,
  StepStarted,
  UsageEstimate,
} from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { heldBecause } from "./ls.js";
import { renderRun, tripFigures } from "./show.js";

const T0 = Date.parse("2026-12-03T10:00:00Z");
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };

function payloadsAsEvents(payloads: EventPayload[]) {
  return payloads.map((payload, i) =>
    makeEnvelope({
      id: `e${i}`,
      runId: "r1",
      sequence: i + 1,
      timestampMs: T0 + i * 1_000,
      tag: "prod",
      payload,
    }),
  );
}

function run(payloads: EventPayload[]) {
  return describeRun("r1", payloadsAsEvents(payloads));
}

const started: EventPayload = {
  $case: "stepStarted",
  value: StepStarted.fromPartial({ stepId: "s1", step: 1, model: "gpt-4o", promptHash: "feedbeef" }),
};
const completed: EventPayload = {
  $case: "stepCompleted",
  value: StepCompleted.fromPartial({
    outcome: {
      stepId: "s1",
      step: 1,
      model: "gpt-4o",
      upstreamStatus: 200,
      cost: { known: true, nanoUsd: 612_300_000 },
    },
  }),
};
const tripped: EventPayload = {
  $case: "runTripped",
  value: {
    trip: {
      limit: LimitKind.LIMIT_KIND_COST,
      limitValue: 500_000_000,
      spentValue: 612_300_000,
      budgetKey: "",
      period: "",
      crossedByStepId: "s1",
      callModel: "gpt-4o",
      prediction: undefined,
    },
    action: RunAction.RUN_ACTION_HOLD,
  },
};
const parked: EventPayload = {
  $case: "callParked",
  value: { parkId: "p1", api: 1, model: "gpt-4o", stream: false, gateway: "gw-1#a1" },
};

describe("holdfast show", () => {
  it("lists a step's tool calls and says how many more its event left out, and that it was cut", () => {
    const cut: EventPayload = {
      $case: "stepCompleted",
      value: StepCompleted.fromPartial({
        outcome: { stepId: "s1", step: 1, model: "gpt-4o", upstreamStatus: 200, truncated: true },
        finishReason: "tool_calls",
        toolCalls: ["search", "fetch"],
        toolCallsOmitted: 19_998,
      }),
    };
    const view = run([started, cut]);
    expect(view.steps[0]).toMatchObject({
      toolCalls: ["search", "fetch"],
      toolCallsOmitted: 19_998,
      truncated: true,
      abridged: false,
    });
    expect(renderRun(view, T0 + 10_000)).toContain("tool calls: search, fetch and 19998 more");
  });

  it("says a tripped run is held by which limit, with the figures in USD, and its parked calls", () => {
    const text = renderRun(run([started, completed, tripped, parked]), T0 + 60_000);
    expect(text).toMatch(/^status {6}held$/m);
    expect(text).toMatch(
      /^held {8}since 2026-12-03T10:00:02\.000Z \(58s ago\) by a limit: cost \$0\.6123 of a \$0\.5000 limit \(crossed by step 1\)$/m,
    );
    expect(text).toMatch(/^parked {6}1 call parked, waiting for a resume or a stop$/m);
    expect(text).toMatch(/^prompt {6}feedbeef$/m);
    expect(text).toMatch(/tripped\s+limit\s+cost \$0\.6123 of a \$0\.5000 limit \(crossed by step 1\); held/);
    expect(text).toMatch(/parked\s+gw-1#a1\s+call p1/);
  });

  it("lists holds, resumes and stops in order, with who, why, the selector and a resume's limits", () => {
    const text = renderRun(
      run([
        started,
        completed,
        {
          $case: "runHeld",
          value: { actor: operator, reason: "looks stuck", selector: undefined, ruleId: "" },
        },
        {
          $case: "runResumed",
          value: {
            actor: operator,
            reason: "fixed",
            selector: undefined,
            limits: { maxSteps: 5, maxCostNanoUsd: 250_000_000, maxMinutes: 10, maxTokensPerMinute: 0 },
            overrides: true,
            checkpoint: false,
            compact: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
          },
        },
        {
          $case: "runStopped",
          value: {
            actor: operator,
            reason: "enough",
            selector: { runGlob: "", tag: "prod", modelPrefix: "", promptHash: "", status: "", all: false },
          },
        },
      ]),
      T0 + 10_000,
    );
    const control = text.slice(text.indexOf("WHAT"));
    expect(
      control
        .split("\n")
        .slice(1)
        .map((line) => line.split(/\s{2,}/)[2]),
    ).toEqual(["held", "resumed", "stopped"]);
    expect(control).toMatch(/held\s+operator \(control token\)\s+"looks stuck"/);
    expect(control).toMatch(
      /resumed\s+operator \(control token\)\s+"fixed"; new window: 5 steps, \$0\.2500, 10 min/,
    );
    expect(control).toMatch(/stopped\s+operator \(control token\)\s+"enough"; selector --tag prod/);
    expect(text).toMatch(/^stopped {5}since .* by operator \(control token\): enough$/m);
    expect(text).toMatch(
      /^window {6}since 2026-12-03T10:00:03\.000Z: 0 steps, \$0\.0000; its own limits: 5 steps, \$0\.2500, 10 min$/m,
    );
  });

  it("gives every limit's figures in its own unit", () => {
    const trip = { budgetKey: "", period: "", crossedByStepId: "", prediction: null };
    expect(tripFigures({ ...trip, limit: "steps", limitValue: 10, spentValue: 10 })).toBe(
      "10 steps of a 10-step limit",
    );
    expect(tripFigures({ ...trip, limit: "minutes", limitValue: 1_800_000, spentValue: 1_830_000 })).toBe(
      "30.5 min of a 30 min window",
    );
    expect(tripFigures({ ...trip, limit: "tokens_per_minute", limitValue: 1_000, spentValue: 1_200 })).toBe(
      "1200 tokens in the last minute, limit 1000 a minute",
    );
    expect(
      tripFigures({
        ...trip,
        limit: "daily_budget",
        limitValue: 50e9,
        spentValue: 50.1e9,
        budgetKey: "*",
        period: "2026-12-03",
      }),
    ).toBe('daily budget "*" for 2026-12-03: $50.1000 of $50.0000');
  });
});

describe("holdfast show: routing", () => {
  it("says where each call to an alias went and why, every target's standing, and each fallback", () => {
    const routedStart: EventPayload = {
      $case: "stepStarted",
      value: StepStarted.fromPartial({
        stepId: "s1",
        step: 1,
        model: "fast",
        route: {
          alias: "fast",
          target: 1,
          upstream: "https://api.groq.com",
          model: "llama-3.1-8b-instant",
          reason: RouteReason.ROUTE_REASON_HEADROOM,
          candidates: [
            { target: 0, standing: RouteStanding.ROUTE_STANDING_WAIT, waitMs: 4_200 },
            { target: 1, standing: RouteStanding.ROUTE_STANDING_READY, headroom: 0.62 },
          ],
        },
      }),
    };
    const fallback: EventPayload = {
      $case: "stepRetried",
      value: StepRetried.fromPartial({
        stepId: "s1",
        step: 1,
        attempt: 2,
        upstreamStatus: 503,
        route: {
          alias: "fast",
          target: 2,
          upstream: "https://api.openai.com",
          model: "gpt-4o-mini",
          reason: RouteReason.ROUTE_REASON_FALLBACK,
          candidates: [
            { target: 0, standing: RouteStanding.ROUTE_STANDING_WAIT, waitMs: 4_000 },
            { target: 1, standing: RouteStanding.ROUTE_STANDING_TRIED },
            { target: 2, standing: RouteStanding.ROUTE_STANDING_UNKNOWN, headroom: 1 },
          ],
        },
      }),
    };
    const text = renderRun(run([routedStart, fallback]), T0 + 5_000);
    expect(text).toContain(
      "routing\n  step 1  fast -> #1 llama-3.1-8b-instant at https://api.groq.com (headroom; #0 wait 4.2s, #1 ready 62% headroom)\n  step 1  after 503, attempt 2: fast -> #2 gpt-4o-mini at https://api.openai.com (fallback; #0 wait 4.0s, #1 tried, #2 unknown)",
    );
    // A fallback is no rate-limit retry in place (its input sent again is waste all the same).
    expect(text).not.toContain("retry 2 after 503");
    expect(text).toContain("waste: 0 input tokens re-sent over 1 retry");
  });
});

describe("holdfast show, on a run with events set aside", () => {
  it("lists each with where the log keeps it, why, its first bytes, and what it claims with control characters escaped", () => {
    const [first] = payloadsAsEvents([started]);
    const view = describeRun("r1", {
      events: [{ envelope: first!, streamSequence: 7 }],
      quarantined: [
        {
          streamSequence: 8,
          subject: "hf.run.r1.Step\u001b[31mStarted",
          runId: "r1",
          type: "Step\u001b[31mStarted",
          reason: "undecodable",
          detail: "event is not a valid protobuf Envelope:\nindex out of range",
          data: new Uint8Array([0xff, 0x00, 0x13]),
        },
      ],
    });
    const text = renderRun(view, T0 + 60_000);
    expect(text).toMatch(/^quarantined 1 event set aside, not folded \(listed below\)$/m);
    expect(text).toContain(
      "quarantined events (set aside, not folded; each stays in the log at its stream sequence)",
    );
    expect(text).toMatch(
      /^ {9}8 {2}- {8}Step\\u001b\[31mStarted {2}undecodable {6}3 {2}event is not a valid protobuf Envelope:\\nindex out of range$/m,
    );
    expect(text).toContain("  8: ff0013");
    expect(text).not.toContain("\u001b");
  });

  it("shows a time an event gave that no date holds as the number it is, instead of failing", () => {
    const cooling: EventPayload = {
      $case: "stepStarted",
      value: StepStarted.fromPartial({
        stepId: "s1",
        step: 1,
        model: "fast",
        route: {
          alias: "fast",
          target: 0,
          upstream: "https://api.groq.com",
          model: "llama-3.1-8b-instant",
          reason: RouteReason.ROUTE_REASON_HEADROOM,
          candidates: [{ target: 1, standing: RouteStanding.ROUTE_STANDING_TRIED, untilMs: 9e15 }],
        },
      }),
    };
    expect(renderRun(run([cooling]), T0)).toContain("#1 tried until 9000000000000000 ms (no date)");
  });
});

describe("holdfast ls", () => {
  it("says why a held or stopped run is, and how many calls wait", () => {
    expect(heldBecause({ status: "held", hold_reason: "limit: cost", parked_calls: 2 })).toBe(
      "limit: cost (2 calls parked)",
    );
    expect(heldBecause({ status: "stopped", hold_reason: "operator: enough", parked_calls: 0 })).toBe(
      "operator: enough",
    );
    expect(heldBecause({ status: "idle", hold_reason: "", parked_calls: 0 })).toBe("-");
  });
});

describe("holdfast show, steps Holdfast estimated", () => {
  const outcome = (stepId: string, step: number, extra: Record<string, unknown>): EventPayload => ({
    $case: "stepCompleted",
    value: StepCompleted.fromPartial({
      outcome: {
        stepId,
        step,
        model: "gpt-4o",
        upstreamStatus: 200,
        cost: { known: true, nanoUsd: 1_000 },
        ...extra,
      },
    }),
  });
  const start = (stepId: string, step: number, model = "gpt-4o"): EventPayload => ({
    $case: "stepStarted",
    value: StepStarted.fromPartial({ stepId, step, model }),
  });

  it("marks each one's cost and says why: the provider's usage unusable, cut off, rounded; the model unpriced", () => {
    const text = renderRun(
      run([
        start("s1", 1),
        outcome("s1", 1, {
          estimated: true,
          usageEstimate: UsageEstimate.USAGE_ESTIMATE_INVALID,
          usageProblem: "completion_tokens -5 is negative",
        }),
        start("s2", 2),
        outcome("s2", 2, { estimated: true, usageEstimate: UsageEstimate.USAGE_ESTIMATE_PARTIAL }),
        start("s3", 3),
        outcome("s3", 3, { usageProblem: "completion_tokens 3.7 is not a whole number: rounded to 4" }),
        start("s4", 4, "my-model"),
        outcome("s4", 4, { model: "my-model", unknownPrice: true }),
      ]),
      T0 + 10_000,
    );
    expect(text).toMatch(/^cost {8}\$0\.000004 \(3 step\(s\) estimated, see below\)$/m);
    expect(text.match(/\$0\.000001 \(est\.\)/g)).toHaveLength(3);
    expect(text).toContain(
      "  step 1  usage estimated: the provider's report could not be used; the input estimated from the request, the run's usual output (completion_tokens -5 is negative)",
    );
    expect(text).toContain(
      "  step 2  usage estimated: the answer was cut off midway; its output estimated from what was relayed",
    );
    expect(text).toContain(
      "  step 3  usage as the provider reported it, rounded (completion_tokens 3.7 is not a whole number: rounded to 4)",
    );
    expect(text).toContain(
      "  step 4  my-model has no known price: charged at pricing.unknown_usd_per_mtok (a cost limit or budget applies)",
    );
  });
});
