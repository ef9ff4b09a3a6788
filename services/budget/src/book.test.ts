import {
  Api,
  type EventPayload,
  LimitKind,
  makeEnvelope,
  RunSource,
  StepCompleted,
  type StoredEnvelope,
} from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { BudgetBook, periodsOf } from "./book.js";

// The budgets across runs: spend folded from the log, slices leased to gateways.
const USD = 1_000_000_000;
const DAY = Date.UTC(2026, 11, 3, 12, 0, 0);
let seq = 0;

function event(tag: string, payload: EventPayload, at = DAY): StoredEnvelope {
  seq += 1;
  return makeEnvelope({ id: `e${seq}`, runId: `run-${tag}`, sequence: seq, timestampMs: at, tag, payload });
}

function started(
  stepId: string,
  tag: string,
  reserved: number,
  leases: string[] = [],
  at = DAY,
): StoredEnvelope {
  return event(
    tag,
    {
      $case: "stepStarted",
      value: {
        stepId,
        step: 1,
        api: Api.API_OPENAI_CHAT_COMPLETIONS,
        model: "m",
        stream: false,
        identity: { source: RunSource.RUN_SOURCE_HEADER, key: "h", fingerprint: "", generation: 0 },
        messageCount: 1,
        upstream: "http://u",
        gateway: "gw#1",
        estimatedInputTokens: 10,
        promptHash: "",
        reservedNanoUsd: reserved,
        budgetLeases: leases,
        prediction: undefined,
        route: undefined,
        origin: undefined,
      },
    },
    at,
  );
}

function finished(stepId: string, tag: string, cost: number, at = DAY): StoredEnvelope {
  return event(
    tag,
    {
      $case: "stepCompleted",
      value: StepCompleted.fromPartial({ outcome: { stepId, cost: { known: true, nanoUsd: cost } } }),
    },
    at,
  );
}

const grant = (
  book: BudgetBook,
  leaseId: string,
  want: number,
  extra: Partial<Parameters<BudgetBook["grant"]>[0]> = {},
) =>
  book.grant({
    key: "prod",
    gateway: "gw#1",
    wantNanoUsd: want,
    needNanoUsd: USD / 100,
    reportedNanoUsd: 0,
    leaseId,
    nowMs: DAY,
    leaseMs: 30_000,
    ...extra,
  });

describe("BudgetBook", () => {
  it("counts nothing without a budget: what it grants does not depend on the log", () => {
    const none = new BudgetBook([]);
    expect(none.counts).toBe(false);
    const folded = new BudgetBook([]);
    for (const e of [started("a", "prod", USD), finished("a", "prod", 2 * USD)]) folded.fold(e);
    expect(grant(folded, "l1", 5 * USD).lease.grantedNanoUsd).toBe(
      grant(none, "l1", 5 * USD).lease.grantedNanoUsd,
    );
    expect(folded.keysFor("prod")).toEqual([]);
    expect(new BudgetBook([{ key: "*", dailyNanoUsd: USD, monthlyNanoUsd: undefined }]).counts).toBe(true);
  });

  it("counts what runs of a tag spent, and what all runs did under *", () => {
    const book = new BudgetBook([
      { key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: undefined },
      { key: "*", dailyNanoUsd: 50 * USD, monthlyNanoUsd: undefined },
    ]);
    for (const e of [started("a", "prod", USD), finished("a", "prod", 2 * USD), started("b", "dev", USD)])
      book.fold(e);
    expect(book.keysFor("prod")).toEqual(["prod", "*"]);
    expect(book.keysFor("dev")).toEqual(["*"]);
    expect(book.left("prod", DAY).nanoUsd).toBe(8 * USD);
    // b is in flight: its reservation counts against "*".
    expect(book.left("*", DAY).nanoUsd).toBe(47 * USD);
    expect(book.spent("*", periodsOf(DAY).day)).toEqual({ settledNanoUsd: 2 * USD, inflightNanoUsd: USD });
  });

  it("leases at most a quarter of what is left, so other gateways find slices too", () => {
    const book = new BudgetBook([{ key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: undefined }]);
    expect(grant(book, "L1", 5 * USD).lease.grantedNanoUsd).toBe(2.5 * USD);
    expect(book.left("prod", DAY).nanoUsd).toBe(7.5 * USD);
    expect(grant(book, "L2", 5 * USD, { gateway: "gw#2" }).lease.grantedNanoUsd).toBe(1.875 * USD);
  });

  it("says exhausted, with the figures, when what is left cannot cover the call in hand", () => {
    const book = new BudgetBook([{ key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: undefined }]);
    book.fold(started("a", "prod", 0));
    book.fold(finished("a", "prod", 9 * USD));
    const answer = grant(book, "L1", 5 * USD, { needNanoUsd: 2 * USD });
    expect(answer.lease.grantedNanoUsd).toBe(1 * USD);
    expect(answer.exhausted).toEqual({
      limit: LimitKind.LIMIT_KIND_DAILY_BUDGET,
      limitValue: 10 * USD,
      spentValue: 9 * USD,
      budgetKey: "prod",
      period: "2026-12-03",
      crossedByStepId: "",
      callModel: "",
      prediction: undefined,
    });
  });

  it("says exhausted with figures every reader decodes after calls at the saturated cost, and counts no negative cost", () => {
    const MAX = Number.MAX_SAFE_INTEGER;
    const book = new BudgetBook([{ key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: undefined }]);
    for (const e of [
      started("a", "prod", 0),
      finished("a", "prod", MAX),
      started("b", "prod", 0),
      finished("b", "prod", MAX),
      started("c", "prod", 0),
      finished("c", "prod", -MAX),
    ])
      book.fold(e);
    const answer = grant(book, "L1", 5 * USD);
    expect(answer.lease.grantedNanoUsd).toBe(0);
    expect(answer.exhausted).toMatchObject({ limitValue: 10 * USD, spentValue: MAX });
    expect(book.spent("prod", periodsOf(DAY).day).settledNanoUsd).toBe(2 * MAX);
  });

  it("keeps a lease's calls counted, in flight and after; what they cost beyond the slice is the overshoot", () => {
    const book = new BudgetBook([{ key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: undefined }]);
    grant(book, "L1", 4 * USD); // 2.5 granted
    expect(book.left("prod", DAY).nanoUsd).toBe(7.5 * USD);
    book.fold(started("a", "prod", USD, ["L1"]));
    expect(book.left("prod", DAY).nanoUsd).toBe(7.5 * USD);
    // It reserved 1 USD and cost 4: 1.5 USD beyond the slice comes out of what is left…
    book.fold(finished("a", "prod", 4 * USD));
    expect(book.left("prod", DAY).nanoUsd).toBe(6 * USD);
    // …and so does anything more the gateway starts under the spent slice.
    book.fold(started("b", "prod", 3 * USD, ["L1"]));
    expect(book.left("prod", DAY).nanoUsd).toBe(3 * USD);
  });

  it("keeps counting a replaced lease's calls the log has not shown yet, until it shows them", () => {
    const book = new BudgetBook([{ key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: undefined }]);
    grant(book, "L1", 4 * USD);
    // The gateway started 3 USD of calls under L1 that the service has not folded yet, then renews.
    const l2 = grant(book, "L2", 2 * USD, { reportedNanoUsd: 3 * USD });
    expect(l2.lease.grantedNanoUsd).toBe(1.75 * USD);
    expect(book.left("prod", DAY).nanoUsd).toBe(10 * USD - 3 * USD - 1.75 * USD);
    book.fold(started("a", "prod", 3 * USD, ["L1"]));
    expect(book.left("prod", DAY).nanoUsd).toBe(5.25 * USD);
    book.fold(finished("a", "prod", 3 * USD));
    expect(book.left("prod", DAY).nanoUsd).toBe(5.25 * USD);
  });

  it("frees an expired lease's unspent slice, and a new day starts a new daily budget", () => {
    const book = new BudgetBook([{ key: "prod", dailyNanoUsd: 10 * USD, monthlyNanoUsd: 100 * USD }]);
    grant(book, "L1", 6 * USD);
    expect(book.left("prod", DAY).nanoUsd).toBe(7.5 * USD);
    book.expire(DAY + 31_000);
    expect(book.left("prod", DAY + 31_000).nanoUsd).toBe(10 * USD);
    book.fold(started("a", "prod", 0));
    book.fold(finished("a", "prod", 9 * USD));
    expect(book.left("prod", DAY).kind).toBe("day");
    const tomorrow = DAY + 24 * 3_600_000;
    expect(book.left("prod", tomorrow)).toEqual({ nanoUsd: 10 * USD, kind: "day", limit: 10 * USD });
    // The month remembers.
    expect(book.spent("prod", "2026-12").settledNanoUsd).toBe(9 * USD);
  });
});
