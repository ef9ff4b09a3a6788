import type { Watch, WatchedEvent } from "@holdfast/bus";
import type { Config } from "@holdfast/config";
import type { ConfiguredLimits, RunCommand, RunState, StoredEnvelope } from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import { type Decision, decide, type Figures, type Need, readRateLimits } from "@holdfast/predict";
import { type Envelope, PredictAction } from "@holdfast/proto";
import type { Ledger } from "@holdfast/runs";
import { ShuttingDownError } from "../errors.js";
import type { Call, GatewayFeature, UpstreamAnswer, Verdict } from "../pipeline/hooks.js";
import { pause, pauseUntil } from "../pipeline/wait.js";
import type { Room } from "../routing/router.js";
import { Checkpoints } from "./checkpoint.js";
import { Compacting } from "./compacting.js";
import { Estimates, type Predicted } from "./estimate.js";
import { Keys } from "./key.js";
import { chargedOf, NOTHING } from "./need.js";
import {
  type Ceiling,
  ceilingLeftMs,
  checkpointStep,
  coordinatorCatchUpMs,
  countExactly,
  deadlineOf,
  nextStep,
  type Prober,
  priorityOf,
  probeStep,
  retryWaitMs,
  roomFrom,
  turnStep,
} from "./policy.js";
import { Readings } from "./readings.js";
import type { SharedDecision, SharedSlices, Slice } from "./shared.js";
import { Slots } from "./slots.js";
import { predictionOf, refuse, tooLarge, waitedForSlot, waitedTooLong } from "./verdicts.js";

type PredictConfig = Config["predict"];

/**
 * The provider keys' events in the log: where readings worth an event go (the key's own
 * subject), and where this gateway learns the readings other gateways recorded.
 */
export interface KeyEventLog {
  appendKeyEvent(keyId: string, envelope: Envelope): Promise<void>;
  lastOnSubjects(filters: string[]): Promise<{ envelope: StoredEnvelope }[]>;
  /** A followed event read, or undefined when it is none a reader can use (quarantined). */
  decode(event: WatchedEvent): StoredEnvelope | undefined;
  follow(
    types: readonly ["RateLimitObserved"],
    handler: (event: WatchedEvent) => void,
    options: { keys: true },
  ): Promise<Watch>;
  readonly subjects: { ofKeyType(type: "RateLimitObserved"): string };
}

export interface PredictFeatureOptions {
  config: PredictConfig;
  ledger: Ledger<RunState, RunCommand>;
  keyEvents: KeyEventLog;
  /** The run's per-run limits by tag (a run's deadline is the end of its max_minutes window). */
  limitsFor: (tag: string) => ConfiguredLimits;
  /** This gateway process, as its events name it. */
  gateway: string;
  newId: () => string;
  clock: () => number;
  log: Logger;
  keepaliveMs: number;
  keepalive1xx: boolean;
  shutdown: AbortSignal;
  /** The fleet's shared windows (the budget service's coordinator); undefined: this gateway decides alone. */
  shared?: SharedSlices;
  /** Longest a compaction's summary call may take. */
  summaryTimeoutMs: number;
  /** The most of a summary model's answer read (gateway.max_answer_bytes). */
  maxAnswerBytes: number;
}

// Longest a call waits for the first reading of a key another call is finding out.
const PROBE_MS = 5_000;

/**
 * Rate-limit prediction at the pipeline's hook before forward (agentpause's rule, fleet
 * traffic read passively): every answer's rate-limit headers update its provider key's
 * window; before each call, the call's estimate plus its margin k·σ is checked against
 * what the window has left (less what calls in flight since the last reading reserved).
 * The call goes on; waits in place, with keepalives, until the window has refilled
 * enough; or, when that is longer than `wait_threshold_s` or past the run's deadline,
 * checkpoints its run (held with reason rate_limit) and resumes it when the window allows.
 * A call too large for the whole window is refused at once; one that has waited
 * `max_wait_s` gets the provider's own 429 with retry-after. A 429 that slips through is
 * retried inside the gateway and makes the margin wider.
 *
 * A key whose answers carry no reading (no rate-limit headers) has nothing to predict from:
 * once it has refused a call, it is kept to as many calls at once as its 429s and successes
 * say (slots.ts), the calls past that waiting in place for a slot, and its 429s' cooldowns
 * are waited as any key's are.
 */
export function predictFeature(options: PredictFeatureOptions): {
  feature: GatewayFeature;
  /** How much room a route target's key window has for a call (routing chooses by it). */
  roomOf(call: Call, target: { origin: string; credential: string; model: string }): Room;
  /** Learns every key's last recorded window, then follows what other gateways record. */
  start(): Promise<void>;
  close(): Promise<void>;
} {
  const { config, ledger, clock } = options;
  const waitThresholdMs = config.wait_threshold_s * 1_000;
  const maxWaitMs = config.max_wait_s * 1_000;
  const estimates = new Estimates(config, options.log);
  const keys = new Keys(config);
  const slots = new Slots();
  const calls = new WeakMap<Call, Predicted>();
  // A call asked again once its body was compacted keeps when it arrived and what it waited.
  const resumed = new WeakMap<
    Call,
    { sinceMs: number; waited: { ms: number; figures: Figures | undefined } }
  >();
  const readings = new Readings({
    keys,
    appendKeyEvent: (keyId, envelope) => options.keyEvents.appendKeyEvent(keyId, envelope),
    gateway: options.gateway,
    newId: options.newId,
    clock,
    log: options.log,
  });
  const checkpoints = new Checkpoints({
    ledger,
    gateway: options.gateway,
    onCheckpoint: config.on_checkpoint,
    maxWaitMs,
    clock,
    log: options.log,
  });
  const ceilingOf = (predicted: Pick<Predicted, "sinceMs">): Ceiling => ({
    sinceMs: predicted.sinceMs,
    maxWaitMs,
  });
  const deadlineFor = (call: Call): number | undefined =>
    deadlineOf(ledger.cached(call.run.runId), call.run.tag, options.limitsFor);

  const decideFor = (
    call: Call,
    predicted: Pick<Predicted, "key" | "need" | "floor">,
    nowMs: number,
  ): Decision =>
    decide({
      window: predicted.key.window,
      need: predicted.need,
      floor: predicted.floor,
      nowMs,
      waitThresholdMs,
      deadlineMs: deadlineFor(call),
    });

  /** What the call knows of prediction, moved to the key of the upstream it goes to now (a route moved it). */
  const predictedOf = (call: Call): Predicted | undefined => {
    const predicted = calls.get(call);
    if (predicted === undefined) return undefined;
    const key = keys.of(call);
    if (key.keyId !== predicted.key.keyId) {
      predicted.key.window.release(call);
      slots.giveBack(call);
      predicted.key = key;
    }
    return predicted;
  };

  /** Every answer's rate-limit headers update its key's window; one with none teaches its calls at once. */
  const onAnswer = (call: Call, answer: UpstreamAnswer): void => {
    const predicted = predictedOf(call);
    const key = predicted?.key ?? keys.of(call);
    // When the call left for the provider, as its fleet slice tells the coordinator.
    const spent = predicted?.slice?.slice;
    if (spent !== undefined) spent.lastSentAtMs = Math.max(spent.lastSentAtMs, answer.sentAtMs);
    readings.answered(key, answer);
    slots.answered(key, answer, clock());
  };

  const compacting = new Compacting({
    config,
    ledger,
    gateway: options.gateway,
    keys,
    maxWaitMs,
    clock,
    waiting: options,
    summaryTimeoutMs: options.summaryTimeoutMs,
    maxAnswerBytes: options.maxAnswerBytes,
    answered: onAnswer,
  });

  /**
   * How much room a route target's key window has for the call, had it gone there: what
   * routing chooses a target by (its estimate counted for that target's model).
   */
  const roomOf = (call: Call, target: { origin: string; credential: string; model: string }): Room => {
    const key = keys.for(call, target.origin, target.credential);
    if (key.window.known().length === 0) return roomFrom(undefined, clock());
    const nowMs = clock();
    const { need, floor } = estimates.of(call, key, false, target.model);
    const decision = decide({
      window: key.window,
      need,
      floor,
      nowMs,
      waitThresholdMs: Number.POSITIVE_INFINITY,
    });
    return roomFrom(decision, nowMs);
  };

  /** The call goes on, its reservation taken out of its key's window (and of a fleet slice, when it came from one). */
  const goOn = (
    call: Call,
    predicted: Predicted,
    waited: { ms: number; figures: Figures | undefined },
    figures: Figures,
    nowMs: number,
  ): Verdict => {
    clearTimeout(predicted.ceiling);
    predicted.ceiling = undefined;
    predicted.key.window.reserve(call, predicted.need, nowMs);
    const prediction = predictionOf(
      waited.ms > 0 ? PredictAction.PREDICT_ACTION_WAIT : PredictAction.PREDICT_ACTION_CONTINUE,
      predicted.key.keyId,
      waited.figures ?? figures,
      predicted,
      { waitedMs: waited.ms, resumeAtMs: 0 },
    );
    return { kind: "continue", notes: { prediction } };
  };

  const beforeForward = async (call: Call): Promise<Verdict> => {
    const key = predictedOf(call)?.key ?? keys.of(call);
    const carried = resumed.get(call);
    resumed.delete(call);
    const sinceMs = calls.get(call)?.sinceMs ?? carried?.sinceMs ?? clock();
    const ceiling: Ceiling = { sinceMs, maxWaitMs };
    const priority = priorityOf(
      call.request.headers["x-holdfast-priority"],
      call.run.tag,
      config.priority_by_tag,
    );
    if (typeof priority !== "number") return refuse(priority);
    // How long the call has waited, and why: the figures of the decision to wait, not
    // those of the one that let it go.
    const waited: { ms: number; figures: Figures | undefined } = carried?.waited ?? {
      ms: 0,
      figures: undefined,
    };
    // Sent compacted (as recorded, or as an operator asked): the pipeline rewrites the body
    // and asks again for the call as it now is.
    const recorded = await compacting.asRecorded(call);
    if (recorded !== undefined) {
      resumed.set(call, { sinceMs, waited });
      return recorded;
    }
    // The fleet's window decides while its coordinator answers; this gateway alone when not.
    let sharing = options.shared !== undefined;
    let probed = false;
    for (;;) {
      // The call that goes out to read a new key is claimed before anything is awaited, so
      // calls arriving while it asks the coordinator wait for it too.
      const out = readings.proberOf(key.keyId);
      const prober: Prober = out === undefined ? "none" : out === call ? "this" : "other";
      const probe = probeStep({
        known: key.window.known().length > 0,
        silent: key.window.silent,
        prober,
        callsInFlight: key.window.callsInFlight,
        probed,
      });
      if (probe === "claim") readings.claimProbe(key.keyId, call);
      if (probe === "wait_for_reading") {
        probed = true;
        const how = await pauseUntil(call, readings.firstReading(key.keyId), PROBE_MS, options);
        if (how.how === "shutdown") return refuse(new ShuttingDownError());
        if (how.how === "client_gone" || how.how === "gave_up") return refuse(waitedTooLong(0));
        continue;
      }
      const nowMs = clock();
      let predicted: Predicted = {
        key,
        sinceMs,
        ceiling: calls.get(call)?.ceiling,
        ...estimates.of(call, key, false),
      };
      let decision = decideFor(call, predicted, nowMs);
      if (countExactly(decision)) {
        // Near the window's end, a guess is not good enough: count with the model's tokenizer.
        await estimates.loading;
        predicted = { ...predicted, ...estimates.of(call, key, true) };
        decision = decideFor(call, predicted, nowMs);
      }
      calls.set(call, predicted);
      if (decision.action === "too_large") {
        const compacted = await compacting.atWall(call, key, sinceMs);
        if (compacted !== undefined) {
          resumed.set(call, { sinceMs, waited });
          return compacted;
        }
      }
      if (sharing && options.shared !== undefined) {
        const answer = await options.shared.decide({
          keyId: key.keyId,
          upstream: key.window.upstream,
          need: predicted.need,
          floor: predicted.floor,
          silent: key.window.silent,
          priority,
          sinceMs,
          thresholdMs: waitThresholdMs,
          deadlineMs: deadlineFor(call),
        });
        const catchUpMs = coordinatorCatchUpMs(
          answer.kind !== "unknown",
          key.window.known().length > 0,
          clock(),
          sinceMs,
        );
        if (catchUpMs !== undefined) {
          const how = await pause(call, catchUpMs, options);
          if (how === "shutdown") return refuse(new ShuttingDownError());
          if (how !== "ready") return refuse(waitedTooLong(0));
          continue;
        }
        if (answer.kind !== "unavailable" && answer.kind !== "unknown") {
          const verdict = await sharedVerdict(call, predicted, answer, waited, decision.figures);
          if (verdict !== undefined) return verdict;
        }
        // The coordinator could not be asked, or failed while the call waited its turn: decide here.
        sharing = false;
        continue;
      }
      const step = nextStep(decision, nowMs, ceiling, config.on_checkpoint);
      switch (step.kind) {
        case "go": {
          // A key that reports no window: the call goes once it has a slot of its calls at once.
          const turn = slots.take(call, key, priority);
          if (turn !== true) {
            waited.figures ??= decision.figures;
            const how = await pauseUntil(call, turn, ceilingLeftMs(nowMs, ceiling), options);
            if (how.how !== "ready") {
              slots.giveBack(call);
              if (how.how === "shutdown") return refuse(new ShuttingDownError());
              return refuse(waitedForSlot(slots.limitOf(key.keyId)));
            }
            waited.ms += clock() - nowMs;
            // Its slot is held now; decided again, as a 429 may have begun a cooldown meanwhile.
            continue;
          }
          await checkpoints.resumeIfCheckpointed(call);
          return goOn(call, predicted, waited, decision.figures, nowMs);
        }
        case "too_large":
          return refuse(tooLarge(call, decision.figures));
        case "give_up":
          return refuse(waitedTooLong(step.retryAfterMs));
        case "wait": {
          waited.figures ??= step.figures;
          const how = await pause(call, step.waitMs, options);
          if (how === "shutdown") return refuse(new ShuttingDownError());
          if (how !== "ready") return refuse(waitedTooLong(step.untilMs - clock()));
          waited.ms += clock() - nowMs;
          continue;
        }
        case "checkpoint":
          // Held for longer than a wait: its slot (taken before a cooldown began) is someone else's meanwhile.
          slots.giveBack(call);
          return checkpoints.hold(call, predicted, step.decision, waited.ms);
      }
    }
  };

  /**
   * What the fleet's shared window said, as the call's verdict: go on (its reservation out
   * of a slice), wait its turn in place, checkpoint the run, or refuse a call too large.
   * Undefined when the coordinator failed while the call waited (it is decided here then).
   */
  const sharedVerdict = async (
    call: Call,
    predicted: Predicted,
    answer: Exclude<SharedDecision, { kind: "unavailable" | "unknown" }>,
    /** How long the call has waited so far, and why: moved on when it waits its turn here. */
    waited: { ms: number; figures: Figures | undefined },
    local: Figures,
  ): Promise<Verdict | undefined> => {
    const go = (slice: Slice | undefined): Verdict => {
      if (slice !== undefined) predicted.slice = { slice, need: predicted.need };
      return goOn(call, predicted, waited, local, clock());
    };
    switch (answer.kind) {
      case "continue":
        await checkpoints.resumeIfCheckpointed(call);
        return go(answer.slice);
      case "too_large":
        return refuse(tooLarge(call, answer.figures));
      case "checkpoint": {
        const step = checkpointStep(
          { action: "checkpoint", untilMs: answer.untilMs, why: answer.why, figures: answer.figures },
          clock(),
          ceilingOf(predicted),
          config.on_checkpoint,
        );
        if (step.kind === "give_up") return refuse(waitedTooLong(step.retryAfterMs));
        return checkpoints.hold(call, predicted, step.decision, waited.ms);
      }
      case "queued": {
        const nowMs = clock();
        const step = turnStep(answer.etaMs, nowMs, ceilingOf(predicted));
        if (step.kind === "give_up") {
          answer.cancel();
          giveBackLate(answer.turn, predicted.need);
          return refuse(waitedTooLong(step.retryAfterMs));
        }
        const turn = await pauseUntil(call, answer.turn, step.leftMs, options);
        waited.ms += clock() - nowMs;
        waited.figures ??= answer.figures;
        if (turn.how === "ready") {
          await checkpoints.resumeIfCheckpointed(call);
          return go(turn.value);
        }
        answer.cancel();
        giveBackLate(answer.turn, predicted.need);
        if (turn.how === "failed") return undefined;
        if (turn.how === "shutdown") return refuse(new ShuttingDownError());
        return refuse(waitedTooLong(Math.max(0, answer.etaMs - clock())));
      }
    }
  };

  /** A turn that came as its call stopped waiting: nothing of it was spent. */
  const giveBackLate = (turn: Promise<Slice>, need: Need): void => {
    turn.then(
      (slice) => options.shared?.settle(slice, need, NOTHING),
      () => undefined,
    );
  };

  /** A 429 that slipped through: wait what the provider asked (or the window says), then send again. */
  const retryAfter = (call: Call, answer: UpstreamAnswer, attempt: number): number | undefined => {
    const predicted = predictedOf(call);
    if (predicted === undefined || attempt > config.max_retries) return undefined;
    estimates.estimator.slipped();
    const nowMs = clock();
    const askedMs = readRateLimits(answer.headers, predicted.key.names, nowMs)?.retryAfterMs;
    predicted.key.window.release(call);
    const decision = decideFor(call, predicted, nowMs);
    // Of a window not read as refilling evenly, only its reset is known: the provider's own
    // word on when the call fits is better than that.
    const { dimension } = decision.figures;
    const refills =
      dimension !== undefined && predicted.key.window.shapeOf(dimension)?.shape === "continuous";
    const waitMs = retryWaitMs({
      decision,
      askedMs,
      askedFirst: !refills,
      attempt,
      nowMs,
      ceiling: ceilingOf(predicted),
    });
    if (waitMs === undefined) return undefined;
    predicted.key.window.reserve(call, predicted.need, nowMs + waitMs);
    // Sent again on the same slice: what the provider counts of it counts from then.
    const spent = predicted.slice?.slice;
    if (spent !== undefined) spent.lastSentAtMs = Math.max(spent.lastSentAtMs, nowMs + waitMs);
    return waitMs;
  };

  /**
   * A refused call on a key kept to a number of calls at once is no longer at the provider:
   * it gives its slot back and is sent again only once it has one (behind the calls that
   * waited before it), so what goes when a cooldown ends is at most the limit the refusal
   * just lowered, not every call that overshot it. Undefined when it has its slot at once
   * (or the key reports its window).
   */
  const retryTurn = (
    call: Call,
    waitMs: number,
  ): { promise: Promise<void>; withinMs: number } | undefined => {
    const predicted = calls.get(call);
    if (predicted === undefined || !slots.governs(predicted.key)) return undefined;
    const priority = priorityOf(
      call.request.headers["x-holdfast-priority"],
      call.run.tag,
      config.priority_by_tag,
    );
    slots.giveBack(call);
    const turn = slots.take(call, predicted.key, typeof priority === "number" ? priority : 0);
    if (turn === true) return undefined;
    return { promise: turn, withinMs: ceilingLeftMs(clock() + waitMs, ceilingOf(predicted)) };
  };

  const feature: GatewayFeature = async (app) => {
    app.pipeline.beforeForward.push(beforeForward);
    app.pipeline.upstreamAnswered.push(onAnswer);
    // After routing had its say (a routed call goes to the next target at once), a 429 is
    // sent again after its wait.
    app.pipeline.afterFailure.push((call, failure, attempt) => {
      if (!("statusCode" in failure) || failure.statusCode !== 429) return undefined;
      const ms = retryAfter(call, failure, attempt);
      if (ms === undefined) return undefined;
      const turn = retryTurn(call, ms);
      return turn === undefined ? { kind: "wait", ms } : { kind: "wait", ms, turn };
    });
    app.pipeline.afterOutcome.push((call, _cost, observedOutcome) => {
      slots.giveBack(call);
      const predicted = calls.get(call);
      if (predicted === undefined) return;
      predicted.key.window.release(call);
      if (predicted.slice !== undefined) {
        const { slice, need } = predicted.slice;
        predicted.slice = undefined;
        options.shared?.settle(slice, need, chargedOf(call.shape.family, predicted, observedOutcome));
      }
      const usage = observedOutcome.usage;
      if (usage?.reported !== true || observedOutcome.status >= 300) return;
      estimates.estimator.record(predicted.features, predicted.estimate, {
        input: Number(usage.inputTokens),
        output: Number(usage.outputTokens),
        latencyMs: observedOutcome.latencyMs,
      });
    });
    // A call parked while its run is held gives its slot back (it is decided anew after).
    app.pipeline.callParked.push((call) => slots.giveBack(call));
    app.pipeline.callEnded.push((call) => {
      slots.giveBack(call);
      readings.callEnded(call);
      const predicted = calls.get(call);
      if (predicted === undefined) return;
      predicted.key.window.release(call);
      readings.came(predicted.key.keyId);
      if (predicted.slice !== undefined) {
        // Never sent (refused, parked and left, or the log would not start it): nothing was spent.
        options.shared?.settle(predicted.slice.slice, predicted.slice.need, NOTHING);
        predicted.slice = undefined;
      }
      clearTimeout(predicted.ceiling);
      calls.delete(call);
    });
  };

  let watch: Watch | undefined;

  return {
    feature,
    roomOf,
    async start() {
      const last = await options.keyEvents.lastOnSubjects([
        options.keyEvents.subjects.ofKeyType("RateLimitObserved"),
      ]);
      for (const { envelope } of last) readings.learn(envelope);
      watch = await options.keyEvents.follow(
        ["RateLimitObserved"],
        (event) => {
          const envelope = options.keyEvents.decode(event);
          if (envelope !== undefined) readings.learn(envelope);
        },
        { keys: true },
      );
    },
    async close() {
      checkpoints.close();
      await watch?.stop();
    },
  };
}
