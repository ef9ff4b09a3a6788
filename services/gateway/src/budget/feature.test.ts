import { describe, expect, it } from "vitest";
import type { Call } from "../pipeline/hooks.js";
import { PipelineHooks } from "../pipeline/hooks.js";
import type { Waiting } from "../pipeline/wait.js";
import { budgetFeature } from "./feature.js";

function setup() {
  const released: { leaseId: string; reported: number }[] = [];
  const acquired: number[] = [];
  const api = {
    acquire: async (req: { reportedNanoUsd: number }) => {
      acquired.push(req.reportedNanoUsd);
      return { leaseId: "lease-1", grantedNanoUsd: 1_000_000, validForMs: 60_000, exhausted: undefined };
    },
    release: async (leaseId: string, reported: number) => {
      released.push({ leaseId, reported });
    },
  };
  const ledger = { cached: () => undefined } as never;
  const budget = budgetFeature({
    api: api as never,
    keysFor: () => ["team"],
    ledger,
    gateway: "gw#1",
    clock: () => 0,
  });
  const hooks = new PipelineHooks({} as Waiting);
  return { budget, hooks, released, acquired };
}

const callOf = (reserved: number) =>
  ({ run: { runId: "r", tag: "team" }, reservedNanoUsd: reserved, view: { model: "m" } }) as unknown as Call;

describe("a budget's slice, as a call reserves and settles it", () => {
  it("a call admitted twice (parked, then resumed) and costing 100 counts 100", async () => {
    const { budget, hooks, released } = setup();
    await budget.feature({ pipeline: hooks } as never);
    const call = callOf(100);
    await hooks.beforeForward[0]!(call); // first pass: the hold gate then parks the call
    await hooks.beforeForward[0]!(call); // after the resume, admit asks every feature again
    hooks.outcome(call, { known: true, nanoUsd: 100 }, { usage: undefined, latencyMs: 1, status: 200 });
    await budget.close();
    expect(released).toEqual([{ leaseId: "lease-1", reported: 100 }]);
  });

  it("a call that never starts (refused or left while parked) counts nothing", async () => {
    const { budget, hooks, released } = setup();
    await budget.feature({ pipeline: hooks } as never);
    const call = callOf(100);
    await hooks.beforeForward[0]!(call);
    hooks.ended(call); // finish: no outcome, the call is over
    await budget.close();
    expect(released).toEqual([{ leaseId: "lease-1", reported: 0 }]);
  });
});
