import { ActorKind, type AgentView, ReleaseReason, RunResumed } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { NOT_SUBMITTED, progressLine, type RunStage, stageAfter, waitingLine } from "./progress.js";

type Payload = NonNullable<Parameters<typeof progressLine>[0]["payload"]>;
const event = (payload: Payload) => ({ payload });
const caps = { ceilingMs: 600_000, concurrencyPerKey: 0, startsPerMinute: 0 };
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };

const submitted = event({
  $case: "runSubmitted",
  value: {
    agent: "research",
    version: "v1",
    inputJson: "{}",
    partitionKey: "",
    idempotencyKey: "",
    caps,
    actor: operator,
  },
});
const leased = event({
  $case: "runLeased",
  value: { worker: "w1", lease: 1, leaseMs: 30_000, reusableSteps: 0 },
});
const released = (reason: ReleaseReason) =>
  event({ $case: "runReleased", value: { lease: 1, reason, ranMs: 10 } });

function stageOf(...events: ReturnType<typeof event>[]): RunStage {
  return events.reduce(stageAfter, NOT_SUBMITTED);
}

describe("runs submit --wait", () => {
  it("says what each event of the run means", () => {
    expect(progressLine(submitted)).toBe("queued: research (version v1)");
    expect(progressLine(leased)).toBe("leased by worker w1 (lease 1)");
    expect(
      progressLine(
        event({
          $case: "stepRecorded",
          value: {
            lease: 1,
            label: "model",
            ordinal: 2,
            attempt: 1,
            ok: true,
            resultJson: '"x"',
            error: "",
            final: true,
            durationMs: 87,
          },
        }),
      ),
    ).toBe("step model#2 recorded (87 ms)");
    expect(
      progressLine(
        event({
          $case: "stepRecorded",
          value: {
            lease: 1,
            label: "tool:search",
            ordinal: 1,
            attempt: 2,
            ok: false,
            resultJson: "",
            error: "timeout\nafter 5 s",
            final: false,
            durationMs: 5_000,
          },
        }),
      ),
    ).toBe("step tool:search#1 attempt 2 failed, retrying: timeout after 5 s");
    expect(progressLine(released(ReleaseReason.RELEASE_REASON_LEASE_EXPIRED))).toBe(
      "let go (its worker's lease expired); queued again",
    );
    expect(
      progressLine(
        event({
          $case: "runHeld",
          value: { actor: operator, reason: "look", selector: undefined, ruleId: "" },
        }),
      ),
    ).toBe("held by operator (control token): look; it waits for a resume");
  });

  it("waits for a worker only while the run is queued: not while it runs, is held or has ended", () => {
    expect(stageOf(submitted).queued).toBe(true);
    expect(stageOf(submitted, leased).queued).toBe(false);
    expect(stageOf(submitted, leased, released(ReleaseReason.RELEASE_REASON_WORKER_GONE)).queued).toBe(true);
    const held = event({
      $case: "runHeld",
      value: { actor: operator, reason: "", selector: undefined, ruleId: "" },
    });
    expect(stageOf(submitted, leased, held, released(ReleaseReason.RELEASE_REASON_HELD)).queued).toBe(false);
    const resumed = event({
      $case: "runResumed",
      value: RunResumed.fromPartial({ actor: operator }),
    });
    expect(stageOf(submitted, held, resumed).queued).toBe(true);
    const finished = event({
      $case: "runFinished",
      value: { lease: 1, outputJson: "1", degraded: "", ranMs: 5 },
    });
    expect(stageOf(submitted, leased, finished).queued).toBe(false);
  });

  it("says clearly when no worker serves the run's agent, or none its version", () => {
    const view = (workers: number, onVersion: number, version = "v1"): AgentView => ({
      agent: "research",
      version,
      caps,
      deployedMs: 0,
      workers,
      workersOnVersion: onVersion,
    });
    expect(waitingLine("research", "v1", [])).toBe(
      "no worker serves research: start one (holdfast worker <module>); the run waits, queued",
    );
    expect(waitingLine("research", "v1", [view(0, 0)])).toMatch(/^no worker serves research:/);
    expect(waitingLine("research", "v1", [view(2, 0, "v2")])).toMatch(
      /^no worker serves research at version v1 \(2 serve another version\)/,
    );
    expect(waitingLine("research", "v1", [view(1, 1)])).toMatch(
      /^waiting for a free worker: 1 worker serves research@v1/,
    );
  });
});
