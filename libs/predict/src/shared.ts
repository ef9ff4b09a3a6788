import type { Figures } from "./decide.js";
import type { Dimension, RateLimitReading, WindowReading } from "./headers.js";
import { DIMENSIONS, type Need } from "./keys.js";
import { byOriginLookup, SECOND_RESOLUTION_MS, ShapeTracker, type WindowShape } from "./shape.js";

/**
 * One provider key's window shared by every gateway of a deployment: the coordinator's own
 * account of it (a token bucket per dimension the provider reports, refilling at the rate
 * the readings show), the slices it granted gateways, and the calls queued for room.
 *
 * The account follows the coordinator's grants, not the provider's readings: a grant takes
 * what it covers out of the bucket at once, and a gateway gives back what its calls did not
 * use (their reservation less what the provider counted) when it next asks, or releases
 * the slice. Readings only ever lower the account: a reading says what the provider had
 * left when it admitted a call, so what the account may hold now is that, refilled since,
 * less what was granted after that call and not given back; anything else spending the key
 * (a client that bypasses Holdfast) shows up there. So, granted calls never add up to more
 * than the provider will admit, as long as each reservation covers what the provider counts
 * (input plus the output cap, or the estimate plus its margin).
 *
 * Calls that do not fit wait in one queue per key, strictly in order: highest priority
 * first, a waiter's priority growing by one for every `agingMs` it has waited (nobody
 * starves), the longest waiting first among equals. A call whose turn would come later
 * than its threshold (or its run's deadline) is told to checkpoint instead of queueing.
 *
 * Pure: every method takes the time, and nothing here does I/O.
 */
export class SharedWindows {
  private readonly keys = new Map<string, SharedKey>();
  private readonly leases = new Map<string, Lease>();
  private readonly waiting = new Map<string, Waiter>();

  constructor(private readonly options: SharedWindowOptions) {}

  /**
   * Takes in a reading of a key, from the answer to a call sent at `asOfMs`, read at
   * `readAtMs` (by a gateway), at `nowMs` (here).
   */
  observe(
    keyId: string,
    upstream: string,
    reading: RateLimitReading,
    at: { asOfMs: number; readAtMs: number; nowMs: number },
    /** The shapes the gateway that read it had learnt (see KeyWindow.learn). */
    told: Partial<Record<Dimension, WindowShape>> = {},
  ): void {
    const { asOfMs, readAtMs, nowMs } = at;
    const key = this.keyOf(keyId, upstream, nowMs);
    if (reading.retryAfterMs !== undefined && reading.retryAfterMs > 0) {
      key.cooldownUntilMs = Math.max(key.cooldownUntilMs, readAtMs + reading.retryAfterMs);
    }
    if (asOfMs < key.asOfMs) return;
    key.asOfMs = asOfMs;
    // A refusal took nothing: its resets are of the calls before it.
    const refused = reading.retryAfterMs !== undefined;
    for (const dimension of DIMENSIONS) {
      const read = reading[dimension];
      if (read === undefined) continue;
      const limit = read.limit ?? Math.max(read.remaining, key.buckets.get(dimension)?.limit ?? 0);
      if (limit <= 0) continue;
      let bucket = key.buckets.get(dimension);
      // The key's own readings replace what an operator declared of it, rate and all.
      if (bucket?.declared === true) {
        key.buckets.delete(dimension);
        bucket = undefined;
      }
      const tracker = bucket?.tracker ?? new ShapeTracker();
      // A recorded reset is to the millisecond; one that is not a whole second was written finer.
      tracker.observe(
        read,
        readAtMs,
        read.resetAtMs !== undefined && read.resetAtMs % 1_000 !== 0 ? 1 : SECOND_RESOLUTION_MS,
        refused ? undefined : asOfMs,
      );
      const { periodMs } = tracker.view();
      // The gateways' word first: each judged the shape from every reading of its own, where
      // this sees only those recorded, from several gateways at once.
      const shape = key.declared ?? told[dimension] ?? bucket?.told ?? tracker.shape;
      // The rate is the highest of the lower bounds readings gave for this limit (each is
      // one), or a minute's refill before any did.
      const measured = refillRate(read.remaining, limit, read.resetAtMs, readAtMs);
      const known =
        bucket !== undefined && bucket.limit === limit && bucket.measured ? bucket.perMs : undefined;
      const perMs =
        measured === undefined
          ? (known ?? bucket?.perMs ?? limit / MINUTE_MS)
          : Math.max(measured, known ?? 0);
      const isMeasured = measured !== undefined || known !== undefined;
      // Before a rate is measured, turns are foretold from what the reading suggests (a
      // fresh key's first answers miss a unit or two: no bound, but the likely rate), so a
      // fleet starting at once queues for the window rather than checkpointing on a
      // minute's refill; grants still follow the bound.
      const etaPerMs = isMeasured
        ? perMs
        : (guessedRate(read.remaining, limit, read.resetAtMs, readAtMs) ?? bucket?.etaPerMs ?? perMs);
      // What the provider had left then, refilled to now (a window that does not refill as
      // it goes: whole at its reset, and as read before), less what was granted since and
      // not given back.
      const provider =
        shape !== "continuous" && read.resetAtMs !== undefined
          ? nowMs >= read.resetAtMs
            ? limit
            : read.remaining
          : Math.min(limit, read.remaining + perMs * Math.max(0, nowMs - readAtMs));
      const outstanding = this.outstandingSince(keyId, dimension, asOfMs);
      const implied = provider - outstanding;
      if (bucket === undefined) {
        bucket = {
          dimension,
          limit,
          perMs,
          etaPerMs,
          measured: isMeasured,
          level: implied,
          atMs: nowMs,
          resetAtMs: read.resetAtMs ?? 0,
          tracker,
          shape,
          periodMs,
          spentSinceReading: outstanding,
          resetSpanMs: read.resetAtMs === undefined ? MINUTE_MS : Math.max(0, read.resetAtMs - readAtMs),
          told: told[dimension],
          ledger: undefined,
          admitLagMs: 0,
          declared: false,
          logLagMs: 0,
          logSinceSent: [],
        };
        key.buckets.set(dimension, bucket);
        this.followLog(keyId, bucket, read, refused, asOfMs, nowMs);
        continue;
      }
      const level = levelAt(bucket, nowMs);
      bucket.limit = limit;
      bucket.perMs = perMs;
      bucket.etaPerMs = etaPerMs;
      bucket.measured = isMeasured;
      // A reading only ever lowers the account (what it refilled, or a slice granted before
      // the reading's call and spent after it, may be more than the provider has). But a
      // window not refilled here whose reading's reset had passed when it was taken in has
      // come back, as the reading says: else the account would stay down with nothing
      // granted to read it again.
      const cameBack = shape !== "continuous" && read.resetAtMs !== undefined && read.resetAtMs <= nowMs;
      bucket.level = cameBack ? implied : Math.min(level, implied);
      bucket.atMs = nowMs;
      bucket.resetAtMs = read.resetAtMs ?? bucket.resetAtMs;
      bucket.shape = shape;
      bucket.periodMs = periodMs;
      bucket.spentSinceReading = outstanding;
      if (read.resetAtMs !== undefined) bucket.resetSpanMs = Math.max(0, read.resetAtMs - readAtMs);
      bucket.told = told[dimension] ?? bucket.told;
      this.followLog(keyId, bucket, read, refused, asOfMs, nowMs);
    }
  }

  /**
   * A window read as a sliding log gives back what each call spent a window after the call:
   * its account is then the log of what was granted (each slice counted for a window from
   * when its calls reached the provider), and a reading that shows more spent than the log
   * holds adds what else spent the key, for a window from the reading's call. Any other
   * shape, or a log longer than slices are remembered, is left to `levelAt`.
   */
  private followLog(
    keyId: string,
    bucket: Bucket,
    read: WindowReading,
    refused: boolean,
    asOfMs: number,
    nowMs: number,
  ): void {
    if (bucket.declared) return;
    if (bucket.shape !== "sliding") {
      bucket.ledger = undefined;
      bucket.logSinceSent.length = 0;
      return;
    }
    // A log's reset is a window after the call it took last, which it took at or after the
    // reading's own call was sent: how far the reset is from that send is never short of
    // the window. Not so a refusal's (it took nothing, and its reset is of calls before it),
    // nor one of a dimension the log holds nothing of.
    if (
      !refused &&
      read.resetAtMs !== undefined &&
      read.resetAtMs > asOfMs &&
      read.remaining < bucket.limit
    ) {
      bucket.logSinceSent.push({
        ms: read.resetAtMs - asOfMs,
        resolutionMs: read.resetAtMs % 1_000 === 0 ? SECOND_RESOLUTION_MS : 1,
      });
      if (bucket.logSinceSent.length > LOG_READINGS_KEPT) bucket.logSinceSent.shift();
    }
    if (bucket.logSinceSent.length === 0) {
      bucket.ledger = undefined;
      return;
    }
    // The window: the median of the latest readings' figure, and the resets' precision. A
    // log's figure is the window and how long a call took to reach it, so the median is a
    // little over the window; a reading that came out short (a refusal said with no
    // retry-after) cannot shorten it, as the least of them would. How late calls reach it,
    // beyond that, is the spread above it: a call counts until the slowest could have.
    const sinceSent = bucket.logSinceSent.map((r) => r.ms).sort((a, b) => a - b);
    const medianMs = sinceSent[Math.floor((sinceSent.length - 1) / 2)]!;
    const windowMs = medianMs + Math.max(...bucket.logSinceSent.map((r) => r.resolutionMs));
    if (windowMs > SLICE_MEMORY_MS) {
      bucket.ledger = undefined;
      return;
    }
    const capMs = Math.ceil(windowMs * MAX_LOG_LAG_SHARE);
    const stepMs = Math.max(LOG_LAG_MS, Math.ceil(windowMs * LOG_LAG_SHARE));
    const lateMs = sinceSent[sinceSent.length - 1]! - medianMs;
    // A refusal while the log was kept says calls reach it later still (a busy gateway, a
    // slow network): allow more. Never more than a tenth of the window in all.
    if (refused && bucket.ledger !== undefined) bucket.logLagMs = Math.min(capMs, bucket.logLagMs + stepMs);
    const sentLagMs = Math.min(capMs, Math.max(stepMs, lateMs + SETTLE_MS) + bucket.logLagMs);
    let ledger = bucket.ledger;
    if (ledger === undefined) {
      const leases = [...this.leases.values()].filter((lease) => lease.keyId === keyId);
      ledger = { windowMs, sentLagMs, leases };
      bucket.ledger = ledger;
    }
    ledger.windowMs = windowMs;
    ledger.sentLagMs = sentLagMs;
    ledger.leases = ledger.leases.filter((lease) => countsUntil(lease, ledger) > nowMs);
    // What the provider counted when it took the reading's call, beyond what the log holds
    // then (a client that bypasses Holdfast, slices an earlier coordinator granted).
    let held = 0;
    for (const lease of ledger.leases) {
      if (lease.atMs <= asOfMs && countsUntil(lease, ledger) > asOfMs) {
        held += lease.amounts[bucket.dimension] - lease.returned[bucket.dimension];
      }
    }
    const other = bucket.limit - read.remaining - held;
    if (other >= 1 && asOfMs + windowMs > nowMs) {
      const amounts = { requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 };
      amounts[bucket.dimension] = other;
      ledger.leases.push({
        leaseId: "",
        keyId,
        gateway: "",
        // Counted until a window after the reading's call: the provider had counted it by then.
        atMs: asOfMs,
        expiresMs: asOfMs,
        handedBackMs: asOfMs,
        lastSentMs: asOfMs,
        read: true,
        amounts,
        returned: { requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 },
      });
    }
  }

  /**
   * A gateway asks for room for one call (and, when the window has plenty, a slice for more
   * like it), handing back what is left of its previous slice of the key. Granted at once,
   * queued (the coordinator grants it by `tick` when its turn comes), told to checkpoint, or
   * told the call is larger than the whole window.
   */
  reserve(request: ReserveRequest, nowMs: number): ReserveOutcome {
    if (request.returned !== undefined) {
      const { leaseId, left, lastSentAtMs } = request.returned;
      this.release(leaseId, left, nowMs, lastSentAtMs);
    }
    const key =
      this.keys.get(request.keyId) ??
      (request.upstream !== undefined &&
      this.keys.size < MAX_DECLARED_KEYS &&
      this.options.declaredLimits?.(request.upstream) !== undefined
        ? this.keyOf(request.keyId, request.upstream, nowMs)
        : undefined);
    if (key === undefined || key.buckets.size === 0) return { kind: "unknown", validForMs: UNKNOWN_MS };
    this.expire(nowMs);
    for (const [dimension, bucket] of key.buckets) {
      const floor = request.floor[dimension];
      if (floor > bucket.limit)
        return { kind: "too_large", figures: figuresOf(dimension, bucket, floor, 0, nowMs) };
    }
    const waiter: Waiter = {
      ticket: request.ticket,
      keyId: request.keyId,
      gateway: request.gateway,
      need: cutToWindow(key, request.need, request.floor),
      priority: request.priority,
      sinceMs: Math.min(request.sinceMs, nowMs),
    };
    const ahead = this.queueOf(key, nowMs).filter((other) =>
      ranksBefore(other, waiter, nowMs, this.options.agingMs),
    );
    if (ahead.length === 0 && key.cooldownUntilMs <= nowMs && fits(key, waiter.need, nowMs)) {
      const extra = key.queue.length === 0 ? this.extraCalls(key, waiter.need, request.wantCalls, nowMs) : 0;
      return { kind: "granted", lease: this.grant(key, waiter, 1 + extra, nowMs) };
    }
    const eta = this.etaOf(key, [...ahead.map((a) => a.need), waiter.need], nowMs);
    if (request.deadlineMs !== undefined && eta.atMs > request.deadlineMs) {
      return { kind: "checkpoint", untilMs: eta.atMs, why: "deadline", figures: eta.figures };
    }
    if (eta.atMs - nowMs > request.thresholdMs) {
      return { kind: "checkpoint", untilMs: eta.atMs, why: "threshold", figures: eta.figures };
    }
    key.queue.push(waiter);
    this.waiting.set(waiter.ticket, waiter);
    return { kind: "queued", etaMs: eta.atMs, figures: eta.figures };
  }

  /** A queued call no longer waits (its client left, its gateway gave up on it or went away). */
  cancel(ticket: string): void {
    const waiter = this.waiting.get(ticket);
    if (waiter === undefined) return;
    this.waiting.delete(ticket);
    const key = this.keys.get(waiter.keyId);
    if (key !== undefined) key.queue = key.queue.filter((w) => w !== waiter);
  }

  /**
   * A gateway says what is left of a slice (its unspent part, and what its finished calls'
   * reservations held beyond what the provider counted; negative when they cost more): in
   * all, so far. The account moves by the difference from what it said last, so saying the
   * same twice (a retried request) changes nothing, and a slice can never give back more
   * than it was granted.
   */
  release(leaseId: string, left: Need, nowMs: number, lastSentAtMs?: number): void {
    const lease = this.leases.get(leaseId);
    if (lease === undefined) return;
    // A gateway hands a slice back once no call spends it any more, and says when it sent
    // the last (as its clock has it; never before the grant).
    lease.handedBackMs ??= nowMs;
    const key = this.keys.get(lease.keyId);
    if (key === undefined) return;
    if (lastSentAtMs !== undefined && lastSentAtMs > 0) {
      // A call waiting to be sent again after a 429 is said as sent when it will be: as
      // late as a slice is remembered from now, no later.
      const said = Math.min(Math.max(lastSentAtMs, lease.atMs), nowMs + SLICE_MEMORY_MS);
      lease.lastSentMs = Math.max(lease.lastSentMs ?? 0, said);
      // A log that let go of the slice before this word (a retry's send said only now)
      // holds it again until a window after it.
      for (const bucket of key.buckets.values()) {
        const ledger = bucket.ledger;
        if (ledger?.sentLagMs === undefined || ledger.leases.includes(lease)) continue;
        if (countsUntil(lease, ledger) > nowMs) ledger.leases.push(lease);
      }
    }
    for (const dimension of DIMENSIONS) {
      const bucket = key.buckets.get(dimension);
      if (bucket === undefined || lease.amounts[dimension] === 0) continue;
      const total = Math.min(left[dimension], lease.amounts[dimension]);
      const delta = total - lease.returned[dimension];
      if (delta === 0) continue;
      bucket.level = Math.min(bucket.limit, levelAt(bucket, nowMs) + delta);
      bucket.atMs = Math.max(bucket.atMs, nowMs);
      if (lease.atMs > key.asOfMs) bucket.spentSinceReading -= delta;
      lease.returned[dimension] = total;
    }
  }

  /** Grants the queued calls whose turn has come; says when to look again (undefined: nobody waits). */
  tick(nowMs: number): { granted: Array<{ ticket: string; lease: Grant }>; nextMs: number | undefined } {
    const granted: Array<{ ticket: string; lease: Grant }> = [];
    let nextMs: number | undefined;
    for (const key of this.keys.values()) {
      if (key.queue.length === 0) continue;
      const queue = this.queueOf(key, nowMs);
      while (queue.length > 0) {
        const head = queue[0]!;
        if (key.cooldownUntilMs > nowMs || !fits(key, head.need, nowMs)) break;
        queue.shift();
        this.waiting.delete(head.ticket);
        granted.push({ ticket: head.ticket, lease: this.grant(key, head, 1, nowMs) });
      }
      key.queue = queue;
      const head = queue[0];
      if (head !== undefined) {
        const at = this.etaOf(key, [head.need], nowMs).atMs;
        nextMs = nextMs === undefined ? at : Math.min(nextMs, at);
      }
    }
    return { granted, nextMs };
  }

  /** A slice as it is kept across a restart of the coordinator. */
  record(leaseId: string): SliceRecord | undefined {
    const lease = this.leases.get(leaseId);
    if (lease === undefined) return undefined;
    const key = this.keys.get(lease.keyId);
    return {
      leaseId: lease.leaseId,
      keyId: lease.keyId,
      upstream: key?.upstream ?? "",
      gateway: lease.gateway,
      atMs: lease.atMs,
      expiresMs: lease.expiresMs,
      amounts: lease.amounts,
    };
  }

  /**
   * Takes back a slice an earlier coordinator granted (before any reading is taken in):
   * until its gateway says what is left of it, all of it counts as spent after its grant.
   */
  restore(record: SliceRecord, nowMs: number): void {
    if (record.expiresMs + FORGET_MS < nowMs) return;
    const key = this.keyOf(record.keyId, record.upstream, nowMs);
    const lease: Lease = {
      leaseId: record.leaseId,
      keyId: record.keyId,
      gateway: record.gateway,
      atMs: record.atMs,
      expiresMs: record.expiresMs,
      handedBackMs: undefined,
      lastSentMs: undefined,
      amounts: record.amounts,
      returned: { requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 },
    };
    this.leases.set(record.leaseId, lease);
    for (const [dimension, bucket] of key.buckets) {
      // A declared account no reading will correct holds what its predecessor granted.
      if (bucket.ledger !== undefined) bucket.ledger.leases.push(lease);
      else if (bucket.declared) bucket.level = levelAt(bucket, nowMs) - lease.amounts[dimension];
    }
  }

  /** Each key's account now, for `holdfast windows` and reports. */
  list(nowMs: number): KeyReport[] {
    return [...this.keys.entries()].map(([keyId, key]) => ({
      keyId,
      upstream: key.upstream,
      cooldownUntilMs: key.cooldownUntilMs > nowMs ? key.cooldownUntilMs : 0,
      queued: key.queue.length,
      dimensions: [...key.buckets.entries()].map(([dimension, bucket]) => ({
        dimension,
        limit: bucket.limit,
        left: Math.floor(levelAt(bucket, nowMs)),
        perMinute: Math.round(bucket.perMs * MINUTE_MS),
      })),
      slices: [...this.leases.values()].filter((l) => l.keyId === keyId && l.expiresMs > nowMs).length,
    }));
  }

  /** Forgets slices past their end and long after it (their calls are in the readings by then). */
  expire(nowMs: number): void {
    for (const [leaseId, lease] of this.leases) {
      if (lease.expiresMs + FORGET_MS < nowMs) this.leases.delete(leaseId);
    }
  }

  private keyOf(keyId: string, upstream: string, nowMs: number): SharedKey {
    let key = this.keys.get(keyId);
    if (key === undefined) {
      const declared = this.options.knownShape?.(upstream);
      key = {
        upstream,
        declared,
        buckets: declaredBuckets(this.options.declaredLimits?.(upstream), declared, nowMs),
        asOfMs: Number.NEGATIVE_INFINITY,
        cooldownUntilMs: 0,
        queue: [],
      };
      this.keys.set(keyId, key);
    }
    return key;
  }

  private grant(key: SharedKey, waiter: Waiter, calls: number, nowMs: number): Grant {
    const amounts = scale(waiter.need, calls);
    for (const [dimension, bucket] of key.buckets) {
      const level = levelAt(bucket, nowMs);
      bucket.level = level - amounts[dimension];
      // A window no reading corrects, full or nearly: the provider's stays full until the
      // calls reach it, and refills only from then.
      bucket.atMs = Math.max(
        bucket.atMs,
        bucket.admitLagMs > 0 && level + bucket.perMs * bucket.admitLagMs >= bucket.limit
          ? nowMs + bucket.admitLagMs
          : nowMs,
      );
      bucket.spentSinceReading += amounts[dimension];
    }
    const lease: Lease = {
      leaseId: waiter.ticket,
      keyId: waiter.keyId,
      gateway: waiter.gateway,
      atMs: nowMs,
      expiresMs: nowMs + this.options.sliceMs,
      handedBackMs: undefined,
      lastSentMs: undefined,
      amounts,
      returned: { requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 },
    };
    this.leases.set(lease.leaseId, lease);
    for (const bucket of key.buckets.values()) {
      if (bucket.ledger === undefined) continue;
      bucket.ledger.leases = bucket.ledger.leases.filter((l) => countsUntil(l, bucket.ledger!) > nowMs);
      bucket.ledger.leases.push(lease);
    }
    return { leaseId: lease.leaseId, amounts, calls, validForMs: this.options.sliceMs };
  }

  /** How many more calls like this one a slice may cover: a share of what is left beyond it. */
  private extraCalls(key: SharedKey, need: Need, wantCalls: number, nowMs: number): number {
    let extra = Math.max(0, Math.floor(wantCalls) - 1);
    for (const [dimension, bucket] of key.buckets) {
      if (need[dimension] <= 0) continue;
      const spare = (levelAt(bucket, nowMs) - need[dimension]) * SHARE;
      extra = Math.min(extra, Math.max(0, Math.floor(spare / need[dimension])));
    }
    return extra;
  }

  /** What was granted on a key after `asOfMs` in one dimension and not given back. */
  private outstandingSince(keyId: string, dimension: Dimension, asOfMs: number): number {
    let sum = 0;
    for (const lease of this.leases.values()) {
      if (lease.keyId !== keyId || lease.atMs <= asOfMs) continue;
      sum += lease.amounts[dimension] - lease.returned[dimension];
    }
    return sum;
  }

  /** The queue in the order it is served now. */
  private queueOf(key: SharedKey, nowMs: number): Waiter[] {
    return [...key.queue].sort((a, b) => order(a, b, nowMs, this.options.agingMs));
  }

  /** When the account holds all of `needs` at once (calls served in turn), and the figures of the dimension that decides it. */
  private etaOf(key: SharedKey, needs: readonly Need[], nowMs: number): { atMs: number; figures: Figures } {
    let atMs = Math.max(nowMs, key.cooldownUntilMs);
    let figures: Figures | undefined;
    const own = needs[needs.length - 1]!;
    for (const [dimension, bucket] of key.buckets) {
      const total = needs.reduce((sum, n) => sum + n[dimension], 0);
      if (own[dimension] <= 0) continue;
      const level = levelAt(bucket, nowMs);
      // Calls ahead take their part as it refills: the account never fills to its cap meanwhile.
      const at =
        level >= total
          ? nowMs
          : bucket.ledger !== undefined
            ? ledgerFreesAt(bucket.ledger, bucket.dimension, bucket.limit, total - level, nowMs) + SETTLE_MS
            : !refillsAsItGoes(bucket)
              ? wholeAgainAt(bucket, total - level, nowMs) + SETTLE_MS
              : nowMs + (total - level) / bucket.etaPerMs + SETTLE_MS;
      if (figures === undefined || at > atMs || (at === atMs && figures.dimension === undefined)) {
        figures = figuresOf(dimension, bucket, own[dimension], total - own[dimension], nowMs);
      }
      atMs = Math.max(atMs, at);
    }
    return { atMs: Math.ceil(atMs), figures: figures ?? NO_FIGURES };
  }
}

export interface SharedWindowOptions {
  /** How long a slice may be spent. */
  readonly sliceMs: number;
  /** A waiter's priority grows by one for each this long it has waited. */
  readonly agingMs: number;
  /**
   * The shape an operator said an upstream's windows have (`predict.window_shapes`), taken
   * over what readings show; undefined: learnt from the readings.
   */
  readonly knownShape?: (upstream: string) => WindowShape | undefined;
  /**
   * The limits an operator said an upstream enforces (`predict.limits`), for keys whose
   * answers say nothing of their window: the account of such a key starts whole from its
   * first ask, until a reading of the key is taken in.
   */
  readonly declaredLimits?: (upstream: string) => DeclaredLimits | undefined;
}

/** What an operator said an upstream admits per key, per window of `windowMs`. */
export interface DeclaredLimits {
  readonly windowMs: number;
  readonly amounts: Partial<Record<Dimension, number>>;
}

/** `predict.limits` (by origin) as the lookup the account takes. */
export function declaredLimits(
  byOrigin: Readonly<
    Record<
      string,
      {
        readonly window_s: number;
        readonly requests?: number | undefined;
        readonly tokens?: number | undefined;
        readonly input_tokens?: number | undefined;
        readonly output_tokens?: number | undefined;
      }
    >
  >,
): (upstream: string) => DeclaredLimits | undefined {
  return byOriginLookup(byOrigin, (limits) => ({
    windowMs: limits.window_s * 1_000,
    amounts: {
      ...(limits.requests === undefined ? {} : { requests: limits.requests }),
      ...(limits.tokens === undefined ? {} : { tokens: limits.tokens }),
      ...(limits.input_tokens === undefined ? {} : { inputTokens: limits.input_tokens }),
      ...(limits.output_tokens === undefined ? {} : { outputTokens: limits.output_tokens }),
    },
  }));
}

export interface ReserveRequest {
  /** Names the grant (its lease id) or the place in the queue. Unique per request. */
  readonly ticket: string;
  readonly keyId: string;
  /** The key's upstream origin: a key with limits declared for it is known from its first ask. */
  readonly upstream?: string;
  readonly gateway: string;
  /** What the call reserves: its estimate plus margin. */
  readonly need: Need;
  /** What it takes for certain: a call whose floor is more than the window is too large. */
  readonly floor: Need;
  /** How many calls like this one the gateway would like its slice to cover (1: just this one). */
  readonly wantCalls: number;
  readonly priority: number;
  /** Since when the call has waited for room (its first ask), for fairness. */
  readonly sinceMs: number;
  /** A turn further off than this is a checkpoint, not a wait. */
  readonly thresholdMs: number;
  readonly deadlineMs?: number;
  /** The gateway's previous slice of the key, done with, and what is left of it in all (see `release`). */
  readonly returned?: { readonly leaseId: string; readonly left: Need; readonly lastSentAtMs?: number };
}

/** Room granted: `amounts` (the call's need times `calls`) may be spent until `validForMs` from now. */
export interface Grant {
  readonly leaseId: string;
  readonly amounts: Need;
  readonly calls: number;
  readonly validForMs: number;
}

export type ReserveOutcome =
  | { readonly kind: "granted"; readonly lease: Grant }
  /** Nothing is known of the key yet: the call goes on, and the gateway asks again after `validForMs`. */
  | { readonly kind: "unknown"; readonly validForMs: number }
  | { readonly kind: "queued"; readonly etaMs: number; readonly figures: Figures }
  | {
      readonly kind: "checkpoint";
      readonly untilMs: number;
      readonly why: "threshold" | "deadline";
      readonly figures: Figures;
    }
  | { readonly kind: "too_large"; readonly figures: Figures };

/** A granted slice, as the coordinator keeps it for a restart. */
export interface SliceRecord {
  readonly leaseId: string;
  readonly keyId: string;
  readonly upstream: string;
  readonly gateway: string;
  readonly atMs: number;
  readonly expiresMs: number;
  readonly amounts: Need;
}

export interface KeyReport {
  readonly keyId: string;
  readonly upstream: string;
  readonly cooldownUntilMs: number;
  readonly queued: number;
  readonly slices: number;
  readonly dimensions: ReadonlyArray<{
    readonly dimension: Dimension;
    readonly limit: number;
    readonly left: number;
    readonly perMinute: number;
  }>;
}

interface Bucket {
  readonly dimension: Dimension;
  limit: number;
  /** Refill per millisecond. */
  perMs: number;
  /** The refill rate turns are foretold by: `perMs` once measured, a likelier guess before. */
  etaPerMs: number;
  /** Read off the provider's readings (not a minute's refill assumed). */
  measured: boolean;
  /** What the account held at `atMs` (may be below 0: calls cost more than they reserved). */
  level: number;
  atMs: number;
  resetAtMs: number;
  /** Learns how the window refills from the readings. */
  readonly tracker: ShapeTracker;
  /** Only a `continuous` window refills as it goes; any other is whole at its reset, and not before. */
  shape: WindowShape;
  /** How long one window lasts, when seen (a window that comes back whole). */
  periodMs: number | undefined;
  /**
   * What was granted since the call the last reading answered, less what came back of it:
   * by the reading's reset any window is whole but for this (a fixed one is whole: it was
   * spent in the window before, but that is only known once it was read as fixed).
   */
  spentSinceReading: number;
  /** How far the last reading's reset was from when it was read. */
  resetSpanMs: number;
  /** The shape the gateways that read it last said they had learnt. */
  told: WindowShape | undefined;
  /** Declared and not yet read, of a shape not known to refill evenly: what it granted, counted as a sliding log. */
  ledger: Ledger | undefined;
  /**
   * Declared, refilled evenly and not yet read: how long after a grant its calls are taken
   * to reach the provider, when it finds the window full (0 once read: readings say it).
   */
  admitLagMs: number;
  /** Made from what an operator declared (`predict.limits`), nothing read of it yet. */
  declared: boolean;
  /** How much later than measured calls were found to reach the provider (see followLog). */
  logLagMs: number;
  /**
   * While read as a sliding log: the latest readings' resets less their calls' sends (and
   * the resets' precision), what the log's window and how late calls reach it are read from.
   */
  readonly logSinceSent: { ms: number; resolutionMs: number }[];
}

/**
 * What a slice covers, counted against a window from its grant until a window after its
 * calls reached the provider, less what its gateway gave back:
 * - a declared window the account cannot read: until a window after the slice's end (the
 *   latest its calls can have been admitted). No provider's window, fixed, sliding or a
 *   bucket of that size, admits less than that.
 * - a window read as a sliding log: until a window and `sentLagMs` (how much later than its
 *   gateway's clock says a call can reach the provider) after its last call was sent, as
 *   its gateway said when it handed the slice back; before that, or when it did not say,
 *   from when it handed it back, or the slice's end.
 */
interface Ledger {
  windowMs: number;
  sentLagMs: number | undefined;
  leases: Lease[];
}

interface SharedKey {
  readonly upstream: string;
  /** The shape an operator said the upstream's windows have, if any. */
  readonly declared: WindowShape | undefined;
  readonly buckets: Map<Dimension, Bucket>;
  /** The send time of the call whose answer gave the newest reading taken in. */
  asOfMs: number;
  cooldownUntilMs: number;
  queue: Waiter[];
}

interface Waiter {
  readonly ticket: string;
  readonly keyId: string;
  readonly gateway: string;
  readonly need: Need;
  readonly priority: number;
  readonly sinceMs: number;
}

interface Lease {
  readonly leaseId: string;
  readonly keyId: string;
  readonly gateway: string;
  readonly atMs: number;
  readonly expiresMs: number;
  /**
   * When its gateway first said what was left of it: no call spent it after that (a call
   * sent again after a 429 is said in `lastSentMs`).
   */
  handedBackMs: number | undefined;
  /** When its gateway said it sent its last call, if it said. */
  lastSentMs: number | undefined;
  /** Not granted: what a reading showed spent by the time of its call (see followLog). */
  readonly read?: boolean;
  readonly amounts: Need;
  /** What the gateway last said is left of it, in all. */
  readonly returned: Record<Dimension, number>;
}

const MINUTE_MS = 60_000;
// A slice covers at most this share of what the window has beyond the call in hand.
const SHARE = 0.25;
// Asked again after this long when nothing is known of a key.
const UNKNOWN_MS = 1_000;
// A slice is remembered this long past its end (readings of its calls are in by then).
export const SLICE_MEMORY_MS = 120_000;
const FORGET_MS = SLICE_MEMORY_MS;
// A turn is granted a little after the account says, so a refill rate read a hair high never lands a call early.
const SETTLE_MS = 5;
// Keys a declaration makes before anything is read of them (a client's made-up credentials
// each name one): past this many keys, a new one is left to its gateway, as if undeclared.
const MAX_DECLARED_KEYS = 100_000;
// A declared window refilled evenly and found full is taken to refill from this share of
// the window after a grant (see Bucket.admitLagMs): no reading says when its calls landed.
const ADMIT_LAG_SHARE = 0.05;
// A call on a window read as a sliding log is taken to reach the provider within this long
// of when its gateway says it sent it (or this share of the window, if longer), at least:
// besides the network, a gateway's clock and the budget service's may differ by this much.
const LOG_LAG_MS = 25;
const LOG_LAG_SHARE = 0.01;
const MAX_LOG_LAG_SHARE = 0.1;
// A sliding log's window, and how late calls reach its provider, are judged from this many
// latest readings.
const LOG_READINGS_KEPT = 32;
// A reading's refill rate is trusted when at least this share of the window was missing.
const RATE_FROM_SHARE = 0.02;

const NO_FIGURES: Figures = Object.freeze({
  dimension: undefined,
  limit: 0,
  remaining: 0,
  needed: 0,
  resetAtMs: 0,
});

function levelAt(bucket: Bucket, nowMs: number): number {
  if (bucket.ledger !== undefined) return bucket.limit - ledgerHolds(bucket.ledger, bucket.dimension, nowMs);
  if (nowMs <= bucket.atMs) return bucket.level;
  if (!refillsAsItGoes(bucket)) {
    // As it was until the reset that falls after the account was last set; then whole
    // (fixed), or whole but for what was granted since the reading (any other: so a key
    // whose account fell below what the reading implied, with nothing in flight to read it
    // again, is not shut for good).
    if (bucket.shape === "fixed") {
      // A fixed window of a known period is whole again at every reset after the one read.
      const resetMs = lastResetBy(bucket, nowMs);
      return resetMs > bucket.atMs && nowMs >= resetMs ? bucket.limit : bucket.level;
    }
    if (nowMs < bucket.resetAtMs) return bucket.level;
    if (bucket.resetAtMs > bucket.atMs) return bucket.limit - bucket.spentSinceReading;
    // Set after the reset (granted since): only a reading can say when that comes back, and
    // none may come, as gateways record only some and every call may be waiting here. It
    // refills as a window with no reset said is taken to (whole in a minute), or the key
    // would stay shut for good.
    return Math.min(bucket.limit, bucket.level + (bucket.limit / MINUTE_MS) * (nowMs - bucket.atMs));
  }
  return Math.min(bucket.limit, bucket.level + bucket.perMs * (nowMs - bucket.atMs));
}

/** Until when a slice counts against a window kept as a ledger. */
function countsUntil(lease: Lease, ledger: Ledger): number {
  if (ledger.sentLagMs === undefined) return lease.expiresMs + ledger.windowMs;
  if (lease.read === true) return lease.atMs + ledger.windowMs;
  const sentBy =
    lease.lastSentMs ?? Math.min(lease.expiresMs, lease.handedBackMs ?? Number.POSITIVE_INFINITY);
  return sentBy + ledger.sentLagMs + ledger.windowMs;
}

/** What a declared window's ledger holds at `nowMs` in one dimension. */
function ledgerHolds(ledger: Ledger, dimension: Dimension, nowMs: number): number {
  let held = 0;
  for (const lease of ledger.leases) {
    if (countsUntil(lease, ledger) > nowMs) held += lease.amounts[dimension] - lease.returned[dimension];
  }
  return held;
}

/** When a declared window's ledger has let go of `missing` more than it holds free now. */
function ledgerFreesAt(
  ledger: Ledger,
  dimension: Dimension,
  limit: number,
  missing: number,
  nowMs: number,
): number {
  const counting = ledger.leases
    .filter((lease) => countsUntil(lease, ledger) > nowMs)
    .sort((a, b) => countsUntil(a, ledger) - countsUntil(b, ledger));
  let freed = 0;
  for (const lease of counting) {
    freed += lease.amounts[dimension] - lease.returned[dimension];
    if (freed >= missing) return countsUntil(lease, ledger);
  }
  // The rest is granted to calls not yet asked for: a window's worth a window.
  const last = counting.length === 0 ? nowMs : countsUntil(counting[counting.length - 1]!, ledger);
  return last + Math.ceil((missing - freed) / Math.max(1, limit)) * ledger.windowMs;
}

/**
 * The account of a key an operator declared limits for, before anything is read of it:
 * whole, each declared dimension refilled evenly over the window when declared to
 * (`continuous`), else counted as a sliding log of what was granted.
 */
function declaredBuckets(
  limits: DeclaredLimits | undefined,
  shape: WindowShape | undefined,
  nowMs: number,
): Map<Dimension, Bucket> {
  const buckets = new Map<Dimension, Bucket>();
  if (limits === undefined) return buckets;
  for (const dimension of DIMENSIONS) {
    const limit = limits.amounts[dimension];
    if (limit === undefined || limit <= 0) continue;
    const perMs = limit / limits.windowMs;
    buckets.set(dimension, {
      dimension,
      limit,
      perMs,
      etaPerMs: perMs,
      measured: true,
      level: limit,
      atMs: nowMs,
      resetAtMs: 0,
      tracker: new ShapeTracker(),
      shape: shape === "continuous" ? "continuous" : "unknown",
      periodMs: shape === "continuous" ? undefined : limits.windowMs,
      spentSinceReading: 0,
      resetSpanMs: limits.windowMs,
      told: undefined,
      ledger:
        shape === "continuous" ? undefined : { windowMs: limits.windowMs, sentLagMs: undefined, leases: [] },
      admitLagMs: shape === "continuous" ? Math.ceil(limits.windowMs * ADMIT_LAG_SHARE) : 0,
      declared: true,
      logLagMs: 0,
      logSinceSent: [],
    });
  }
  return buckets;
}

/** The last of a fixed window's resets at or before `nowMs`: the one read, then one a period (when seen). */
function lastResetBy(bucket: Bucket, nowMs: number): number {
  if (bucket.periodMs === undefined || bucket.periodMs <= 0 || nowMs < bucket.resetAtMs)
    return bucket.resetAtMs;
  return bucket.resetAtMs + Math.floor((nowMs - bucket.resetAtMs) / bucket.periodMs) * bucket.periodMs;
}

/**
 * A window read as refilling evenly, or one with no reset said (nothing to wait for: it is
 * taken to refill in a minute, as per-minute limits do), refills as time passes; any
 * other is as it was until its reset.
 */
function refillsAsItGoes(bucket: Bucket): boolean {
  return bucket.shape === "continuous" || bucket.resetAtMs <= 0;
}

/**
 * When a window that comes back whole (not refilling as it goes) has given back `missing`
 * more than it holds now: at its reset, and a period later for every further window's
 * worth. A reset already passed and spent is followed by one a period on.
 */
function wholeAgainAt(bucket: Bucket, missing: number, nowMs: number): number {
  // Before a period is seen, as long as the last reading had to its reset (the rest of a
  // fixed window's period, at least; a bucket's time to whole): a forecast, which decides
  // waiting in place over checkpointing. The account grants nothing it has not seen come back.
  const periodMs = bucket.periodMs ?? Math.max(SETTLE_MS, bucket.resetSpanMs);
  const windows = Math.max(1, Math.ceil(missing / Math.max(1, bucket.limit)));
  const next =
    bucket.resetAtMs > nowMs
      ? bucket.resetAtMs
      : bucket.shape === "fixed" && bucket.periodMs !== undefined
        ? lastResetBy(bucket, nowMs) + bucket.periodMs
        : nowMs + periodMs;
  return next + (windows - 1) * periodMs;
}

/**
 * A lower bound of the refill rate a reading shows, when it shows one: providers round what
 * is left down to a whole unit and the time to full up, so what was missing may be up to one
 * unit less than it says, over at most the time it says.
 */
function refillRate(
  remaining: number,
  limit: number,
  resetAtMs: number | undefined,
  readAtMs: number,
): number | undefined {
  if (resetAtMs === undefined || resetAtMs <= readAtMs) return undefined;
  const missing = limit - remaining - 1;
  if (missing < Math.max(1, limit * RATE_FROM_SHARE)) return undefined;
  return missing / (resetAtMs - readAtMs);
}

/** The refill rate a reading suggests, without the rounding that makes a bound of it (undefined: it says none). */
function guessedRate(
  remaining: number,
  limit: number,
  resetAtMs: number | undefined,
  readAtMs: number,
): number | undefined {
  if (resetAtMs === undefined || resetAtMs <= readAtMs || remaining >= limit) return undefined;
  return (limit - remaining) / (resetAtMs - readAtMs);
}

function fits(key: SharedKey, need: Need, nowMs: number): boolean {
  for (const [dimension, bucket] of key.buckets) {
    if (need[dimension] > 0 && levelAt(bucket, nowMs) < need[dimension]) return false;
  }
  return true;
}

/** A margin larger than the whole window is cut to it (the floor already fits). */
function cutToWindow(key: SharedKey, need: Need, floor: Need): Need {
  const cut = { ...need };
  for (const [dimension, bucket] of key.buckets) {
    cut[dimension] = Math.min(need[dimension], Math.max(floor[dimension], bucket.limit));
  }
  return cut;
}

function scale(need: Need, calls: number): Need {
  return {
    requests: need.requests * calls,
    tokens: need.tokens * calls,
    inputTokens: need.inputTokens * calls,
    outputTokens: need.outputTokens * calls,
  };
}

/** Negative when `a` is served before `b`: higher priority (grown by waiting) first, then the longest waiting. */
function order(a: Waiter, b: Waiter, nowMs: number, agingMs: number): number {
  const score = (w: Waiter) => w.priority + Math.max(0, nowMs - w.sinceMs) / agingMs;
  return score(b) - score(a) || a.sinceMs - b.sinceMs;
}

function ranksBefore(a: Waiter, b: Waiter, nowMs: number, agingMs: number): boolean {
  return order(a, b, nowMs, agingMs) < 0;
}

function figuresOf(
  dimension: Dimension,
  bucket: Bucket,
  needed: number,
  ahead: number,
  nowMs: number,
): Figures {
  return {
    dimension,
    limit: Math.round(bucket.limit),
    remaining: Math.max(0, Math.floor(levelAt(bucket, nowMs) - ahead)),
    needed: Math.ceil(needed),
    resetAtMs: Math.round(bucket.resetAtMs),
  };
}
