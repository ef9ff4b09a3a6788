import type { Config } from "@holdfast/config";
import {
  type ConfiguredLimits,
  FLEET,
  type FleetCommand,
  type FleetState,
  type HoldRule,
  headroom,
  limitCrossed,
  MAX_NANO_USD,
  NO_LIMITS,
  type RunState,
  RunStatus,
  ruleHolding,
  type Trip,
  windowLimits,
} from "@holdfast/events";
import type { Pricer, RequestView } from "@holdfast/providers";
import type { HeldRuns, Ledger, RunLabels } from "@holdfast/runs";
import type { Call } from "../pipeline/hooks.js";
import type { Upstream } from "../upstream/upstream.js";
import { type Parkable, type ParkingOptions, park, type Unparked } from "./park.js";

export interface AdmissionOptions extends ParkingOptions {
  fleet: Ledger<FleetState, FleetCommand>;
  held: HeldRuns;
  pricer: Pricer;
  limits: Pick<Config, "limits" | "limits_by_tag" | "on_trip" | "budgets">;
}

/** What a call reserves while in flight, and whether its model was priced. */
export interface Reservation {
  readonly nanoUsd: number;
  /**
   * The model has no known price and a cost limit or budget applies to the run: the
   * reservation is at the unknown rate (pricing.unknown: charge), or the call is refused.
   */
  readonly unpriced: boolean;
}

/** What a passed-through call that names a run meets (Admission.passthroughGate). */
export type PassthroughGate = "go" | "held" | "stopped";

/**
 * Whether a passed-through call's run must be read from the log before it is decided:
 * only when this process has heard it held or stopped (its own fold, or the fleet's index
 * of held runs for a run it does not follow), or cannot be sure it has not.
 */
export function mustReadLog(
  cached: RunState | undefined,
  indexed: RunStatus | undefined,
  uncertain: boolean,
): boolean {
  const status = cached?.status ?? indexed;
  return status === RunStatus.Held || status === RunStatus.Stopped || (cached === undefined && uncertain);
}

/**
 * What a passed-through call of a run in this state meets: the run's hold or stop, or, for
 * a run that is neither but has crossed one of its limits (its window's steps, cost,
 * minutes, tokens in the last minute), the trip its next metered call would record.
 * A run not seen (undefined) goes on: it has spent nothing.
 */
export function passthroughVerdict(
  state: RunState | undefined,
  limits: ConfiguredLimits,
  nowMs: number,
): PassthroughGate | { readonly trip: Trip; readonly action: "hold" | "stop" } {
  if (state === undefined) return "go";
  if (state.status === RunStatus.Stopped) return "stopped";
  if (state.status === RunStatus.Held) return "held";
  const trip = limitCrossed({ limits, model: "" }, state, nowMs);
  return trip === undefined ? "go" : { trip, action: limits.onTrip };
}

/** What admission says of a call before its start is appended. */
export type Gate = "go" | "confirm" | "held";

const UNPRICED_FREELY: Reservation = Object.freeze({ nanoUsd: 0, unpriced: false });
// Output tokens assumed for a run that has not finished a call yet, when reserving.
const FIRST_CALL_OUTPUT_TOKENS = 512;

/**
 * Holds, limits and standing rules, as each call meets them. The run's own decider has the
 * last word (under the run's sequence check, so every gateway agrees); this decides from
 * local state, with no round trip (but a read of the standing rules for a run this gateway
 * does not follow yet), what the call can do before that word comes:
 *
 * - `held` / `stopped`: the run is, as this gateway follows it (or, for a run it has not
 *   served, as the fleet-wide index of held runs says): park the call, or refuse it;
 * - `confirm`: a limit is near, or a standing rule matches: the start must be accepted by
 *   the log before anything is forwarded, so no provider call is made that the decider
 *   then refuses;
 * - `go`: forward while the start is appended (one round trip, overlapping the provider's).
 */
export class Admission {
  readonly onTrip: "hold" | "stop";
  private readonly byTag = new Map<string, ConfiguredLimits>();
  /** The read of the standing rules in flight, and the one every call arriving meanwhile waits for. */
  private rulesRead: { readonly done: Promise<void>; next?: Promise<void> } | undefined;

  constructor(private readonly options: AdmissionOptions) {
    this.onTrip = options.limits.on_trip;
  }

  /** Starts following the fleet's standing rules. */
  async start(): Promise<void> {
    await this.options.fleet.current(FLEET);
    // Followed for good: a listener keeps the fleet's state cached and current.
    this.options.fleet.subscribe(FLEET, () => {});
  }

  /** Rejects only when the standing rules could not be read from the log. */
  async gate(call: Call): Promise<Gate> {
    const runId = call.run.runId;
    let state = this.options.ledger.cached(runId);
    // A run this gateway does not follow yet (one that never called, or that other gateways
    // served) meets the standing rules as the log has them now: nothing else stands between
    // a rule added a moment ago, which the watch may not have brought yet, and such a run's
    // first start (a hold of the run itself is on the run's own subject, and the start's
    // append checks that).
    if (state === undefined || state.status === RunStatus.New) {
      await this.readRules();
      state = this.options.ledger.cached(runId);
    }
    const status = state?.status ?? this.statusFromIndex(runId);
    if (status === RunStatus.Held) return "held";
    // A stopped run's call is refused by the log, not by what this process has heard: a
    // resume appended elsewhere a moment ago may not have reached it yet (the ledger reads
    // the log before it refuses).
    if (status === RunStatus.Stopped) return "confirm";
    // A run whose held answers this process could not all see at start: its fold decides.
    if (state === undefined && this.options.held.uncertain(runId)) return "confirm";
    if (this.ruleMatches(call, state)) return "confirm";
    // A run this gateway has no state of (new, served by another gateway, or by this one
    // before a restart) may be at a limit already (configured, or its resume's own), in
    // flight elsewhere under a rule on running runs, or tagged by its first call as a rule
    // names: its start is accepted by the log (which reads the run) before the call is
    // sent, or the provider would be sent a call the log then refuses. One wait for an
    // ack, on such a run's first call here only.
    if (state === undefined) return "confirm";
    if (this.nearLimit(call, state)) return "confirm";
    return "go";
  }

  /**
   * Reads the fleet's standing rules from the log. A read already in flight may have gone
   * out before a rule the caller must see was stored: the caller waits for the next one,
   * which every call arriving meanwhile shares.
   */
  private readRules(): Promise<void> {
    const reading = this.rulesRead;
    if (reading === undefined) return this.startRulesRead();
    reading.next ??= reading.done.then(
      () => this.startRulesRead(),
      () => this.startRulesRead(),
    );
    return reading.next;
  }

  private startRulesRead(): Promise<void> {
    const read: { done: Promise<void>; next?: Promise<void> } = {
      done: this.options.fleet.latest(FLEET).then(() => undefined),
    };
    this.rulesRead = read;
    void read.done
      .finally(() => {
        if (this.rulesRead === read) this.rulesRead = undefined;
      })
      .catch(() => undefined);
    return read.done;
  }

  park(call: Parkable, labels: RunLabels): Promise<Unparked> {
    return park(call, labels, this.options);
  }

  /**
   * What a passed-through call naming this run meets: it goes on, is parked (held), or is
   * refused (stopped). Decided from local state, with no round trip, for the common call;
   * only a run this process has heard held or stopped (or one whose held answers it could
   * not all see at start) costs a read of the log, which has the last word: a resume
   * appended elsewhere a moment ago may not have reached this process yet. A run past one
   * of its limits is tripped first, as its next metered call would trip it (held or stopped
   * as `on_trip` says).
   */
  async passthroughGate(runId: string, labels: RunLabels): Promise<PassthroughGate> {
    let cached = this.options.ledger.cached(runId);
    // As for a metered call: a run this gateway does not follow yet meets the standing
    // rules as the log has them now.
    if (cached === undefined || cached.status === RunStatus.New) {
      await this.readRules();
      cached = this.options.ledger.cached(runId);
    }
    const state = mustReadLog(cached, this.statusFromIndex(runId), this.options.held.uncertain(runId))
      ? await this.options.ledger.latest(runId)
      : cached;
    const verdict = passthroughVerdict(state, this.limitsFor(state?.tag || labels.tag), this.options.clock());
    if (verdict === "go") {
      // A standing rule holds the run (by its id, its tag, every run) at this call as at
      // its next step; a rule on a model or a prompt meets only the metered calls.
      if (!this.ruleMatchesRun(runId, labels.tag, state)) return "go";
      const held = await this.options.ledger.execute(runId, labels, {
        type: "HoldByRule",
        rules: this.rules(),
        tag: labels.tag,
      });
      const after = passthroughVerdict(held.state, NO_LIMITS, this.options.clock());
      return typeof after === "string" ? after : "go";
    }
    if (typeof verdict === "string") return verdict;
    const tripped = await this.options.ledger.execute(runId, labels, {
      type: "TripRun",
      trip: verdict.trip,
      action: verdict.action,
    });
    const after = passthroughVerdict(tripped.state, NO_LIMITS, this.options.clock());
    return typeof after === "string" ? after : "go";
  }

  /** The standing hold rules in force, for the decider. */
  rules(): HoldRule[] {
    const fleet = this.options.fleet.cached(FLEET);
    return fleet === undefined ? [] : [...fleet.rules.values()];
  }

  /** The per-run limits configured for a tag: `limits`, with `limits_by_tag.<tag>` over it. */
  limitsFor(tag: string): ConfiguredLimits {
    let limits = this.byTag.get(tag);
    if (limits === undefined) {
      const base = this.options.limits.limits;
      const own = this.options.limits.limits_by_tag[tag] ?? {};
      limits = {
        // A trip carries the limit: never more than an event's reader decodes.
        maxCostNanoUsd: Math.min(MAX_NANO_USD, Math.round((own.max_cost_usd ?? base.max_cost_usd) * 1e9)),
        maxSteps: own.max_steps ?? base.max_steps,
        maxMinutes: own.max_minutes ?? base.max_minutes,
        maxTokensPerMinute: own.max_tokens_per_minute ?? base.max_tokens_per_minute,
        onTrip: this.onTrip,
      };
      this.byTag.set(tag, limits);
    }
    return limits;
  }

  /**
   * What a call reserves against the run's cost limit and its budgets while in flight: its
   * input estimated from the request, and its output as the run's average so far (or the
   * request's own max_tokens, or 512 tokens for a run's first call), never more than the
   * request allows, priced for the model it goes to; a model with no known price at the
   * unknown rate, where a cost limit or budget applies to the run (elsewhere nothing).
   */
  reserve(
    runId: string,
    tag: string,
    view: RequestView,
    model: string,
    upstream: Upstream,
    estimatedInputTokens: number,
  ): Reservation {
    const state = this.options.ledger.cached(runId);
    const usual =
      state !== undefined && state.completed > 0
        ? Math.round(state.totals.outputTokens / state.completed)
        : (view.maxOutputTokens ?? FIRST_CALL_OUTPUT_TOKENS);
    const outputTokens = Math.min(usual, view.maxOutputTokens ?? usual);
    const usage = {
      reported: true,
      inputTokens: estimatedInputTokens,
      outputTokens,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    };
    const price = this.options.pricer.price({ model, provider: upstream.provider, usage });
    if (price.known) return { nanoUsd: price.nanoUsd, unpriced: false };
    if (!this.costControlled(runId, tag)) return UNPRICED_FREELY;
    return { nanoUsd: this.options.pricer.priceUnknown(usage), unpriced: true };
  }

  /**
   * Whether a cost limit (in the run's window) or a budget applies to the run: only then is a
   * model with no known price charged at the unknown rate (or refused); elsewhere its cost
   * stays unknown.
   */
  costControlled(runId: string, tag: string): boolean {
    const state = this.options.ledger.cached(runId);
    const runTag = tag || state?.tag || "";
    const budgets = this.options.limits.budgets;
    if (Object.hasOwn(budgets, "*") || (runTag !== "" && Object.hasOwn(budgets, runTag))) return true;
    const configured = this.limitsFor(runTag);
    const limits = state === undefined ? configured : windowLimits(configured, state);
    return limits.maxCostNanoUsd > 0;
  }

  private statusFromIndex(runId: string): RunStatus | undefined {
    const status = this.options.held.statusOf(runId);
    return status === "held" ? RunStatus.Held : status === "stopped" ? RunStatus.Stopped : undefined;
  }

  private ruleMatches(call: Call, state: RunState | undefined): boolean {
    return this.ruleHolds(call.run.runId, call.run.tag, call.view.model, call.run.promptHash, state);
  }

  private ruleMatchesRun(runId: string, tag: string, state: RunState | undefined): boolean {
    return this.ruleHolds(runId, tag, "", "", state);
  }

  private ruleHolds(
    runId: string,
    tag: string,
    model: string,
    promptHash: string,
    state: RunState | undefined,
  ): boolean {
    const fleet = this.options.fleet.cached(FLEET);
    if (fleet === undefined || fleet.rules.size === 0) return false;
    return ruleHolding(fleet.rules.values(), state, { runId, tag, model, promptHash }) !== undefined;
  }

  /**
   * Within one call (per call in flight) of a per-run limit, or past one: by the limits the
   * call's start is decided by (those of the tag it names, as its StartStep carries them).
   */
  private nearLimit(call: Call, state: RunState): boolean {
    const limits = this.limitsFor(call.run.tag);
    const next = { model: call.view.model, reservedNanoUsd: call.reservedNanoUsd };
    return headroom(limits, state, next, this.options.clock()).kind !== "room";
  }
}
