import { createHash } from "node:crypto";
import type { Watch, WatchedEvent } from "@holdfast/bus";
import type { Config } from "@holdfast/config";
import {
  type ConfiguredLimits,
  heldByCheckpoint,
  isKnown,
  makeEnvelope,
  type RunCommand,
  type RunState,
  type StoredEnvelope,
  type Trip,
  windowLimits,
} from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import {
  ANTHROPIC_HEADERS,
  type CallFeatures,
  type CostEstimator,
  type Decision,
  type Dimension,
  decide,
  type Estimate,
  Estimator,
  FeatureEstimator,
  type Figures,
  type KeyWindow,
  KeyWindows,
  type Need,
  OPENAI_HEADERS,
  type RateLimitHeaderNames,
  type RateLimitReading,
  readingOfRecorded,
  readRateLimits,
  TokenCounter,
} from "@holdfast/predict";
import {
  CompactionMode,
  type Envelope,
  LimitKind,
  PredictAction,
  type Prediction,
  type RateLimitObserved,
  type RateWindow,
} from "@holdfast/proto";
import type { Ledger, RunLabels } from "@holdfast/runs";
import { Compactor, type SummaryBudget } from "../compaction/compactor.js";
import {
  type GatewayError,
  InvalidRequestError,
  RateLimitWaitExceededError,
  ShuttingDownError,
  TooLargeForRateLimitError,
} from "../errors.js";
import { pause, pauseUntil } from "../hold/park.js";
import {
  type Call,
  CONTINUE,
  type GatewayFeature,
  type UpstreamAnswer,
  type Verdict,
} from "../pipeline/hooks.js";
import type { Room } from "../routing/router.js";
import type { SharedDecision, SharedSlices, Slice } from "./shared.js";

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

/** A provider key as the gateway knows it: its id (a hash, never the key) and its window. */
interface Key {
  readonly keyId: string;
  readonly window: KeyWindow;
  readonly names: RateLimitHeaderNames;
}

/** What prediction knows of one call in the gateway. */
interface Predicted {
  /** The key of the upstream the call goes to (a route may move it to another before it is sent). */
  key: Key;
  /** When the call first came to prediction: its ceiling (max_wait_s) counts from here. */
  readonly sinceMs: number;
  features: CallFeatures;
  estimate: Estimate;
  need: Need;
  /** What the call takes for certain: its input, and its output cap (or estimate). */
  floor: Need;
  /** Gives up on the call (a 429 with retry-after) once it has waited its ceiling. */
  ceiling: NodeJS.Timeout | undefined;
  /** The shared window's slice the call's reservation came out of. */
  slice?: { readonly slice: Slice; readonly need: Need } | undefined;
}

// A call whose window would keep less than this share of what it needs to spare is
// counted again with the model's own tokenizer before it is let through on a guess.
const CLOSE_SHARE = 1;
// Retries after a 429 that named no wait back off from this.
const BACKOFF_MS = 1_000;
const KEY_IDS_KEPT = 10_000;
// A provider's rate-limit figures past their bounds are told at most this often per key.
const PROBLEM_EVERY_MS = 60_000;
// Longest a call waits for the first reading of a key another call is finding out.
const PROBE_MS = 5_000;
// A key this gateway has read and the coordinator not yet: asked again this often, for at
// most this long from the call's arrival, before this gateway decides alone.
const COORDINATOR_CATCH_UP_MS = 20;
const UNKNOWN_TO_COORDINATOR_MS = 2_000;

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
  const estimatorOptions = { ...ESTIMATOR_BASE, k: config.k, kMax: config.k_max, kStep: config.k_step };
  const estimator: CostEstimator =
    config.estimator === "features"
      ? new FeatureEstimator(config.features, estimatorOptions)
      : new Estimator(estimatorOptions);
  const counter = new TokenCounter();
  const loading = counter.load().catch((error: unknown) => {
    options.log.warn(
      { err: error },
      "could not load tokenizers: input is counted at about four characters a token",
    );
  });
  const windows = new KeyWindows();
  const keyIds = new Map<string, string>();
  const calls = new WeakMap<Call, Predicted>();
  const resumes = new Map<string, NodeJS.Timeout>();

  const keyOf = (call: Call): Key => keyFor(call, call.upstreamOrigin, call.secrets[0] ?? "");

  const keyFor = (call: Call, upstream: string, credential: string): Key => {
    const cacheKey = `${upstream}\n${credential}`;
    let keyId = keyIds.get(cacheKey);
    if (keyId === undefined) {
      keyId = createHash("sha256").update(cacheKey).digest("hex").slice(0, 16);
      if (keyIds.size >= KEY_IDS_KEPT) keyIds.clear();
      keyIds.set(cacheKey, keyId);
    }
    return { keyId, window: windows.of(keyId, upstream), names: headerNames(config, upstream, call) };
  };

  const estimateOf = (
    call: Call,
    key: Key,
    exact: boolean,
    model = call.model,
  ): Omit<Predicted, "sinceMs" | "ceiling" | "key"> => {
    const counted = exact
      ? counter.count(call.upstreamBody.toString("utf8"), model)
      : { tokens: call.estimatedInputTokens, exact: false };
    const features: CallFeatures = {
      runId: call.run.runId,
      model,
      tag: call.run.tag,
      countedInput: counted.tokens,
      exact: counted.exact,
      approxInput: call.estimatedInputTokens,
      maxOutput: call.view.maxOutputTokens,
      toolCount: call.view.toolCount,
      messageCount: call.view.messageCount,
    };
    const estimate = estimator.estimate(features);
    return {
      features,
      estimate,
      need: needOf(estimate, key.names),
      floor: floorOf(estimate, features, key.names),
    };
  };

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
      deadlineMs: deadlineOf(call, ledger.cached(call.run.runId), options.limitsFor),
    });

  const compactor = new Compactor({
    keep: config.compaction_keep,
    summaryModel: config.summary_model,
    ledger,
    gateway: options.gateway,
    timeoutMs: options.summaryTimeoutMs,
    maxAnswerBytes: options.maxAnswerBytes,
  });
  const atTheWall =
    config.compaction === "summarize"
      ? CompactionMode.COMPACTION_MODE_SUMMARIZE
      : config.compaction === "truncate"
        ? CompactionMode.COMPACTION_MODE_TRUNCATE
        : undefined;
  // Calls a compaction was tried for (once a call).
  const compacting = new WeakSet<Call>();

  /**
   * A compacted run's call goes compacted the same way; and the first call after an
   * operator's resume --compact compacts the run's conversation as asked.
   */
  const compactAsRecorded = async (call: Call): Promise<void> => {
    const state = ledger.cached(call.run.runId);
    if (state === undefined) return;
    compactor.applyRecorded(call, state.compactions);
    const asked = state.compactNext;
    if (
      (asked !== CompactionMode.COMPACTION_MODE_TRUNCATE &&
        asked !== CompactionMode.COMPACTION_MODE_SUMMARIZE) ||
      compacting.has(call)
    )
      return;
    compacting.add(call);
    const outcome = await compactor.compact(
      call,
      asked,
      "operator",
      summaryBudget(call, keyOf(call), clock()),
    );
    if (outcome.kind === "failed") {
      call.request.log.warn(
        { err: outcome.error, runId: call.run.runId },
        "could not summarize the run's conversation",
      );
    }
  };

  /**
   * What a compaction's summary may take of the call's key window: each summary call at
   * most half the window's tokens, sent when the window has room for it (waiting in place,
   * within max_wait_s), its answer read like any other.
   */
  const summaryBudget = (call: Call, key: Key, sinceMs: number): SummaryBudget => {
    const nowMs = clock();
    const limits = (["tokens", "inputTokens"] as const)
      .map((d) => key.window.view(d, nowMs)?.limit)
      .filter((l): l is number => l !== undefined && l > 0);
    return {
      maxInputTokens: limits.length === 0 ? Number.POSITIVE_INFINITY : Math.floor(Math.min(...limits) / 2),
      ready: async (tokens) => {
        const need: Need = { requests: 1, tokens, inputTokens: tokens, outputTokens: 0 };
        for (;;) {
          const now = clock();
          const decision = decide({
            window: key.window,
            need,
            nowMs: now,
            waitThresholdMs: Number.POSITIVE_INFINITY,
          });
          if (decision.action === "continue") return true;
          if (decision.action === "too_large" || decision.untilMs - sinceMs > maxWaitMs) return false;
          if ((await pause(call, decision.untilMs - now, options)) !== "ready") return false;
        }
      },
      answered: (answer) => onAnswer(call, answer),
    };
  };

  /** What the call knows of prediction, moved to the key of the upstream it goes to now (a route moved it). */
  const predictedOf = (call: Call): Predicted | undefined => {
    const predicted = calls.get(call);
    if (predicted === undefined) return undefined;
    const key = keyOf(call);
    if (key.keyId !== predicted.key.keyId) {
      predicted.key.window.release(call);
      predicted.key = key;
    }
    return predicted;
  };

  /**
   * How much room a route target's key window has for the call, had it gone there: what
   * routing chooses a target by (its estimate counted for that target's model).
   */
  const roomOf = (call: Call, target: { origin: string; credential: string; model: string }): Room => {
    const key = keyFor(call, target.origin, target.credential);
    if (key.window.known().length === 0) return { kind: "unknown" };
    const nowMs = clock();
    const { need, floor } = estimateOf(call, key, false, target.model);
    const decision = decide({
      window: key.window,
      need,
      floor,
      nowMs,
      waitThresholdMs: Number.POSITIVE_INFINITY,
    });
    switch (decision.action) {
      case "continue": {
        const { dimension, remaining, needed, limit } = decision.figures;
        if (dimension === undefined) return { kind: "ready", headroom: 1 };
        return { kind: "ready", headroom: Math.max(0, (remaining - needed) / Math.max(1, limit)) };
      }
      case "too_large":
        return { kind: "too_large" };
      default:
        return { kind: "wait", waitMs: decision.untilMs - nowMs };
    }
  };

  const beforeForward = async (call: Call): Promise<Verdict> => {
    const key = predictedOf(call)?.key ?? keyOf(call);
    const sinceMs = calls.get(call)?.sinceMs ?? clock();
    const priority = priorityOf(call, config.priority_by_tag);
    if (typeof priority !== "number") return refuse(priority);
    await compactAsRecorded(call);
    let waitedMs = 0;
    // Why the call waited: the figures of the decision to wait, not those of the one that let it go.
    let waitedFor: Figures | undefined;
    // The fleet's window decides while its coordinator answers; this gateway alone when not.
    let sharing = options.shared !== undefined;
    let probed = false;
    for (;;) {
      // Nothing is read of the key yet, and a call on it is out: its answer will say what the
      // window is, so this one waits for it (a fleet starting at once would otherwise all go
      // on a guess, into the provider's 429s).
      // The call that goes out to read it is claimed before anything is awaited, so calls
      // arriving while it asks the coordinator wait for it too.
      const probe = probes.get(key.keyId);
      if (
        !probed &&
        key.window.known().length === 0 &&
        !key.window.silent &&
        probe === undefined &&
        key.window.callsInFlight === 0
      ) {
        probes.set(key.keyId, call);
      } else if (
        !probed &&
        key.window.known().length === 0 &&
        !key.window.silent &&
        probe !== call &&
        (probe !== undefined || key.window.callsInFlight > 0)
      ) {
        probed = true;
        const how = await pauseUntil(call, firstReading(key.keyId), PROBE_MS, options);
        if (how.how === "shutdown") return refuse(new ShuttingDownError());
        if (how.how === "client_gone" || how.how === "gave_up") return refuse(waitedTooLong(0));
        continue;
      }
      const nowMs = clock();
      let predicted: Predicted = {
        key,
        sinceMs,
        ceiling: calls.get(call)?.ceiling,
        ...estimateOf(call, key, false),
      };
      let decision = decideFor(call, predicted, nowMs);
      if (close(decision)) {
        // Near the window's end, a guess is not good enough: count with the model's tokenizer.
        await loading;
        predicted = { ...predicted, ...estimateOf(call, key, true) };
        decision = decideFor(call, predicted, nowMs);
      }
      calls.set(call, predicted);
      // The overflow wall: with predict.compaction on, a call too large for its key's whole
      // window goes on with its conversation compacted, if that makes it fit.
      if (decision.action === "too_large" && atTheWall !== undefined && !compacting.has(call)) {
        compacting.add(call);
        const outcome = await compactor.compact(
          call,
          atTheWall,
          "too_large",
          summaryBudget(call, key, sinceMs),
        );
        if (outcome.kind === "compacted") continue;
        if (outcome.kind === "failed") {
          call.request.log.warn(
            { err: outcome.error, runId: call.run.runId },
            "could not summarize the run's conversation",
          );
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
          deadlineMs: deadlineOf(call, ledger.cached(call.run.runId), options.limitsFor),
        });
        if (
          answer.kind === "unknown" &&
          key.window.known().length > 0 &&
          clock() - sinceMs < UNKNOWN_TO_COORDINATOR_MS
        ) {
          // This gateway has read the key and the coordinator not yet: the reading is on its
          // way there. Deciding here meanwhile would spend the window another gateway spends
          // too; ask again in a moment.
          const how = await pause(call, COORDINATOR_CATCH_UP_MS, options);
          if (how === "shutdown") return refuse(new ShuttingDownError());
          if (how !== "ready") return refuse(waitedTooLong(0));
          continue;
        }
        if (answer.kind !== "unavailable" && answer.kind !== "unknown") {
          const waited = { ms: waitedMs, figures: waitedFor };
          const verdict = await sharedVerdict(call, predicted, answer, waited, decision.figures);
          if (verdict !== undefined) return verdict;
          waitedMs = waited.ms;
          waitedFor = waited.figures;
        }
        // The coordinator could not be asked, or failed while the call waited its turn: decide here.
        sharing = false;
        continue;
      }
      switch (decision.action) {
        case "continue": {
          await resumeIfCheckpointed(call);
          clearTimeout(predicted.ceiling);
          predicted.ceiling = undefined;
          key.window.reserve(call, predicted.need, nowMs);
          call.prediction = predictionOf(
            waitedMs > 0 ? PredictAction.PREDICT_ACTION_WAIT : PredictAction.PREDICT_ACTION_CONTINUE,
            key,
            waitedFor ?? decision.figures,
            predicted,
            { waitedMs, resumeAtMs: 0 },
          );
          return CONTINUE;
        }
        case "too_large":
          return refuse(tooLarge(call, decision.figures));
        case "wait": {
          const waitMs = decision.untilMs - nowMs;
          if (decision.untilMs - sinceMs > maxWaitMs) return refuse(waitedTooLong(decision.untilMs - nowMs));
          waitedFor ??= decision.figures;
          const how = await pause(call, waitMs, options);
          if (how === "shutdown") return refuse(new ShuttingDownError());
          if (how !== "ready") return refuse(waitedTooLong(decision.untilMs - clock()));
          waitedMs += clock() - nowMs;
          continue;
        }
        case "checkpoint":
          if (decision.untilMs - sinceMs > maxWaitMs && config.on_checkpoint === "auto_resume") {
            return refuse(waitedTooLong(decision.untilMs - nowMs));
          }
          return checkpoint(call, predicted, decision, waitedMs);
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
    const { key } = predicted;
    const goOn = (slice: Slice | undefined): Verdict => {
      if (slice !== undefined) predicted.slice = { slice, need: predicted.need };
      key.window.reserve(call, predicted.need, clock());
      clearTimeout(predicted.ceiling);
      predicted.ceiling = undefined;
      call.prediction = predictionOf(
        waited.ms > 0 ? PredictAction.PREDICT_ACTION_WAIT : PredictAction.PREDICT_ACTION_CONTINUE,
        key,
        waited.figures ?? local,
        predicted,
        { waitedMs: waited.ms, resumeAtMs: 0 },
      );
      return CONTINUE;
    };
    switch (answer.kind) {
      case "continue":
        await resumeIfCheckpointed(call);
        return goOn(answer.slice);
      case "too_large":
        return refuse(tooLarge(call, answer.figures));
      case "checkpoint":
        if (answer.untilMs - predicted.sinceMs > maxWaitMs && config.on_checkpoint === "auto_resume") {
          return refuse(waitedTooLong(answer.untilMs - clock()));
        }
        return checkpoint(
          call,
          predicted,
          { action: "checkpoint", untilMs: answer.untilMs, why: answer.why, figures: answer.figures },
          waited.ms,
        );
      case "queued": {
        const nowMs = clock();
        const leftMs = predicted.sinceMs + maxWaitMs - nowMs;
        if (answer.etaMs - nowMs > leftMs) {
          answer.cancel();
          giveBackLate(answer.turn, predicted.need);
          return refuse(waitedTooLong(answer.etaMs - nowMs));
        }
        const turn = await pauseUntil(call, answer.turn, leftMs, options);
        waited.ms += clock() - nowMs;
        waited.figures ??= answer.figures;
        if (turn.how === "ready") {
          await resumeIfCheckpointed(call);
          return goOn(turn.value);
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

  /** Holds the run until the window allows its call; the call parks, with a ceiling. */
  const checkpoint = (
    call: Call,
    predicted: Predicted,
    decision: Extract<Decision, { action: "checkpoint" }>,
    waitedMs: number,
  ): Verdict => {
    const prediction = predictionOf(
      PredictAction.PREDICT_ACTION_CHECKPOINT,
      predicted.key,
      decision.figures,
      predicted,
      {
        waitedMs,
        resumeAtMs: decision.untilMs,
      },
    );
    if (config.on_checkpoint === "auto_resume") scheduleResume(call, decision.untilMs);
    if (predicted.ceiling === undefined) {
      const left = predicted.sinceMs + maxWaitMs - clock();
      predicted.ceiling = setTimeout(
        () => {
          call.giveUp.abort(waitedTooLong(Math.max(0, decision.untilMs - clock())));
        },
        Math.max(0, left),
      );
      predicted.ceiling.unref();
    }
    const trip: Trip = {
      limit: LimitKind.LIMIT_KIND_RATE_LIMIT,
      limitValue: Math.round(decision.figures.limit),
      spentValue: Math.round(decision.figures.needed),
      budgetKey: "",
      period: "",
      crossedByStepId: "",
      callModel: call.view.model,
      prediction,
    };
    return { kind: "trip", trip, action: "hold" };
  };

  /** On this gateway, resumes the run at `atMs` if the checkpoint still holds it then. */
  const scheduleResume = (call: Call, atMs: number): void => {
    const runId = call.run.runId;
    clearTimeout(resumes.get(runId));
    const labels: RunLabels = { tag: call.run.tag, tenant: call.run.tenant };
    const timer = setTimeout(
      () => {
        resumes.delete(runId);
        void resume(runId, labels);
      },
      Math.max(0, atMs - clock()),
    );
    timer.unref();
    resumes.set(runId, timer);
  };

  const resume = async (runId: string, labels: RunLabels): Promise<void> => {
    try {
      await ledger.execute(runId, labels, { type: "ClearCheckpoint", gateway: options.gateway });
    } catch (error) {
      options.log.error({ err: error, runId }, "could not resume a rate-limit checkpoint");
    }
  };

  /**
   * A call that finds the window open while its run is still checkpointed (the gateway
   * that checkpointed it died, or its timer has not fired yet) resumes the run itself.
   */
  const resumeIfCheckpointed = async (call: Call): Promise<void> => {
    if (config.on_checkpoint !== "auto_resume") return;
    const state = ledger.cached(call.run.runId);
    if (state === undefined || !heldByCheckpoint(state)) return;
    clearTimeout(resumes.get(call.run.runId));
    resumes.delete(call.run.runId);
    await resume(call.run.runId, { tag: call.run.tag, tenant: call.run.tenant });
  };

  // The call out to take the first reading of a key, by key id.
  const probes = new Map<string, Call>();
  // Calls waiting for the first reading of a key another call went out to take.
  const firstReadings = new Map<string, { promise: Promise<void>; resolve: () => void }>();
  const firstReading = (keyId: string): Promise<void> => {
    let waiting = firstReadings.get(keyId);
    if (waiting === undefined) {
      let resolve: () => void = () => undefined;
      const promise = new Promise<void>((done) => {
        resolve = done;
      });
      waiting = { promise, resolve };
      firstReadings.set(keyId, waiting);
    }
    return waiting.promise;
  };
  /** The key was read (or said it tells nothing, or its probe ended unread): who waited for it goes on. */
  const readingCame = (keyId: string): void => {
    probes.delete(keyId);
    const waiting = firstReadings.get(keyId);
    if (waiting === undefined) return;
    firstReadings.delete(keyId);
    waiting.resolve();
  };

  // When each key's provider was last said to send figures past their bounds (one warning
  // a minute per key, however many answers carry them).
  const warnedAt = new Map<string, number>();
  const notBelieved = (key: Key, nowMs: number) => (problem: string) => {
    if (nowMs - (warnedAt.get(key.keyId) ?? Number.NEGATIVE_INFINITY) < PROBLEM_EVERY_MS) return;
    if (warnedAt.size >= KEY_IDS_KEPT) warnedAt.clear();
    warnedAt.set(key.keyId, nowMs);
    options.log.warn(
      { keyId: key.keyId, upstream: key.window.upstream, problem },
      "the provider's rate-limit headers past their bounds were not believed (taken as not reported)",
    );
  };

  /** Every answer's rate-limit headers update its key's window; a reading that moved it is an event. */
  const onAnswer = (call: Call, answer: UpstreamAnswer): void => {
    const key = predictedOf(call)?.key ?? keyOf(call);
    const nowMs = clock();
    const reading = refusalOnly(
      readRateLimits(answer.headers, key.names, nowMs, notBelieved(key, nowMs)),
      answer.statusCode,
    );
    if (reading === undefined) {
      key.window.noteUnread();
      readingCame(key.keyId);
      return;
    }
    const worth = key.window.observe(reading, answer.sentAtMs, nowMs);
    readingCame(key.keyId);
    if (!worth) return;
    const envelope = makeEnvelope({
      id: options.newId(),
      runId: "",
      sequence: 0,
      timestampMs: nowMs,
      tag: "",
      payload: {
        $case: "rateLimitObserved",
        value: observed(key, reading, options.gateway, answer.sentAtMs),
      },
    });
    options.keyEvents
      .appendKeyEvent(key.keyId, envelope)
      .catch((error: unknown) =>
        options.log.warn({ err: error, keyId: key.keyId }, "could not record a rate-limit reading"),
      );
  };

  /** A 429 that slipped through: wait what the provider asked (or the window says), then send again. */
  const retryAfter = (call: Call, answer: UpstreamAnswer, attempt: number): number | undefined => {
    const predicted = predictedOf(call);
    if (predicted === undefined || attempt > config.max_retries) return undefined;
    estimator.slipped();
    const nowMs = clock();
    const asked = readRateLimits(answer.headers, predicted.key.names, nowMs)?.retryAfterMs;
    predicted.key.window.release(call);
    const decision = decideFor(call, predicted, nowMs);
    const window =
      decision.action === "wait" || decision.action === "checkpoint" ? decision.untilMs - nowMs : 0;
    const waitMs = Math.max(
      asked ?? 0,
      window,
      asked === undefined && window === 0 ? BACKOFF_MS * 2 ** (attempt - 1) : 0,
    );
    if (decision.action === "too_large" || nowMs + waitMs - predicted.sinceMs > maxWaitMs) return undefined;
    predicted.key.window.reserve(call, predicted.need, nowMs + waitMs);
    return waitMs;
  };

  const feature: GatewayFeature = async (app) => {
    app.pipeline.beforeForward.push(beforeForward);
    app.pipeline.upstreamAnswered.push(onAnswer);
    app.pipeline.retry = retryAfter;
    app.pipeline.afterOutcome.push((call, _cost, observedOutcome) => {
      const predicted = calls.get(call);
      if (predicted === undefined) return;
      predicted.key.window.release(call);
      if (predicted.slice !== undefined) {
        const { slice, need } = predicted.slice;
        predicted.slice = undefined;
        options.shared?.settle(slice, need, chargedOf(call, predicted, observedOutcome));
      }
      const usage = observedOutcome.usage;
      if (usage?.reported !== true || observedOutcome.status >= 300) return;
      estimator.record(predicted.features, predicted.estimate, {
        input: Number(usage.inputTokens),
        output: Number(usage.outputTokens),
        latencyMs: observedOutcome.latencyMs,
      });
    });
    app.pipeline.callEnded.push((call) => {
      // A probe that ended before its key was read (refused, its client gone) lets its waiters go.
      for (const [keyId, probe] of probes) if (probe === call) readingCame(keyId);
      const predicted = calls.get(call);
      if (predicted === undefined) return;
      predicted.key.window.release(call);
      readingCame(predicted.key.keyId);
      if (predicted.slice !== undefined) {
        // Never sent (refused, parked and left, or the log would not start it): nothing was spent.
        options.shared?.settle(predicted.slice.slice, predicted.slice.need, NOTHING);
        predicted.slice = undefined;
      }
      clearTimeout(predicted.ceiling);
      calls.delete(call);
    });
  };

  /** A reading another gateway recorded: the window it read becomes this gateway's too. */
  const learn = (envelope: StoredEnvelope): void => {
    if (!isKnown(envelope) || envelope.payload.$case !== "rateLimitObserved") return;
    const observed = envelope.payload.value;
    if (observed.gateway === options.gateway || !/^[0-9a-f]{16}$/.test(observed.keyId)) return;
    const window = windows.of(observed.keyId, observed.upstream);
    window.learn(
      readingOfRecorded(observed, envelope.timestampMs),
      Number(observed.asOfMs) || envelope.timestampMs,
      envelope.timestampMs,
    );
    readingCame(observed.keyId);
  };
  let watch: Watch | undefined;

  return {
    feature,
    roomOf,
    async start() {
      const last = await options.keyEvents.lastOnSubjects([
        options.keyEvents.subjects.ofKeyType("RateLimitObserved"),
      ]);
      for (const { envelope } of last) learn(envelope);
      watch = await options.keyEvents.follow(
        ["RateLimitObserved"],
        (event) => {
          const envelope = options.keyEvents.decode(event);
          if (envelope !== undefined) learn(envelope);
        },
        { keys: true },
      );
    },
    async close() {
      for (const timer of resumes.values()) clearTimeout(timer);
      resumes.clear();
      await watch?.stop();
    },
  };
}

const ESTIMATOR_BASE = { alpha: 0.3, defaultOutput: 1_024, maxRuns: 10_000 };

function refuse(error: GatewayError): Verdict {
  return { kind: "refuse", error };
}

/** Whether a call let through is close enough to the window's end to be counted exactly. */
function close(decision: Decision): boolean {
  if (decision.action !== "continue") return decision.action !== "too_large";
  const { dimension, remaining, needed } = decision.figures;
  return dimension !== undefined && dimension !== "requests" && remaining - needed < needed * CLOSE_SHARE;
}

/**
 * What a call takes from each dimension of its key's window: a request, its estimate plus
 * margin in tokens; where the input and output windows are apart (Anthropic's), they take
 * the input and the rest, and the combined "tokens" figure (the more restrictive of the
 * two) is not asked for the sum.
 */
function needOf(estimate: Estimate, names: RateLimitHeaderNames): Need {
  const split = names.dimensions.inputTokens !== undefined || names.dimensions.outputTokens !== undefined;
  return {
    requests: 1,
    tokens: split ? 0 : estimate.need,
    inputTokens: estimate.input,
    outputTokens: Math.max(0, estimate.need - estimate.input),
  };
}

/** What a call takes for certain: its input, and its output cap when it sets one (its estimated output when not). */
function floorOf(estimate: Estimate, features: CallFeatures, names: RateLimitHeaderNames): Need {
  const output = features.maxOutput ?? estimate.output;
  const split = names.dimensions.inputTokens !== undefined || names.dimensions.outputTokens !== undefined;
  return {
    requests: 1,
    tokens: split ? 0 : estimate.input + output,
    inputTokens: estimate.input,
    outputTokens: output,
  };
}

/** The run's deadline: the end of its max_minutes window, when it has one. */
function deadlineOf(
  call: Call,
  state: RunState | undefined,
  limitsFor: (tag: string) => ConfiguredLimits,
): number | undefined {
  if (state === undefined) return undefined;
  const limits = windowLimits(limitsFor(state.tag || call.run.tag), state);
  if (limits.maxMinutes <= 0 || state.window.startedMs <= 0) return undefined;
  return state.window.startedMs + limits.maxMinutes * 60_000;
}

/** The header names an upstream writes its window in: configured per origin, else by the API's family. */
function headerNames(config: PredictConfig, upstream: string, call: Call): RateLimitHeaderNames {
  const configured = config.headers[upstream];
  if (configured === "openai") return OPENAI_HEADERS;
  if (configured === "anthropic") return ANTHROPIC_HEADERS;
  if (configured !== undefined) {
    const dimension = (d: { limit: string; remaining: string; reset: string } | undefined) =>
      d === undefined
        ? undefined
        : {
            limit: d.limit.toLowerCase(),
            remaining: d.remaining.toLowerCase(),
            reset: d.reset.toLowerCase(),
          };
    const dimensions: Partial<Record<Dimension, { limit: string; remaining: string; reset: string }>> = {};
    for (const [name, key] of [
      ["requests", "requests"],
      ["tokens", "tokens"],
      ["inputTokens", "input_tokens"],
      ["outputTokens", "output_tokens"],
    ] as const) {
      const headers = dimension(configured[key]);
      if (headers !== undefined) dimensions[name] = headers;
    }
    return { dimensions, resetFormat: configured.reset_format };
  }
  return call.shape.family === "anthropic" ? ANTHROPIC_HEADERS : OPENAI_HEADERS;
}

const DIMENSION_NAMES: Readonly<Record<Dimension, string>> = {
  requests: "requests",
  tokens: "tokens",
  inputTokens: "input_tokens",
  outputTokens: "output_tokens",
};

function predictionOf(
  action: PredictAction,
  key: Key,
  figures: Figures,
  predicted: Pick<Predicted, "estimate" | "features">,
  at: { waitedMs: number; resumeAtMs: number },
): Prediction {
  const { estimate } = predicted;
  return {
    action,
    keyId: key.keyId,
    dimension: figures.dimension === undefined ? "" : DIMENSION_NAMES[figures.dimension],
    limit: Math.round(figures.limit),
    remaining: Math.round(figures.remaining),
    needed: Math.round(figures.needed),
    resetAtMs: Math.round(figures.resetAtMs),
    estimatedInputTokens: estimate.input,
    estimatedOutputTokens: estimate.output,
    estimatedTotalTokens: estimate.total,
    sigma: estimate.sigma,
    k: estimate.k,
    waitedMs: Math.round(at.waitedMs),
    resumeAtMs: Math.round(at.resumeAtMs),
    exactInput: predicted.features.exact,
  };
}

function observed(key: Key, reading: RateLimitReading, gateway: string, asOfMs: number): RateLimitObserved {
  const window = (dimension: Dimension): RateWindow => {
    const read = reading[dimension];
    return read === undefined
      ? { reported: false, limit: 0, remaining: 0, resetAtMs: 0 }
      : {
          reported: true,
          limit: Math.round(read.limit ?? 0),
          remaining: Math.round(read.remaining),
          resetAtMs: Math.round(read.resetAtMs ?? 0),
        };
  };
  return {
    keyId: key.keyId,
    upstream: key.window.upstream,
    requests: window("requests"),
    tokens: window("tokens"),
    inputTokens: window("inputTokens"),
    outputTokens: window("outputTokens"),
    retryAfterMs: Math.round(reading.retryAfterMs ?? 0),
    gateway,
    asOfMs: Math.round(asOfMs),
  };
}

function tooLarge(call: Call, figures: Figures): GatewayError {
  const what =
    figures.dimension === "inputTokens"
      ? "input tokens"
      : figures.dimension === "outputTokens"
        ? "output tokens"
        : figures.dimension;
  return new TooLargeForRateLimitError(
    `This call to ${call.view.model} needs about ${figures.needed} ${what} of its API key's rate-limit window, which holds ${figures.limit} in all: no wait can make room for it. Send less (a shorter conversation, a lower max_tokens), or use a key with a larger limit.`,
  );
}

function waitedTooLong(retryAfterMs: number): GatewayError {
  return new RateLimitWaitExceededError(
    `The API key's rate-limit window will not have room for this call for another ${Math.ceil(retryAfterMs / 1_000)} s, past the longest Holdfast waits (predict.max_wait_s). Retry after that.`,
    retryAfterMs,
  );
}

const NOTHING: Need = Object.freeze({ requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 });

/**
 * What the provider counted of a call against its key's window, as far as the gateway can
 * tell: nothing for a refusal it answered before doing the work (a 429, a 4xx); for an
 * answer, a request, its input (Anthropic counts no cache reads) and its output cap (or
 * its output, when larger or uncapped): both providers take the cap when they admit a call,
 * and what they give back later, if anything, is left to the next readings. When no usage
 * came back (an error, a cut connection), what the call was sure to take.
 */
function chargedOf(
  call: Call,
  predicted: Predicted,
  observed: {
    usage:
      | { reported: boolean; inputTokens: number; outputTokens: number; cachedInputTokens: number }
      | undefined;
    status: number;
  },
): Need {
  const { status, usage } = observed;
  if (status === 429 || (status >= 400 && status < 500)) return NOTHING;
  if (usage?.reported !== true || status < 200 || status >= 300) return predicted.floor;
  const input =
    call.shape.family === "anthropic"
      ? Math.max(0, usage.inputTokens - usage.cachedInputTokens)
      : usage.inputTokens;
  const output = Math.max(usage.outputTokens, predicted.features.maxOutput ?? 0);
  return {
    requests: 1,
    tokens: predicted.need.tokens > 0 ? input + output : 0,
    inputTokens: predicted.need.inputTokens > 0 ? input : 0,
    outputTokens: predicted.need.outputTokens > 0 ? output : 0,
  };
}

// An integer priority, higher first: the header's, else the run's tag's.
const PRIORITY = /^[+-]?\d{1,4}$/;

function priorityOf(call: Call, byTag: Readonly<Record<string, number>>): number | GatewayError {
  const header = call.request.headers["x-holdfast-priority"];
  if (header === undefined) return byTag[call.run.tag] ?? 0;
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || !PRIORITY.test(value.trim()) || Math.abs(Number(value)) > 1_000) {
    return new InvalidRequestError(
      `X-Holdfast-Priority must be an integer from -1000 to 1000 (higher is served first), not ${JSON.stringify(String(header)).slice(0, 80)}.`,
      { param: "X-Holdfast-Priority" },
    );
  }
  return Number(value);
}

/**
 * A reading as an answer of this status can give it: a retry-after asks to wait only on a
 * refusal (429, 503). On an answer the provider served it is no reading: believed, one 200
 * carrying `retry-after: 86400` kept every call of its key waiting for a day, across
 * restarts (the reading is recorded), with no call left to correct it.
 */
export function refusalOnly(
  reading: RateLimitReading | undefined,
  status: number,
): RateLimitReading | undefined {
  if (reading?.retryAfterMs === undefined || status === 429 || status === 503) return reading;
  const { retryAfterMs: _unasked, ...rest } = reading;
  return Object.keys(rest).length > 0 ? rest : undefined;
}
