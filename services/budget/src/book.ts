import { isKnown, LimitKind, MAX_NANO_USD, type StoredEnvelope, type Trip } from "@holdfast/events";

/** A budget across runs: per tag, or "*" for every run; per UTC day and/or month, in nano-USD. */
export interface BudgetLimit {
  readonly key: string;
  readonly dailyNanoUsd: number | undefined;
  readonly monthlyNanoUsd: number | undefined;
}

/** A slice of a budget a gateway may spend without asking again, until it expires. */
export interface Lease {
  readonly leaseId: string;
  readonly key: string;
  /** The gateway process ("<instance id>#<boot id>"), as its StepStarted events name it. */
  readonly gateway: string;
  readonly grantedNanoUsd: number;
  readonly grantedMs: number;
  readonly expiresMs: number;
  readonly day: string;
  readonly month: string;
}

/** What a gateway is told when it asks for a lease. */
export interface Grant {
  readonly lease: Lease;
  /** Less than the call needs: the budget is spent, and this is the trip to record. */
  readonly exhausted: Trip | undefined;
}

interface LeaseAccount extends Lease {
  /** Reservations of the lease's calls in flight, as the log has shown them. */
  inflight: number;
  /** Known cost of the lease's finished calls. */
  settled: number;
  /** What the gateway said it had reserved under the lease when it gave it back. */
  reported: number;
  /** Closed (replaced, given back, or expired): only its calls not yet seen still count. */
  closedMs: number | undefined;
}

interface OpenStep {
  readonly keys: readonly string[];
  readonly reserved: number;
  readonly day: string;
  readonly month: string;
  readonly leases: readonly LeaseAccount[];
}

interface PeriodTotals {
  settled: number;
  inflight: number;
}

// A closed lease's calls not yet seen in the log count this long, then the log has them.
const DRAIN_MS = 60_000;
const SHARE_DIVISOR = 4;

/** UTC day and month of a time: "2026-12-03", "2026-12". */
export function periodsOf(ms: number): { day: string; month: string } {
  const iso = new Date(ms).toISOString();
  return { day: iso.slice(0, 10), month: iso.slice(0, 7) };
}

/**
 * The budgets across runs, as the log has spent them, and the slices leased to gateways.
 *
 * Spend is folded from the events: a call's reservation (StepStarted) counts while it is in
 * flight, its known cost (StepCompleted / StepFailed) once it has finished, in the periods
 * of its run's tag and of "*". A gateway spends a lease locally, reserving each call's
 * estimate, and comes back only when the lease runs low. What a budget has left for a
 * new lease is its limit, minus what the log shows spent and in flight, minus what every
 * open lease has not yet been seen to spend (its unspent slice stays reserved), minus the
 * calls of closed leases the log has not shown yet. A budget can therefore be overshot
 * only by what calls cost beyond their reservations.
 */
export class BudgetBook {
  private readonly limits = new Map<string, BudgetLimit>();
  private readonly totals = new Map<string, PeriodTotals>();
  private readonly steps = new Map<string, OpenStep>();
  private readonly leases = new Map<string, LeaseAccount>();

  constructor(limits: readonly BudgetLimit[]) {
    for (const limit of limits) this.limits.set(limit.key, limit);
  }

  /** Whether any budget is kept: without one, no event changes what a lease is granted. */
  get counts(): boolean {
    return this.limits.size > 0;
  }

  /** The budgets a run with this tag spends from. */
  keysFor(tag: string): string[] {
    const keys: string[] = [];
    if (tag !== "" && tag !== "*" && this.limits.has(tag)) keys.push(tag);
    if (this.limits.has("*")) keys.push("*");
    return keys;
  }

  /** Whether events of this type change the book (others need not be decoded). */
  static folds(type: string): boolean {
    return type === "StepStarted" || type === "StepCompleted" || type === "StepFailed";
  }

  /** Folds one event of the log (in order; each once). */
  fold(event: StoredEnvelope): void {
    if (!isKnown(event)) return;
    const { payload } = event;
    switch (payload.$case) {
      case "stepStarted": {
        const e = payload.value;
        const keys = this.keysFor(event.tag);
        if (keys.length === 0) return;
        const { day, month } = periodsOf(event.timestampMs);
        const reserved = Math.max(0, e.reservedNanoUsd);
        for (const key of keys) {
          this.period(key, day).inflight += reserved;
          this.period(key, month).inflight += reserved;
        }
        const leases: LeaseAccount[] = [];
        for (const leaseId of e.budgetLeases) {
          const lease = this.leases.get(leaseId);
          if (lease === undefined) continue;
          lease.inflight += reserved;
          leases.push(lease);
        }
        this.steps.set(e.stepId, { keys, reserved, day, month, leases });
        return;
      }
      case "stepCompleted":
      case "stepFailed": {
        const outcome = payload.value.outcome;
        if (outcome === undefined) return;
        // Never below zero: a negative cost a writer got wrong would give a budget back.
        const cost = outcome.cost?.known === true ? Math.max(0, outcome.cost.nanoUsd) : 0;
        const step = this.steps.get(outcome.stepId);
        const { day, month } = periodsOf(event.timestampMs);
        if (step === undefined) {
          // Started before the book's history: its cost still counts.
          for (const key of this.keysFor(event.tag)) {
            this.period(key, day).settled += cost;
            this.period(key, month).settled += cost;
          }
          return;
        }
        this.steps.delete(outcome.stepId);
        for (const key of step.keys) {
          this.period(key, step.day).inflight -= step.reserved;
          this.period(key, step.month).inflight -= step.reserved;
          this.period(key, day).settled += cost;
          this.period(key, month).settled += cost;
        }
        for (const lease of step.leases) {
          lease.inflight -= step.reserved;
          lease.settled += cost;
        }
        return;
      }
      default:
        return;
    }
  }

  /**
   * A lease of up to `wantNanoUsd` on one budget for a gateway, replacing the gateway's
   * open lease on it (whose reservations it reports, so calls the log has not shown yet
   * still count). Granted less than `needNanoUsd` (the call in hand), the budget is spent.
   */
  grant(request: {
    key: string;
    gateway: string;
    wantNanoUsd: number;
    needNanoUsd: number;
    /** What the gateway reserved under the lease it is replacing. */
    reportedNanoUsd: number;
    leaseId: string;
    nowMs: number;
    leaseMs: number;
  }): Grant {
    const { key, gateway, nowMs } = request;
    this.expire(nowMs);
    const previous = this.openLeaseOf(gateway, key, nowMs);
    if (previous !== undefined) this.close(previous, request.reportedNanoUsd, nowMs);
    const { day, month } = periodsOf(nowMs);
    const left = this.left(key, nowMs);
    // A quarter of what is left at most (but enough for the call in hand): other gateways
    // still find slices near a budget's end, which then comes in smaller slices, more often.
    const share = Math.max(request.needNanoUsd, Math.floor(left.nanoUsd / SHARE_DIVISOR));
    const granted = Math.max(0, Math.min(request.wantNanoUsd, share, left.nanoUsd, MAX_NANO_USD));
    const lease: LeaseAccount = {
      leaseId: request.leaseId,
      key,
      gateway,
      grantedNanoUsd: granted,
      grantedMs: nowMs,
      expiresMs: nowMs + request.leaseMs,
      day,
      month,
      inflight: 0,
      settled: 0,
      reported: 0,
      closedMs: undefined,
    };
    this.leases.set(lease.leaseId, lease);
    const exhausted =
      granted < request.needNanoUsd && left.kind !== undefined
        ? {
            limit:
              left.kind === "day" ? LimitKind.LIMIT_KIND_DAILY_BUDGET : LimitKind.LIMIT_KIND_MONTHLY_BUDGET,
            // Figures an event carries: a spend of saturated costs is no more than every reader decodes.
            limitValue: Math.min(MAX_NANO_USD, left.limit),
            spentValue: Math.min(MAX_NANO_USD, Math.max(0, left.limit - left.nanoUsd)),
            budgetKey: key,
            period: left.kind === "day" ? day : month,
            crossedByStepId: "",
            callModel: "",
            prediction: undefined,
          }
        : undefined;
    return { lease: publicLease(lease), exhausted };
  }

  /** A gateway gives a lease back (it is closing): its unspent slice is free again. */
  release(leaseId: string, reportedNanoUsd: number, nowMs: number): void {
    const lease = this.leases.get(leaseId);
    if (lease !== undefined && lease.closedMs === undefined) this.close(lease, reportedNanoUsd, nowMs);
  }

  /** What a budget has left now, for its tightest period, in nano-USD (Infinity when none is set). */
  left(key: string, nowMs: number): { nanoUsd: number; kind: "day" | "month" | undefined; limit: number } {
    const limit = this.limits.get(key);
    if (limit === undefined) return { nanoUsd: Number.POSITIVE_INFINITY, kind: undefined, limit: 0 };
    const { day, month } = periodsOf(nowMs);
    let tightest = {
      nanoUsd: Number.POSITIVE_INFINITY,
      kind: undefined as "day" | "month" | undefined,
      limit: 0,
    };
    for (const [kind, period, value] of [
      ["day", day, limit.dailyNanoUsd],
      ["month", month, limit.monthlyNanoUsd],
    ] as const) {
      if (value === undefined) continue;
      const totals = this.totals.get(`${key}\u0000${period}`) ?? { settled: 0, inflight: 0 };
      const left = value - totals.settled - totals.inflight - this.leased(key, kind, period, nowMs);
      if (left < tightest.nanoUsd) tightest = { nanoUsd: left, kind, limit: value };
    }
    return tightest;
  }

  /** Spent (settled and in flight) in a budget's period, for reports and tests. */
  spent(key: string, period: string): { settledNanoUsd: number; inflightNanoUsd: number } {
    const totals = this.totals.get(`${key}\u0000${period}`) ?? { settled: 0, inflight: 0 };
    return { settledNanoUsd: totals.settled, inflightNanoUsd: totals.inflight };
  }

  /** Leases open or still draining (for persistence and reports). */
  openLeases(): Lease[] {
    return [...this.leases.values()].filter((l) => l.closedMs === undefined).map(publicLease);
  }

  /** Takes back a lease recorded before a restart (its calls are folded from the log after). */
  restore(lease: Lease): void {
    this.leases.set(lease.leaseId, { ...lease, inflight: 0, settled: 0, reported: 0, closedMs: undefined });
  }

  /** Closes leases past their expiry and forgets drained ones. */
  expire(nowMs: number): void {
    for (const lease of this.leases.values()) {
      if (lease.closedMs === undefined && lease.expiresMs <= nowMs) this.close(lease, 0, nowMs);
      else if (lease.closedMs !== undefined && nowMs - lease.closedMs > DRAIN_MS)
        this.leases.delete(lease.leaseId);
    }
  }

  /** What open leases hold back in a period, and closed ones' calls not yet seen. */
  private leased(key: string, kind: "day" | "month", period: string, nowMs: number): number {
    let sum = 0;
    for (const lease of this.leases.values()) {
      if (lease.key !== key || (kind === "day" ? lease.day : lease.month) !== period) continue;
      const seen = lease.settled + lease.inflight;
      if (lease.closedMs === undefined && lease.expiresMs > nowMs)
        sum += Math.max(0, lease.grantedNanoUsd - seen);
      else sum += Math.max(0, lease.reported - seen);
    }
    return sum;
  }

  private close(lease: LeaseAccount, reported: number, nowMs: number): void {
    lease.closedMs = nowMs;
    lease.reported = reported;
  }

  /** The gateway's open lease on a budget (a gateway holds one per budget). */
  private openLeaseOf(gateway: string, key: string, nowMs: number): LeaseAccount | undefined {
    for (const lease of this.leases.values()) {
      if (
        lease.gateway === gateway &&
        lease.key === key &&
        lease.closedMs === undefined &&
        lease.expiresMs > nowMs
      ) {
        return lease;
      }
    }
    return undefined;
  }

  private period(key: string, period: string): PeriodTotals {
    const id = `${key}\u0000${period}`;
    let totals = this.totals.get(id);
    if (totals === undefined) {
      totals = { settled: 0, inflight: 0 };
      this.totals.set(id, totals);
    }
    return totals;
  }
}

function publicLease(lease: LeaseAccount): Lease {
  return {
    leaseId: lease.leaseId,
    key: lease.key,
    gateway: lease.gateway,
    grantedNanoUsd: lease.grantedNanoUsd,
    grantedMs: lease.grantedMs,
    expiresMs: lease.expiresMs,
    day: lease.day,
    month: lease.month,
  };
}
