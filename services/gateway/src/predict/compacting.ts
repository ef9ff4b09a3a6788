import type { Config } from "@holdfast/config";
import type { RunCommand, RunState } from "@holdfast/events";
import { decide } from "@holdfast/predict";
import { CompactionMode } from "@holdfast/proto";
import type { Ledger } from "@holdfast/runs";
import { Compactor, type SummaryBudget } from "../compaction/compactor.js";
import type { Amendment, Call, UpstreamAnswer } from "../pipeline/hooks.js";
import { pause, type WaitingOptions } from "../pipeline/wait.js";
import type { Key, Keys } from "./key.js";
import { summaryMaxInputTokens, summaryNeed, summaryStep } from "./policy.js";

export interface CompactingOptions {
  config: Config["predict"];
  ledger: Ledger<RunState, RunCommand>;
  gateway: string;
  keys: Keys;
  maxWaitMs: number;
  clock: () => number;
  /** How a summary call waits for its window: in place, with the keepalives of a parked call. */
  waiting: Pick<WaitingOptions, "keepaliveMs" | "keepalive1xx" | "shutdown">;
  /** Longest a compaction's summary call may take. */
  summaryTimeoutMs: number;
  /** The most of a summary model's answer read (gateway.max_answer_bytes). */
  maxAnswerBytes: number;
  /** A summary call's answer, read like any other (its rate-limit headers update its key's window). */
  answered: (call: Call, answer: UpstreamAnswer) => void;
}

/**
 * When prediction compacts a call (the compaction itself is `../compaction/`): a call too
 * large for its key's whole window, with `predict.compaction` on; the first call after an
 * operator's `resume --compact`; and every call of a compacted run, sent compacted the same
 * way. A summary call is paced by its key's window like any other call.
 */
export class Compacting {
  private readonly compactor: Compactor;
  /** How a call too large for its whole window is compacted; undefined: it is refused. */
  private readonly atTheWall:
    | CompactionMode.COMPACTION_MODE_SUMMARIZE
    | CompactionMode.COMPACTION_MODE_TRUNCATE
    | undefined;
  // Calls a compaction was tried for (once a call).
  private readonly tried = new WeakSet<Call>();
  /** Calls the run's recorded compactions were applied to (once each). */
  private readonly recordedApplied = new WeakSet<Call>();

  constructor(private readonly options: CompactingOptions) {
    const { config } = options;
    this.compactor = new Compactor({
      keep: config.compaction_keep,
      summaryModel: config.summary_model,
      ledger: options.ledger,
      gateway: options.gateway,
      timeoutMs: options.summaryTimeoutMs,
      maxAnswerBytes: options.maxAnswerBytes,
    });
    this.atTheWall =
      config.compaction === "summarize"
        ? CompactionMode.COMPACTION_MODE_SUMMARIZE
        : config.compaction === "truncate"
          ? CompactionMode.COMPACTION_MODE_TRUNCATE
          : undefined;
  }

  /**
   * A compacted run's call goes compacted the same way; and the first call after an
   * operator's resume --compact compacts the run's conversation as asked (when asked
   * again, once the body the recorded compactions make is sent). The body to send
   * instead, as the pipeline's rewrite; undefined when the call goes as it is.
   */
  async asRecorded(call: Call): Promise<Rewrite | undefined> {
    const state = this.options.ledger.cached(call.run.runId);
    if (state === undefined) return undefined;
    // Once per call: applied again to the body they made, the recorded compactions could
    // keep matching (a summary that reads like the message it replaced; an agent that
    // repeats a turn) and strip what the agent sent anew.
    if (!this.recordedApplied.has(call)) {
      this.recordedApplied.add(call);
      const recorded = this.compactor.applyRecorded(call, state.compactions);
      if (recorded !== undefined) return { kind: "rewrite", body: recorded };
    }
    const asked = state.compactNext;
    if (
      (asked !== CompactionMode.COMPACTION_MODE_TRUNCATE &&
        asked !== CompactionMode.COMPACTION_MODE_SUMMARIZE) ||
      this.tried.has(call)
    )
      return undefined;
    this.tried.add(call);
    const outcome = await this.compactor.compact(
      call,
      asked,
      "operator",
      this.summaryBudget(call, this.options.keys.of(call), this.options.clock()),
    );
    if (outcome.kind === "compacted") return { kind: "rewrite", body: outcome.body, json: outcome.json };
    if (outcome.kind === "failed") warnFailed(call, outcome.error);
    return undefined;
  }

  /**
   * The overflow wall: with predict.compaction on, a call too large for its key's whole
   * window goes on with its conversation compacted, if that makes it fit. The body to send
   * instead (the call is then decided again), as the pipeline's rewrite; undefined when it
   * was not compacted.
   */
  async atWall(call: Call, key: Key, sinceMs: number): Promise<Rewrite | undefined> {
    if (this.atTheWall === undefined || this.tried.has(call)) return undefined;
    this.tried.add(call);
    const outcome = await this.compactor.compact(
      call,
      this.atTheWall,
      "too_large",
      this.summaryBudget(call, key, sinceMs),
    );
    if (outcome.kind === "compacted") return { kind: "rewrite", body: outcome.body, json: outcome.json };
    if (outcome.kind === "failed") warnFailed(call, outcome.error);
    return undefined;
  }

  /**
   * What a compaction's summary may take of the call's key window: each summary call at
   * most half the window's tokens, sent when the window has room for it (waiting in place,
   * within max_wait_s), its answer read like any other.
   */
  private summaryBudget(call: Call, key: Key, sinceMs: number): SummaryBudget {
    const { clock, maxWaitMs } = this.options;
    return {
      maxInputTokens: summaryMaxInputTokens(key.window, clock()),
      ready: async (tokens) => {
        const need = summaryNeed(tokens);
        for (;;) {
          const now = clock();
          const decision = decide({
            window: key.window,
            need,
            nowMs: now,
            waitThresholdMs: Number.POSITIVE_INFINITY,
          });
          const step = summaryStep(decision, now, { sinceMs, maxWaitMs });
          if (step.kind === "go") return true;
          if (step.kind === "skip") return false;
          if ((await pause(call, step.waitMs, this.options.waiting)) !== "ready") return false;
        }
      },
      answered: (answer) => this.options.answered(call, answer),
    };
  }
}

/** A body to send instead, as the pipeline applies it. */
type Rewrite = Extract<Amendment, { kind: "rewrite" }>;

function warnFailed(call: Call, error: unknown): void {
  call.request.log.warn({ err: error, runId: call.run.runId }, "could not summarize the run's conversation");
}
