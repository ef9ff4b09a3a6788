import { createHash } from "node:crypto";
import { isRecord } from "./json.js";
import type { UsageReport } from "./usage.js";

/**
 * Where an API shape keeps a request's conversation, and how it is made smaller: what a
 * compaction must keep (system prompts), where the part it keeps may start (never at a
 * tool's result, which needs the call before it), the message that stands for the part
 * it drops, and the request that asks a model to summarize it.
 */
export interface ConversationShape {
  /** The conversation's messages, oldest first; undefined when the body has no list of them. */
  messagesOf(body: Record<string, unknown>): readonly unknown[] | undefined;
  withMessages(body: Record<string, unknown>, messages: readonly unknown[]): Record<string, unknown>;
  /** Kept however old (a system or developer prompt). */
  pinned(message: unknown): boolean;
  /** The part a compaction keeps may start with this message. */
  canStart(message: unknown): boolean;
  /** One message as a line of the transcript a summary is written from. */
  transcriptLine(message: unknown): string;
  /** The message that stands for the dropped part: its summary. */
  summaryMessage(summary: string): unknown;
  /** The request asking `model` to summarize a transcript (sent to the shape's own path). */
  summaryRequest(
    model: string,
    instructions: string,
    transcript: string,
    maxTokens: number,
  ): Record<string, unknown>;
  /** The summary's text and usage in the answer to that request; undefined when it has none. */
  summaryOf(json: unknown): { text: string; usage: UsageReport } | undefined;
}

/** A conversation cut in three: pinned prompts at its head, the part to replace, the part kept. */
export interface CompactionPlan {
  /** Where the replaceable part starts (after the leading pinned prompts) and ends. */
  readonly start: number;
  readonly end: number;
  readonly messages: readonly unknown[];
}

/**
 * What a compaction of `messages` would replace, keeping the leading pinned prompts and at
 * least `keep` messages at the end (more when the cut would land on a tool's result);
 * undefined when there is nothing to replace.
 */
export function planCompaction(
  conversation: ConversationShape,
  messages: readonly unknown[],
  keep: number,
): CompactionPlan | undefined {
  let start = 0;
  while (start < messages.length && conversation.pinned(messages[start])) start++;
  let end = messages.length - keep;
  while (end > start && !conversation.canStart(messages[end])) end--;
  if (end <= start) return undefined;
  return { start, end, messages };
}

/** The digest a compaction records of the messages it replaced, and matches later conversations by. */
export function prefixHash(messages: readonly unknown[]): string {
  return createHash("sha256").update(JSON.stringify(messages)).digest("hex").slice(0, 32);
}

/**
 * A later request of a compacted run, sent compacted the same way: when its conversation
 * (after its leading pinned prompts) starts with the `count` messages whose digest is
 * `hash`, they are replaced by `replacement`. Undefined when it does not start with them.
 */
export function applyCompaction(
  conversation: ConversationShape,
  body: Record<string, unknown>,
  compaction: { readonly hash: string; readonly count: number; readonly replacement: readonly unknown[] },
): Record<string, unknown> | undefined {
  const messages = conversation.messagesOf(body);
  if (messages === undefined) return undefined;
  let start = 0;
  while (start < messages.length && conversation.pinned(messages[start])) start++;
  if (messages.length - start < compaction.count) return undefined;
  const prefix = messages.slice(start, start + compaction.count);
  if (prefixHash(prefix) !== compaction.hash) return undefined;
  return conversation.withMessages(body, [
    ...messages.slice(0, start),
    ...compaction.replacement,
    ...messages.slice(start + compaction.count),
  ]);
}

/** The transcript of messages a summary is written from, one line (or paragraph) a message. */
export function transcriptOf(conversation: ConversationShape, messages: readonly unknown[]): string {
  return messages.map((message) => conversation.transcriptLine(message)).join("\n\n");
}

export const SUMMARY_INSTRUCTIONS =
  "You compact an AI agent's conversation so it can continue with less context. Summarize the transcript below for the agent itself: keep every fact, name, number, identifier, decision, instruction, tool result and open task it may need later, exactly as written; drop pleasantries and repetition. Write plain text, no preamble.";

/** The text parts of a message's content, and any other part as its JSON. */
export function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return content === undefined ? "" : JSON.stringify(content);
  return content
    .map((part) => (isRecord(part) && typeof part.text === "string" ? part.text : JSON.stringify(part)))
    .join("\n");
}
