import { MAX_NANO_USD, type RunCommand, type RunState, type Trip } from "@holdfast/events";
import type { AcquireRequest, AcquireResponse } from "@holdfast/proto";
import type { Ledger } from "@holdfast/runs";
import { BudgetUnavailableError } from "../errors.js";
import { type Amendment, type Call, CONTINUE, type GatewayFeature } from "../pipeline/hooks.js";

/** The budget service as the gateway uses it (gRPC holdfast.v1.Budget). */
export interface BudgetApi {
  acquire(request: AcquireRequest): Promise<AcquireResponse>;
  release(leaseId: string, reportedNanoUsd: number): Promise<void>;
}

export interface BudgetFeatureOptions {
  api: BudgetApi;
  /** The budgets a run with this tag spends from (its tag's, and "*"), as configured. */
  keysFor: (tag: string) => string[];
  ledger: Ledger<RunState, RunCommand>;
  /** This gateway process, as its StepStarted events name it. */
  gateway: string;
  clock: () => number;
}

interface LocalLease {
  readonly leaseId: string;
  readonly grantedNanoUsd: number;
  /** Reservations of calls started under it, settled to their cost once known. */
  usedNanoUsd: number;
  readonly validUntilMs: number;
}

// A slice asks for this many calls' worth at a time: fewer round trips, more held back
// from other gateways. Near a budget's end the service grants only what is left.
const CALLS_PER_SLICE = 20;
// A slice is given up this long before the service would expire it (its clock may run ahead).
const EXPIRY_MARGIN_MS = 2_000;
// A slice with less than this share of a full slice left, or this close to its end, is
// renewed in the background, so calls rarely wait for the budget service.
const REFRESH_BELOW_SHARE = 0.25;
const REFRESH_BEFORE_END_MS = 5_000;

/**
 * Budgets across runs at the gateway: each call's reservation comes out of a slice of
 * every budget its run spends from, leased from the budget service and spent locally; the
 * gateway renews a slice in the background when it runs low or nears its end, and a call
 * waits for the service only when its slice cannot cover it. A budget that cannot cover
 * the call trips the run before the call (held or stopped as `on_trip` says; its figures
 * are the service's). A run an operator resumed with limits of its own is exempt for that
 * window. While the budget service cannot be reached, calls that need a new slice are
 * refused with a retryable 503: a budget is never overspent because its keeper was down.
 */
export function budgetFeature(options: BudgetFeatureOptions): {
  feature: GatewayFeature;
  close(): Promise<void>;
} {
  const leases = new Map<string, LocalLease>();
  const pending = new Map<string, Promise<LocalLease | Trip>>();
  // Each call's reservation: the slices it came out of, and how much it took of each.
  const byCall = new WeakMap<Call, { leases: LocalLease[]; need: number }>();

  /** A slice covering `need` on one budget: the current one, or a new one (one request at a time). */
  const sliceFor = async (key: string, need: number): Promise<LocalLease | Trip> => {
    for (;;) {
      const current = leases.get(key);
      if (current !== undefined && current.validUntilMs > options.clock()) {
        if (current.grantedNanoUsd - current.usedNanoUsd >= need) return current;
      }
      const inFlight = pending.get(key);
      if (inFlight !== undefined) {
        await inFlight.catch(() => undefined);
        continue;
      }
      const asking = renew(key, need, current);
      pending.set(key, asking);
      try {
        return await asking;
      } finally {
        pending.delete(key);
      }
    }
  };

  /** Starts renewing a slice that runs low or ends soon, nobody waiting; a failure leaves it to the next call. */
  const refreshIfLow = (key: string, slice: LocalLease, need: number): void => {
    if (pending.has(key)) return;
    const low = slice.grantedNanoUsd - slice.usedNanoUsd < need * CALLS_PER_SLICE * REFRESH_BELOW_SHARE;
    const ending = slice.validUntilMs - options.clock() < REFRESH_BEFORE_END_MS;
    if (!low && !ending) return;
    const asking = renew(key, need, slice);
    pending.set(key, asking);
    void asking.catch(() => undefined).finally(() => pending.delete(key));
  };

  const renew = async (
    key: string,
    need: number,
    current: LocalLease | undefined,
  ): Promise<LocalLease | Trip> => {
    let answer: AcquireResponse;
    try {
      answer = await options.api.acquire({
        key,
        gateway: options.gateway,
        // Never more than the request can carry to the service (a saturated reservation's 20-fold).
        wantNanoUsd: Math.min(MAX_NANO_USD, Math.max(need * CALLS_PER_SLICE, need)),
        needNanoUsd: need,
        reportedNanoUsd: current?.usedNanoUsd ?? 0,
      });
    } catch (error) {
      throw new BudgetUnavailableError(
        "Holdfast could not reach its budget service to cover this call, so it was not sent. Retry shortly.",
        { cause: error },
      );
    }
    const lease: LocalLease = {
      leaseId: answer.leaseId,
      grantedNanoUsd: answer.grantedNanoUsd,
      usedNanoUsd: 0,
      validUntilMs: options.clock() + answer.validForMs - EXPIRY_MARGIN_MS,
    };
    leases.set(key, lease);
    if (answer.exhausted !== undefined && answer.grantedNanoUsd < need) return answer.exhausted;
    return lease;
  };

  const feature: GatewayFeature = async (app) => {
    app.pipeline.beforeForward.push(async (call): Promise<Amendment> => {
      // Asked again for the same call (parked then released, a run busy, a rewrite): what
      // the last asking reserved goes back first, or it would count twice.
      giveBack(call);
      // An operator's call from a recorded step is metered under `eval`, never budgeted.
      if (call.origin !== undefined) return CONTINUE;
      const keys = options.keysFor(call.run.tag || options.ledger.cached(call.run.runId)?.tag || "");
      if (keys.length === 0) return CONTINUE;
      // The operator set this window's limits: budgets do not hold it until the next.
      if (options.ledger.cached(call.run.runId)?.window.overrides === true) return CONTINUE;
      const need = call.reservedNanoUsd;
      const taken: LocalLease[] = [];
      for (const key of keys) {
        const slice = await sliceFor(key, need);
        if (!("leaseId" in slice)) {
          for (const lease of taken) lease.usedNanoUsd -= need;
          return { kind: "park", trip: { ...slice, callModel: call.view.model } };
        }
        slice.usedNanoUsd += need;
        taken.push(slice);
        refreshIfLow(key, slice, need);
      }
      byCall.set(call, { leases: taken, need });
      return { kind: "continue", notes: { budgetLeases: taken.map((lease) => lease.leaseId) } };
    });
    // What the call really cost replaces its reservation in the slice it came out of.
    app.pipeline.afterOutcome.push((call, cost) => {
      const taken = byCall.get(call);
      if (taken === undefined) return;
      byCall.delete(call);
      const actual = cost.known ? cost.nanoUsd : taken.need;
      for (const lease of taken.leases) lease.usedNanoUsd += actual - taken.need;
    });
    // A call over with no outcome (never started: refused, stopped, left or dropped while
    // parked) spent nothing: its reservation goes back.
    app.pipeline.callEnded.push(giveBack);
  };

  function giveBack(call: Call): void {
    const taken = byCall.get(call);
    if (taken === undefined) return;
    byCall.delete(call);
    for (const lease of taken.leases) lease.usedNanoUsd -= taken.need;
  }

  return {
    feature,
    async close() {
      await Promise.allSettled(
        [...leases.values()].map((lease) => options.api.release(lease.leaseId, lease.usedNanoUsd)),
      );
      leases.clear();
    },
  };
}
