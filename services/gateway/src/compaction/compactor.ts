import { boundText, type Compaction, type RunCommand, type RunState } from "@holdfast/events";
import { CHARS_PER_TOKEN } from "@holdfast/predict";
import { CompactionMode, type RunCompacted } from "@holdfast/proto";
import {
  applyCompaction,
  NO_USAGE,
  planCompaction,
  prefixHash,
  redactSecretsDeep,
  SUMMARY_INSTRUCTIONS,
  transcriptOf,
  type UsageReport,
} from "@holdfast/providers";
import type { Ledger, RunLabels } from "@holdfast/runs";
import type { Call, UpstreamAnswer } from "../pipeline/hooks.js";
import { readAnswer } from "../upstream/answer.js";
import { forwardHeaders, withCredential } from "../upstream/upstream.js";

export interface CompactorOptions {
  /** Messages at the end of a conversation a compaction keeps as they are. */
  keep: number;
  /** The model that writes summaries; empty: the call's own. */
  summaryModel: string;
  ledger: Ledger<RunState, RunCommand>;
  gateway: string;
  /** Longest a summary call may take. */
  timeoutMs: number;
  /** The most of a summary model's answer read, decompressed (gateway.max_answer_bytes). */
  maxAnswerBytes: number;
}

/** The most tokens a summary (or each part of one) is written in. */
const SUMMARY_MAX_TOKENS = 512;
// A summary call is counted a fifth larger than four characters a token, and tried this often.
const ESTIMATE_SLACK = 1.2;
const SUMMARY_ATTEMPTS = 3;
// The most characters of summary a compaction records (its RunCompacted event carries it):
// many times what the summary model is asked for, and far inside what an event may take.
const MAX_SUMMARY_CHARS = 64 * 1024;

export type CompactionOutcome =
  /** The body to send instead, and its JSON (what the event measured). */
  | {
      readonly kind: "compacted";
      readonly event: RunCompacted;
      readonly body: Record<string, unknown>;
      readonly json: Buffer;
    }
  /** Nothing older than the messages kept (or no conversation to compact). */
  | { readonly kind: "nothing" }
  /** The summary could not be written: the call goes on as it was. */
  | { readonly kind: "failed"; readonly error: unknown };

/**
 * Makes a run's conversation smaller (agentpause's overflow wall, handled in the gateway):
 * the oldest messages (after the system prompts, before the last `keep`) are dropped, or
 * replaced by a summary one call to the summary model writes of them. The compaction is
 * an event of the run (`RunCompacted`, with the sizes before and after and what stands for
 * the dropped part), recorded before the call goes on; every later call of the run whose
 * conversation starts with the same messages is sent compacted the same way, so an agent
 * that keeps its whole history goes on slim without knowing.
 */
export class Compactor {
  constructor(private readonly options: CompactorOptions) {}

  /**
   * The call's body compacted as the run's recorded compactions say (those its conversation
   * starts with); undefined when none applies.
   */
  applyRecorded(call: Call, compactions: readonly Compaction[]): Record<string, unknown> | undefined {
    if (compactions.length === 0) return undefined;
    let body = call.body.value as Record<string, unknown>;
    let changed = false;
    for (const compaction of compactions) {
      const next = applyCompaction(call.shape.conversation, body, {
        hash: compaction.prefixHash,
        count: compaction.prefixMessages,
        replacement: JSON.parse(compaction.replacementJson) as unknown[],
      });
      if (next === undefined) continue;
      body = next;
      changed = true;
    }
    return changed ? body : undefined;
  }

  /** Compacts the call's conversation and records it: the body to send instead. */
  async compact(
    call: Call,
    mode: CompactionMode.COMPACTION_MODE_TRUNCATE | CompactionMode.COMPACTION_MODE_SUMMARIZE,
    why: "too_large" | "operator",
    budget: SummaryBudget = UNBOUNDED,
  ): Promise<CompactionOutcome> {
    const conversation = call.shape.conversation;
    const body = call.body.value as Record<string, unknown>;
    const messages = conversation.messagesOf(body);
    const plan =
      messages === undefined ? undefined : planCompaction(conversation, messages, this.options.keep);
    if (messages === undefined) return { kind: "nothing" };
    if (plan === undefined) {
      // An operator asked: that there was nothing to drop is recorded, and the ask is done.
      if (why === "operator")
        await this.record(
          call,
          this.eventOf(call, mode, why, messages.length, [], [], "", NO_USAGE, call.upstreamBody.length),
        );
      return { kind: "nothing" };
    }
    const dropped = messages.slice(plan.start, plan.end);
    let replacement: unknown[] = [];
    let summaryModel = "";
    let summaryUsage: UsageReport = NO_USAGE;
    if (mode === CompactionMode.COMPACTION_MODE_SUMMARIZE) {
      summaryModel = this.options.summaryModel || call.model;
      try {
        const summary = await this.summarize(call, summaryModel, dropped, budget);
        replacement = [conversation.summaryMessage(summary.text)];
        summaryUsage = summary.usage;
      } catch (error) {
        return { kind: "failed", error };
      }
    }
    const compacted = conversation.withMessages(body, [
      ...messages.slice(0, plan.start),
      ...replacement,
      ...messages.slice(plan.end),
    ]);
    const json = Buffer.from(JSON.stringify(compacted));
    const after = (call.shape.upstreamBody(compacted, call.view, json) ?? json).length;
    const event = this.eventOf(
      call,
      mode,
      why,
      messages.length,
      dropped,
      replacement,
      summaryModel,
      summaryUsage,
      after,
    );
    await this.record(call, event);
    return { kind: "compacted", event, body: compacted, json };
  }

  private eventOf(
    call: Call,
    mode: CompactionMode,
    why: string,
    messages: number,
    dropped: readonly unknown[],
    replacement: readonly unknown[],
    summaryModel: string,
    summaryUsage: UsageReport,
    after: number,
  ): RunCompacted {
    const before = call.upstreamBody.length;
    return redactSecretsDeep(
      {
        mode,
        why,
        stepId: call.stepId,
        messagesBefore: messages,
        messagesAfter: messages - dropped.length + replacement.length,
        bytesBefore: before,
        bytesAfter: after,
        tokensBefore: Math.ceil(before / CHARS_PER_TOKEN),
        tokensAfter: Math.ceil(after / CHARS_PER_TOKEN),
        prefixHash: prefixHash(dropped),
        prefixMessages: dropped.length,
        replacementJson: JSON.stringify(replacement),
        summaryModel,
        summaryUsage: {
          reported: summaryUsage.reported,
          inputTokens: summaryUsage.inputTokens,
          outputTokens: summaryUsage.outputTokens,
          cachedInputTokens: summaryUsage.cachedInputTokens,
          cacheWriteTokens: summaryUsage.cacheWriteTokens,
          reasoningTokens: summaryUsage.reasoningTokens,
        },
        gateway: this.options.gateway,
      },
      call.secrets,
    );
  }

  /** Records the compaction as an event of the run, before the call that it was for goes on. */
  private async record(call: Call, event: RunCompacted): Promise<void> {
    const labels: RunLabels = { tag: call.run.tag, tenant: call.run.tenant };
    await this.options.ledger.execute(call.run.runId, labels, { type: "CompactRun", compaction: event });
  }

  /**
   * The summary of the dropped messages, by the summary model on the call's own upstream
   * with its own key: in one call, or, when their transcript is larger than the key's
   * window can take in one call (the overflow wall), in parts that each fit, one after
   * another as the window allows, their summaries joined.
   */
  private async summarize(
    call: Call,
    model: string,
    dropped: readonly unknown[],
    budget: SummaryBudget,
  ): Promise<{ text: string; usage: UsageReport }> {
    const conversation = call.shape.conversation;
    const maxChars = Math.max(1_000, (budget.maxInputTokens - SUMMARY_MAX_TOKENS) * CHARS_PER_TOKEN);
    const parts = chunks(transcriptOf(conversation, dropped), maxChars);
    const texts: string[] = [];
    let usage: UsageReport = NO_USAGE;
    for (const [i, part] of parts.entries()) {
      const transcript = parts.length === 1 ? part : `(part ${i + 1} of ${parts.length})\n${part}`;
      // About four characters a token, with room for the instructions and a tokenizer that counts more.
      const tokens =
        Math.ceil(((transcript.length + SUMMARY_INSTRUCTIONS.length) / CHARS_PER_TOKEN) * ESTIMATE_SLACK) +
        SUMMARY_MAX_TOKENS;
      const summary = await this.summaryCall(call, model, transcript, tokens, budget);
      texts.push(summary.text);
      usage = addUsage(usage, summary.usage);
    }
    // A summary model that writes more than it was asked for is cut: the event carries it.
    return { text: boundText(texts.join("\n\n"), MAX_SUMMARY_CHARS), usage };
  }

  /** One summary call, sent when the window has room for it, again after a 429 (its reading is the window's). */
  private async summaryCall(
    call: Call,
    model: string,
    transcript: string,
    tokens: number,
    budget: SummaryBudget,
  ): Promise<{ text: string; usage: UsageReport }> {
    for (let attempt = 1; ; attempt++) {
      if (!(await budget.ready(tokens)))
        throw new Error("the key's window had no room for the summary in time");
      const answer = await this.summaryAttempt(call, model, transcript, budget);
      if (answer !== "refused") return answer;
      if (attempt >= SUMMARY_ATTEMPTS) throw new Error(`the summary model answered 429 ${attempt} times`);
    }
  }

  private async summaryAttempt(
    call: Call,
    model: string,
    transcript: string,
    budget: SummaryBudget,
  ): Promise<{ text: string; usage: UsageReport } | "refused"> {
    const conversation = call.shape.conversation;
    const request = conversation.summaryRequest(model, SUMMARY_INSTRUCTIONS, transcript, SUMMARY_MAX_TOKENS);
    const bytes = Buffer.from(JSON.stringify(request));
    const headers = withCredential(
      forwardHeaders(call.request.headers, bytes.length),
      call.credentialHeaders,
    );
    headers["content-type"] = "application/json";
    const sentAtMs = Date.now();
    const answered = await call.upstream.request({
      path: call.shape.upstreamPath,
      method: "POST",
      headers,
      body: bytes,
      signal: AbortSignal.any([call.signal, AbortSignal.timeout(this.options.timeoutMs)]),
    });
    budget.answered({ statusCode: answered.statusCode, headers: answered.headers, sentAtMs });
    const { text } = await readAnswer(answered.body, answered.headers, this.options.maxAnswerBytes);
    if (answered.statusCode === 429) return "refused";
    if (answered.statusCode >= 300) {
      throw new Error(`the summary model answered ${answered.statusCode}: ${text.slice(0, 200)}`);
    }
    const summary = conversation.summaryOf(parseJson(text));
    if (summary === undefined) throw new Error("the summary model's answer had no text");
    return summary;
  }
}

/**
 * What a summary may take of the key's window: the most input one summary call may send,
 * whether the window has room for one of `tokens` (waiting for it, within the call's
 * limits), and where the summary call's answer goes (its rate-limit headers are the
 * window's news like any answer's).
 */
export interface SummaryBudget {
  readonly maxInputTokens: number;
  ready(tokens: number): Promise<boolean>;
  answered(answer: UpstreamAnswer): void;
}

const UNBOUNDED: SummaryBudget = {
  maxInputTokens: Number.POSITIVE_INFINITY,
  ready: async () => true,
  answered: () => undefined,
};

/** Text cut into parts of at most `max` characters, at a paragraph break where one is near. */
function chunks(text: string, max: number): string[] {
  const parts: string[] = [];
  let rest = text;
  while (rest.length > max) {
    const brk = rest.lastIndexOf("\n\n", max);
    const at = brk > max / 2 ? brk : max;
    parts.push(rest.slice(0, at));
    rest = rest.slice(at).replace(/^\n+/, "");
  }
  if (rest.length > 0) parts.push(rest);
  return parts;
}

function addUsage(a: UsageReport, b: UsageReport): UsageReport {
  return {
    reported: a.reported || b.reported,
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cachedInputTokens: a.cachedInputTokens + b.cachedInputTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
    reasoningTokens: a.reasoningTokens + b.reasoningTokens,
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
