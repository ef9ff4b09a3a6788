import type { Figures, Need } from "@holdfast/predict";
import type {
  ReleaseSliceRequest,
  ReserveRequest,
  ReserveResponse,
  SliceGranted,
  WindowAmounts,
  WindowFigures,
} from "@holdfast/proto";

/** The coordinator's RateWindows API as the gateway uses it. */
export interface RateWindowsApi {
  /**
   * Asks for room for one call: `first` is the coordinator's decision; when it is `queued`,
   * `turn` resolves with the grant when the call's turn comes. `cancel` leaves the queue.
   */
  reserve(request: ReserveRequest): Reservation;
  release(request: ReleaseSliceRequest): Promise<void>;
}

export interface Reservation {
  readonly first: Promise<ReserveResponse>;
  readonly turn: Promise<SliceGranted>;
  cancel(): void;
}

/** Room for calls on one key, granted by the coordinator and spent here. */
export interface Slice {
  readonly leaseId: string;
  readonly keyId: string;
  /** What is left to spend (less what calls in flight reserved), per dimension. */
  readonly left: Record<keyof Need, number>;
  readonly validUntilMs: number;
  /** Calls spending it now. */
  inFlight: number;
  /** Other calls may spend it (it covers more than the call it was asked for). */
  current: boolean;
  /** Calls like the one it was asked for that it covered when granted. */
  readonly calls: number;
  /** When a call last spent it, to be sent at once (ms since the epoch; 0: none yet). */
  lastSentAtMs: number;
}

/** What the shared window says of one call. */
export type SharedDecision =
  | { readonly kind: "continue"; readonly slice: Slice | undefined; readonly figures: Figures }
  | {
      readonly kind: "queued";
      readonly etaMs: number;
      readonly figures: Figures;
      /** The slice granted when the call's turn comes (spent by the call already). */
      readonly turn: Promise<Slice>;
      cancel(): void;
    }
  | {
      readonly kind: "checkpoint";
      readonly untilMs: number;
      readonly why: "threshold" | "deadline";
      readonly figures: Figures;
    }
  | { readonly kind: "too_large"; readonly figures: Figures }
  /** The coordinator cannot be asked (not configured, down, starting): decide locally. */
  | { readonly kind: "unavailable" }
  /** The coordinator has read nothing of the key yet (its first reading is on its way). */
  | { readonly kind: "unknown" };

export interface SharedAsk {
  readonly keyId: string;
  readonly upstream: string;
  readonly need: Need;
  readonly floor: Need;
  /** Answers on the key came back with nothing said of its window (a provider that sends none). */
  readonly silent: boolean;
  readonly priority: number;
  readonly sinceMs: number;
  readonly thresholdMs: number;
  readonly deadlineMs: number | undefined;
}

export interface SharedSlicesOptions {
  readonly api: RateWindowsApi;
  readonly gateway: string;
  readonly clock: () => number;
  /** Told when the coordinator stops or starts answering (for the log). */
  readonly onAvailability: (up: boolean, error?: unknown) => void;
  /** How long a granted slice lasts (predict.slice_ms): a new one is asked for to cover that much of this gateway's calls. */
  readonly sliceMs: number;
}

// A slice asks for room for at least this many calls like the one in hand (more when the
// gateway makes more in a slice's time, up to MAX_CALLS_PER_SLICE); the coordinator grants
// that only while the window has plenty (a share of what is left), else the call alone.
const CALLS_PER_SLICE = 8;
const MAX_CALLS_PER_SLICE = 10_000;
// A slice is renewed in the background once what is left of it covers fewer calls than
// this share of what it covered, or this share of its time is left.
const RENEW_AT = 0.25;
// The coordinator's first answer is awaited this long; longer, the call is decided here.
const FIRST_ANSWER_MS = 1_000;
// After the coordinator failed, the gateway decides alone for this long before asking again.
const RETRY_AFTER_DOWN_MS = 1_000;
// A slice is given up this long before the coordinator would count it expired.
const EXPIRY_MARGIN_MS = 100;

/**
 * The gateway's side of the shared rate-limit windows: a call spends the key's current
 * slice when it covers it (no round trip); otherwise the coordinator is asked, and the call
 * goes on, waits its turn, checkpoints its run, or is too large, as the coordinator says.
 * What a call's reservation held beyond what the provider counted goes back to its slice;
 * a slice done with (replaced, expired, its last call finished) is handed back with what is
 * left of it, so the fleet's account gets it back at once. While the coordinator cannot
 * be reached the gateway decides alone, from what it has read.
 */
export class SharedSlices {
  private readonly current = new Map<string, Slice>();
  private readonly unknownUntil = new Map<string, number>();
  /** Per key, the ask for a slice in flight: calls that find no room meanwhile wait for its answer. */
  private readonly asking = new Map<string, Promise<void>>();
  private readonly demand = new Map<string, Demand>();
  private downUntilMs = 0;
  private up = true;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly options: SharedSlicesOptions) {
    this.sweeper = setInterval(() => this.sweep(), 1_000);
    this.sweeper.unref();
  }

  async decide(ask: SharedAsk): Promise<SharedDecision> {
    const demand = this.demandOf(ask.keyId);
    demand.calls += 1;
    for (let waited = false; ; waited = true) {
      const nowMs = this.options.clock();
      if (nowMs < this.downUntilMs) return { kind: "unavailable" };
      if ((this.unknownUntil.get(ask.keyId) ?? 0) > nowMs) return { kind: "unavailable" };
      const slice = this.current.get(ask.keyId);
      if (slice !== undefined && slice.validUntilMs > nowMs && covers(slice, ask.need)) {
        spend(slice, ask.need, nowMs);
        if (runningLow(slice, ask.need, nowMs, this.options.sliceMs)) this.renew(ask);
        return { kind: "continue", slice, figures: NO_FIGURES };
      }
      // Another call is asking for this key's next slice: its answer usually covers this
      // call too, so it waits for that rather than asking (and replacing it) on its own.
      const asking = this.asking.get(ask.keyId);
      if (asking === undefined || waited) break;
      await withTimeout(asking, FIRST_ANSWER_MS).catch(() => undefined);
    }
    const slice = this.current.get(ask.keyId);
    // A slice that cannot cover the call is done with: what is left of it goes back with
    // the ask, so the coordinator decides on all the key has (kept here, it was counted as
    // spent, and a call found no room in a window that had it).
    let returned: Slice | undefined;
    if (slice !== undefined && slice.validUntilMs <= this.options.clock()) this.retire(slice);
    else if (slice !== undefined) returned = this.surrender(slice);
    let answered!: () => void;
    const asked = new Promise<void>((resolve) => {
      answered = resolve;
    });
    const mine = this.asking.get(ask.keyId) === undefined;
    if (mine) this.asking.set(ask.keyId, asked);
    try {
      return await this.ask(ask, this.wantCalls(ask.keyId), returned);
    } finally {
      if (mine && this.asking.get(ask.keyId) === asked) this.asking.delete(ask.keyId);
      answered();
    }
  }

  /**
   * Asks the coordinator for room for the call (and `wantCalls` - 1 more like it), handing
   * back what is left of the key's previous slice.
   */
  private async ask(ask: SharedAsk, wantCalls: number, returned?: Slice): Promise<SharedDecision> {
    const nowMs = this.options.clock();
    const request: ReserveRequest = {
      keyId: ask.keyId,
      upstream: ask.upstream,
      gateway: this.options.gateway,
      need: amountsOf(ask.need),
      floor: amountsOf(ask.floor),
      wantCalls,
      priority: ask.priority,
      sinceMs: ask.sinceMs,
      thresholdMs: Math.round(ask.thresholdMs),
      deadlineMs: ask.deadlineMs ?? 0,
      returnedLeaseId: returned?.leaseId ?? "",
      returnedLeft: returned === undefined ? undefined : amountsOf(returned.left),
      returnedLastSentAtMs: returned?.lastSentAtMs ?? 0,
    };
    let reservation: Reservation | undefined;
    let first: ReserveResponse;
    try {
      reservation = this.options.api.reserve(request);
      first = await withTimeout(reservation.first, FIRST_ANSWER_MS);
    } catch (error) {
      reservation?.cancel();
      this.down(nowMs, error);
      return { kind: "unavailable" };
    }
    this.reachable();
    const outcome = first.outcome;
    switch (outcome?.$case) {
      case "granted": {
        const granted = this.take(ask, outcome.value);
        return { kind: "continue", slice: granted, figures: NO_FIGURES };
      }
      case "unknown":
        // A key whose answers say nothing of its window (a provider that sends none) is not
        // asked about on every call; any other is asked again at once: its first reading is
        // on its way to the coordinator.
        if (ask.silent) {
          this.unknownUntil.set(ask.keyId, nowMs + outcome.value.validForMs);
          if (this.unknownUntil.size > 10_000) this.unknownUntil.clear();
          return { kind: "unavailable" };
        }
        return { kind: "unknown" };
      case "queued":
        return {
          kind: "queued",
          etaMs: outcome.value.etaMs,
          figures: figuresOf(outcome.value.figures),
          turn: reservation.turn.then((grant) => this.take(ask, grant)),
          cancel: () => reservation?.cancel(),
        };
      case "checkpoint":
        return {
          kind: "checkpoint",
          untilMs: outcome.value.untilMs,
          why: outcome.value.why === "deadline" ? "deadline" : "threshold",
          figures: figuresOf(outcome.value.figures),
        };
      case "tooLarge":
        return { kind: "too_large", figures: figuresOf(outcome.value.figures) };
      default:
        return { kind: "unavailable" };
    }
  }

  /**
   * The key's slice is running low while the window has plenty (it covered many calls):
   * its next one is asked for now, in the background, so the calls that come meanwhile
   * spend without waiting. Only an immediate grant is taken; were the window to have
   * become tight, each call asks for itself again (and queues by its own priority).
   */
  private renew(ask: SharedAsk): void {
    if (this.asking.has(ask.keyId)) return;
    const nowMs = this.options.clock();
    const renewal = this.renewal(ask, nowMs);
    this.asking.set(ask.keyId, renewal);
    void renewal.finally(() => {
      if (this.asking.get(ask.keyId) === renewal) this.asking.delete(ask.keyId);
    });
  }

  private async renewal(ask: SharedAsk, nowMs: number): Promise<void> {
    const request: ReserveRequest = {
      keyId: ask.keyId,
      upstream: ask.upstream,
      gateway: this.options.gateway,
      need: amountsOf(ask.need),
      floor: amountsOf(ask.floor),
      wantCalls: this.wantCalls(ask.keyId),
      priority: ask.priority,
      sinceMs: nowMs,
      thresholdMs: Math.round(ask.thresholdMs),
      deadlineMs: 0,
      returnedLeaseId: "",
      returnedLeft: undefined,
      returnedLastSentAtMs: 0,
    };
    let reservation: Reservation | undefined;
    try {
      reservation = this.options.api.reserve(request);
      const first = await withTimeout(reservation.first, FIRST_ANSWER_MS);
      this.reachable();
      const outcome = first.outcome;
      if (outcome?.$case === "granted") {
        // The renewal is room for calls to come: none spends it yet.
        const slice = this.take(ask, outcome.value);
        unspend(slice, ask.need);
        slice.lastSentAtMs = 0;
        if (!slice.current) this.retire(slice);
      } else if (outcome?.$case === "queued") reservation.cancel();
    } catch (error) {
      reservation?.cancel();
      this.down(nowMs, error);
    }
  }

  /** Calls like the one in hand a new slice should cover: what this gateway spends on the key in a slice's time. */
  private wantCalls(keyId: string): number {
    const demand = this.demandOf(keyId);
    const perSecond = Math.max(demand.lastSecond, demand.calls);
    return Math.min(
      MAX_CALLS_PER_SLICE,
      Math.max(CALLS_PER_SLICE, Math.ceil((perSecond * this.options.sliceMs) / 1_000)),
    );
  }

  private demandOf(keyId: string): Demand {
    const nowMs = this.options.clock();
    let demand = this.demand.get(keyId);
    if (demand === undefined) {
      demand = { sinceMs: nowMs, calls: 0, lastSecond: 0 };
      if (this.demand.size >= 10_000) this.demand.clear();
      this.demand.set(keyId, demand);
    }
    if (nowMs - demand.sinceMs >= 1_000) {
      demand.lastSecond = nowMs - demand.sinceMs >= 2_000 ? 0 : demand.calls;
      demand.calls = 0;
      demand.sinceMs = nowMs;
    }
    return demand;
  }

  /**
   * A call that spent `need` of `slice` is over: what the provider counted of it is
   * `charged` (nothing, when it was never sent or refused), and the rest goes back.
   */
  settle(slice: Slice, need: Need, charged: Need): void {
    for (const dimension of DIMENSION_KEYS) slice.left[dimension] += need[dimension] - charged[dimension];
    slice.inFlight -= 1;
    if (!slice.current && slice.inFlight <= 0) this.handBack(slice);
  }

  /** Hands every slice back (the gateway is closing). */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    const slices = [...this.current.values()];
    this.current.clear();
    await Promise.allSettled(slices.map((slice) => this.options.api.release(releaseOf(slice))));
  }

  /** A granted slice: the call in hand spends its part; covering more, it becomes the key's current one. */
  private take(ask: SharedAsk, grant: SliceGranted): Slice {
    const amounts = grant.amounts;
    const slice: Slice = {
      leaseId: grant.leaseId,
      keyId: ask.keyId,
      left: {
        requests: amounts?.requests ?? 0,
        tokens: amounts?.tokens ?? 0,
        inputTokens: amounts?.inputTokens ?? 0,
        outputTokens: amounts?.outputTokens ?? 0,
      },
      validUntilMs: this.options.clock() + grant.validForMs - EXPIRY_MARGIN_MS,
      inFlight: 0,
      current: grant.calls > 1,
      calls: grant.calls,
      lastSentAtMs: 0,
    };
    spend(slice, ask.need, this.options.clock());
    if (slice.current) {
      const previous = this.current.get(ask.keyId);
      if (previous !== undefined) this.retire(previous);
      this.current.set(ask.keyId, slice);
    }
    return slice;
  }

  /**
   * No other call spends it now, and what is left of it goes back with the ask at hand
   * (its calls in flight hand back the rest as they end).
   */
  private surrender(slice: Slice): Slice {
    if (this.current.get(slice.keyId) === slice) this.current.delete(slice.keyId);
    slice.current = false;
    return slice;
  }

  /** No other call spends it now; handed back once its calls are over. */
  private retire(slice: Slice): void {
    if (this.current.get(slice.keyId) === slice) this.current.delete(slice.keyId);
    slice.current = false;
    if (slice.inFlight <= 0) this.handBack(slice);
  }

  private handBack(slice: Slice): void {
    this.options.api.release(releaseOf(slice)).catch(() => {
      // Lost: the coordinator's account refills to what the provider has all the same.
    });
  }

  /** Slices that ended unspent go back. */
  private sweep(): void {
    const nowMs = this.options.clock();
    for (const slice of [...this.current.values()]) if (slice.validUntilMs <= nowMs) this.retire(slice);
  }

  private down(nowMs: number, error: unknown): void {
    this.downUntilMs = nowMs + RETRY_AFTER_DOWN_MS;
    if (this.up) {
      this.up = false;
      this.options.onAvailability(false, error);
    }
  }

  private reachable(): void {
    if (this.up) return;
    this.up = true;
    this.options.onAvailability(true);
  }
}

const DIMENSION_KEYS = ["requests", "tokens", "inputTokens", "outputTokens"] as const;

const NO_FIGURES: Figures = Object.freeze({
  dimension: undefined,
  limit: 0,
  remaining: 0,
  needed: 0,
  resetAtMs: 0,
});

function covers(slice: Slice, need: Need): boolean {
  return DIMENSION_KEYS.every((d) => need[d] <= 0 || slice.left[d] >= need[d]);
}

function spend(slice: Slice, need: Need, nowMs: number): void {
  for (const dimension of DIMENSION_KEYS) slice.left[dimension] -= need[dimension];
  slice.inFlight += 1;
  slice.lastSentAtMs = nowMs;
}

function unspend(slice: Slice, need: Need): void {
  for (const dimension of DIMENSION_KEYS) slice.left[dimension] += need[dimension];
  slice.inFlight -= 1;
}

/** Few calls like this one are left in the slice, or little of its time. */
function runningLow(slice: Slice, need: Need, nowMs: number, sliceMs: number): boolean {
  if (slice.validUntilMs - nowMs < sliceMs * RENEW_AT) return true;
  return DIMENSION_KEYS.some(
    (d) => need[d] > 0 && slice.left[d] < need[d] * Math.max(1, slice.calls * RENEW_AT),
  );
}

/** Calls a key's gateway made in the last whole second and so far in this one. */
interface Demand {
  sinceMs: number;
  calls: number;
  lastSecond: number;
}

function releaseOf(slice: Slice): ReleaseSliceRequest {
  return { leaseId: slice.leaseId, left: amountsOf(slice.left), lastSentAtMs: slice.lastSentAtMs };
}

function amountsOf(need: Need): WindowAmounts {
  return {
    requests: Math.round(need.requests),
    tokens: Math.round(need.tokens),
    inputTokens: Math.round(need.inputTokens),
    outputTokens: Math.round(need.outputTokens),
  };
}

const DIMENSIONS_BY_NAME = {
  requests: "requests",
  tokens: "tokens",
  input_tokens: "inputTokens",
  output_tokens: "outputTokens",
} as const;

function figuresOf(figures: WindowFigures | undefined): Figures {
  if (figures === undefined) return NO_FIGURES;
  return {
    dimension: DIMENSIONS_BY_NAME[figures.dimension as keyof typeof DIMENSIONS_BY_NAME],
    limit: figures.limit,
    remaining: figures.remaining,
    needed: figures.needed,
    resetAtMs: figures.resetAtMs,
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
