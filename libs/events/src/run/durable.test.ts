import { ActorKind, ReleaseReason, RunFailure } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import type { EventPayload } from "../envelope.js";
import { DurableRunError } from "../errors.js";
import { decide } from "./decide.js";
import { DurablePhase, type RecordStep, ranMsAt } from "./durable.js";
import { durableRunOf } from "./durable-view.js";
import { given, history, NOW, operator, RUN } from "./spec.fixture.js";
import { foldRun } from "./state.js";

// The durable run's part of the run decider, given/when/then: submitted, leased to a
// worker, its steps recorded under the lease, released, finished, failed, re-driven.

const scheduler = { kind: ActorKind.ACTOR_KIND_SCHEDULER, name: "scheduler" };
const caps = { ceilingMs: 1_800_000, concurrencyPerKey: 2, startsPerMinute: 30 };

const submitted: EventPayload = {
  $case: "runSubmitted",
  value: {
    agent: "research",
    version: "v1",
    inputJson: '{"q":"tides"}',
    partitionKey: "acme",
    idempotencyKey: "order-1",
    caps,
    actor: operator,
  },
};
const leased = (lease: number, worker = "w1"): EventPayload => ({
  $case: "runLeased",
  value: { worker, lease, leaseMs: 30_000, reusableSteps: 0 },
});
const recorded = (lease: number, label: string, ordinal: number, ok = true, attempt = 1): EventPayload => ({
  $case: "stepRecorded",
  value: {
    lease,
    label,
    ordinal,
    attempt,
    ok,
    resultJson: ok ? `"${label}-${ordinal}"` : "",
    error: ok ? "" : "boom",
    final: ok,
    durationMs: 5,
  },
});
const record = (
  lease: number,
  label: string,
  ordinal: number,
  overrides: Partial<RecordStep> = {},
): RecordStep => ({
  type: "RecordStep",
  lease,
  label,
  ordinal,
  attempt: 1,
  ok: true,
  resultJson: `"${label}-${ordinal}"`,
  error: "",
  final: true,
  durationMs: 5,
  ...overrides,
});
const released = (lease: number, reason = ReleaseReason.RELEASE_REASON_WORKER_GONE): EventPayload => ({
  $case: "runReleased",
  value: { lease, reason, ranMs: 1_000 },
});
const failed = (lease: number): EventPayload => ({
  $case: "runFailed",
  value: {
    lease,
    failure: RunFailure.RUN_FAILURE_ERROR,
    error: "boom",
    ranMs: 2_000,
    actor: undefined,
    label: "model",
    ordinal: 17,
  },
});

describe("a durable run", () => {
  it("is submitted once: a second submission with its idempotency key and the same input appends nothing", () => {
    given()
      .when({
        type: "SubmitRun",
        agent: "research",
        version: "v1",
        inputJson: '{"q":"tides"}',
        partitionKey: "acme",
        idempotencyKey: "order-1",
        caps,
        actor: operator,
      })
      .then(submitted);
    // The agent was deployed again meanwhile, and the client wrote the same input otherwise.
    given(submitted)
      .when({
        type: "SubmitRun",
        agent: "research",
        version: "v2",
        inputJson: '{ "q": "tides" }',
        partitionKey: "acme",
        idempotencyKey: "order-1",
        caps,
        actor: operator,
      })
      .then();
  });

  it("refuses its idempotency key with another input or partition key, naming the key", () => {
    const again = (inputJson: string, partitionKey: string) => () =>
      decide(
        {
          type: "SubmitRun",
          agent: "research",
          version: "v1",
          inputJson,
          partitionKey,
          idempotencyKey: "order-1",
          caps,
          actor: operator,
        },
        foldRun(RUN, history(submitted)),
        NOW,
      );
    for (const [input, key, what] of [
      ['{"q":"storms"}', "acme", "input"],
      ['{"q":"tides","n":2}', "acme", "input"],
      ["null", "acme", "input"],
      ['{"q":"tides"}', "", "partition key"],
    ] as const) {
      expect(again(input, key)).toThrow(
        expect.objectContaining({
          name: "DurableRunError",
          reason: "idempotency_key_reused",
          message: `idempotency key "order-1" was used before with another ${what}`,
        }),
      );
    }
  });

  it("is leased only while queued and not held, each lease numbered after the last", () => {
    given(submitted).when({ type: "LeaseRun", worker: "w1", leaseMs: 30_000 }).then(leased(1));
    given(submitted, leased(1), released(1))
      .when({ type: "LeaseRun", worker: "w2", leaseMs: 30_000 })
      .then({ $case: "runLeased", value: { worker: "w2", lease: 2, leaseMs: 30_000, reusableSteps: 0 } });
    expect(() =>
      decide(
        { type: "LeaseRun", worker: "w2", leaseMs: 30_000 },
        foldRun(RUN, history(submitted, leased(1))),
        NOW,
      ),
    ).toThrow(DurableRunError);
    const held: EventPayload = {
      $case: "runHeld",
      value: { actor: operator, reason: "look", selector: undefined, ruleId: "" },
    };
    expect(() =>
      decide(
        { type: "LeaseRun", worker: "w1", leaseMs: 30_000 },
        foldRun(RUN, history(submitted, held)),
        NOW,
      ),
    ).toThrow(/held/);
  });

  it("records a step under its lease, and a step recorded already (a retried write) not again", () => {
    given(submitted, leased(1))
      .when(record(1, "model", 1))
      .then(recorded(1, "model", 1));
    given(submitted, leased(1), recorded(1, "model", 1))
      .when(record(1, "model", 1))
      .then();
    // A label repeated in a loop is a new checkpoint each time.
    given(submitted, leased(1), recorded(1, "model", 1))
      .when(record(1, "model", 2))
      .then(recorded(1, "model", 2));
  });

  it("shows only the steps its fold took: one recorded past a gap in the run's sequence is none of its steps", () => {
    const [s1, l1, r1, r2] = history(submitted, leased(1), recorded(1, "model", 1), recorded(1, "search", 1));
    const forged = { ...history(recorded(1, "forged", 1))[0]!, sequence: 1_000 };
    const run = durableRunOf(RUN, [s1!, l1!, r1!, forged, r2!]);
    expect(run?.steps.map((step) => step.label)).toEqual(["model", "search"]);
    expect(run?.stepsRecorded).toBe(2);
  });

  it("recognises steps of one turn recorded out of order (parallel tool calls)", () => {
    const state = given(
      submitted,
      leased(1),
      recorded(1, "tool:search", 3),
      recorded(1, "tool:search", 1),
    ).state;
    expect(decide(record(1, "tool:search", 3), state, NOW)).toEqual([]);
    expect(decide(record(1, "tool:search", 1), state, NOW)).toEqual([]);
    expect(decide(record(1, "tool:search", 2), state, NOW)).toEqual([recorded(1, "tool:search", 2)]);
  });

  it("fences off a worker that lost its lease: its late writes are refused", () => {
    const state = given(submitted, leased(1), released(1), leased(2, "w2")).state;
    expect(() => decide(record(1, "model", 1), state, NOW)).toThrow(/lease 1 is over/);
    expect(() =>
      decide({ type: "FinishRun", lease: 1, outputJson: "{}", degraded: "", ranMs: 0 }, state, NOW),
    ).toThrow(DurableRunError);
    // Its release of a lease already over gives nothing back.
    expect(decide({ type: "ReleaseRun", lease: 1, reason: 1, ranMs: 0 }, state, NOW)).toEqual([]);
  });

  it("records each attempt once: a retried write of an attempt recorded already appends nothing", () => {
    const attempt2 = record(1, "model", 4, { ok: false, error: "503", final: false, attempt: 2 });
    const failedTwice = given(
      submitted,
      leased(1),
      recorded(1, "model", 4, false, 1),
      recorded(1, "model", 4, false, 2),
    );
    failedTwice.when(attempt2).then();
    failedTwice.when(record(1, "model", 4, { ok: false, error: "503", final: false, attempt: 1 })).then();
    failedTwice.when(record(1, "model", 4, { attempt: 3 })).then(recorded(1, "model", 4, true, 3));
  });

  it("records every failed attempt, and the one that gives up as final", () => {
    given(submitted, leased(1))
      .when(record(1, "model", 4, { ok: false, error: "503", final: false, attempt: 2 }))
      .then({
        $case: "stepRecorded",
        value: {
          lease: 1,
          label: "model",
          ordinal: 4,
          attempt: 2,
          ok: false,
          resultJson: "",
          error: "503",
          final: false,
          durationMs: 5,
        },
      });
  });

  it("is re-driven only once it failed, reusing its steps; replayed on a new version reusing none", () => {
    const history1 = [submitted, leased(1), recorded(1, "model", 1), recorded(1, "tool:x", 1), failed(1)];
    given(...history1)
      .when({ type: "RedriveRun", actor: operator, reason: "fixed the tool", replay: false, version: "v9" })
      .then({
        $case: "runRedriven",
        value: { actor: operator, reason: "fixed the tool", replay: false, version: "v1" },
      });
    const redriven = foldRun(
      RUN,
      history(...history1, {
        $case: "runRedriven",
        value: { actor: operator, reason: "", replay: false, version: "v1" },
      }),
    );
    expect(redriven.durable?.phase).toBe(DurablePhase.Queued);
    expect(redriven.durable?.stepsOk).toBe(2);
    expect(decide({ type: "LeaseRun", worker: "w2", leaseMs: 30_000 }, redriven, NOW)).toEqual([
      { $case: "runLeased", value: { worker: "w2", lease: 2, leaseMs: 30_000, reusableSteps: 2 } },
    ]);
    const replayed = foldRun(
      RUN,
      history(...history1, {
        $case: "runRedriven",
        value: { actor: operator, reason: "", replay: true, version: "v2" },
      }),
    );
    expect(replayed.durable?.version).toBe("v2");
    expect(replayed.durable?.stepsOk).toBe(0);
    expect(replayed.durable?.epoch).toBe(1);
    // A step recorded before the replay is a step to run again.
    const leasedAgain = foldRun(
      RUN,
      history(
        ...history1,
        { $case: "runRedriven", value: { actor: operator, reason: "", replay: true, version: "v2" } },
        leased(2),
      ),
    );
    expect(decide(record(2, "model", 1), leasedAgain, NOW)).toEqual([recorded(2, "model", 1)]);
    // A running run is not re-driven.
    expect(() =>
      decide(
        { type: "RedriveRun", actor: operator, reason: "", replay: false, version: "" },
        foldRun(RUN, history(submitted, leased(1))),
        NOW,
      ),
    ).toThrow(/only a finished or failed run/);
  });

  it("is failed by the scheduler whoever holds it (a ceiling), once", () => {
    const timeout = {
      type: "FailRun" as const,
      lease: 0,
      failure: RunFailure.RUN_FAILURE_TIMEOUT,
      error: "ran for more than 1800 s",
      ranMs: 1_800_000,
      actor: scheduler,
      label: "",
      ordinal: 0,
    };
    given(submitted, leased(3))
      .when(timeout)
      .then({
        $case: "runFailed",
        value: {
          lease: 3,
          failure: RunFailure.RUN_FAILURE_TIMEOUT,
          error: "ran for more than 1800 s",
          ranMs: 1_800_000,
          actor: scheduler,
          label: "",
          ordinal: 0,
        },
      });
    given(submitted, leased(3), failed(3)).when(timeout).then();
  });

  it("counts the wall clock it ran across leases, not the time it waited", () => {
    const state = foldRun(RUN, history(submitted, leased(1), released(1), leased(2)));
    const durable = state.durable!;
    expect(durable.ranMs).toBe(1_000);
    expect(ranMsAt(durable, durable.leasedAtMs + 500)).toBe(1_500);
    expect(durable.leases).toBe(2);
  });
});
