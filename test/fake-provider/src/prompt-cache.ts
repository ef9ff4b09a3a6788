import { digest, stableJson } from "./hash.js";
import type { ChatMessage } from "./reply.js";

// OpenAI caches prompts in blocks; the fake uses 64-token blocks so small test prompts can hit.
const BLOCK_TOKENS = 64;
// Anthropic does not cache a prefix below a model's minimum (1,024 tokens and up); the fake's
// minimum is one OpenAI block, for the same reason.
const MIN_BREAKPOINT_TOKENS = BLOCK_TOKENS;

/** `tokens` rounded down to whole cache blocks, as OpenAI reports cached tokens. */
export function wholeBlocks(tokens: number): number {
  return tokens - (tokens % BLOCK_TOKENS);
}

/** One piece of a prompt in the order the model reads it, for Anthropic's cache. */
export interface PromptSegment {
  /** What the segment says: prompts share a prefix only where they agree on every segment of it. */
  readonly value: unknown;
  readonly tokens: number;
  /** Marked with `cache_control`: the prefix ending here is written to the cache. */
  readonly breakpoint: boolean;
}

/** What a prompt read from the cache and wrote to it, in tokens. */
export interface CacheUse {
  readonly read: number;
  readonly written: number;
}

/**
 * A per-API-key model of the providers' prompt caches. OpenAI's (`serve`): a prompt whose messages
 * extend an earlier prompt of the same key reads that earlier prompt's tokens, in whole blocks.
 * Anthropic's (`serveBreakpoints`): a prompt writes the prefix ending at each of its
 * `cache_control` breakpoints, and a later prompt reads the longest written prefix it starts with.
 */
export class PromptCache {
  // Per key, the hash of each cached prefix (chained piece by piece, so every prefix of a new
  // prompt is looked up in one pass) to its token count.
  readonly #prompts = new Map<string, Map<string, number>>();

  /** Bounds memory when a benchmark sends many distinct prompts with one key. */
  constructor(private readonly maxPromptsPerKey = 10_000) {}

  /** Returns how many of this prompt's tokens were cached, then caches the prompt. */
  serve(apiKey: string, messages: readonly ChatMessage[], promptTokens: number): number {
    const prompts = this.#promptsOf(apiKey);
    let chain = "";
    let cached = 0;
    for (const message of messages) {
      // Looked up before each message joins the chain, so only a strict prefix can match.
      cached = prompts.get(chain) ?? cached;
      chain = digest(chain, stableJson(message));
    }
    this.#remember(prompts, chain, promptTokens);
    return wholeBlocks(Math.min(cached, promptTokens));
  }

  /** What `serveBreakpoints` would report now, without caching anything. */
  peekBreakpoints(apiKey: string, segments: readonly PromptSegment[]): CacheUse {
    return this.#planBreakpoints(apiKey, segments).use;
  }

  /** Reads the longest cached prefix of the prompt, then writes the prefix at each breakpoint. */
  serveBreakpoints(apiKey: string, segments: readonly PromptSegment[]): CacheUse {
    const { use, writes } = this.#planBreakpoints(apiKey, segments);
    const prompts = this.#promptsOf(apiKey);
    for (const [chain, tokens] of writes) this.#remember(prompts, chain, tokens);
    return use;
  }

  #planBreakpoints(
    apiKey: string,
    segments: readonly PromptSegment[],
  ): { use: CacheUse; writes: Array<[string, number]> } {
    const prompts = this.#prompts.get(apiKey);
    const writes: Array<[string, number]> = [];
    let chain = "";
    let tokens = 0;
    let read = 0;
    // Candidates for a hit so far; Anthropic looks back from a breakpoint for an earlier prompt's
    // prefix, so a conversation whose breakpoint moved on still reads what the last turn wrote.
    let readable = 0;
    let lastBreakpoint = 0;
    for (const segment of segments) {
      chain = digest(chain, stableJson(segment.value));
      tokens += segment.tokens;
      readable = prompts?.get(chain) ?? readable;
      if (!segment.breakpoint) continue;
      read = readable;
      lastBreakpoint = tokens;
      if (tokens >= MIN_BREAKPOINT_TOKENS) writes.push([chain, tokens]);
    }
    const written = lastBreakpoint >= MIN_BREAKPOINT_TOKENS ? Math.max(0, lastBreakpoint - read) : 0;
    return { use: { read, written }, writes };
  }

  #promptsOf(apiKey: string): Map<string, number> {
    let prompts = this.#prompts.get(apiKey);
    if (prompts === undefined) {
      prompts = new Map();
      this.#prompts.set(apiKey, prompts);
    }
    return prompts;
  }

  #remember(prompts: Map<string, number>, chain: string, tokens: number): void {
    prompts.delete(chain);
    prompts.set(chain, tokens);
    if (prompts.size > this.maxPromptsPerKey) {
      const oldest = prompts.keys().next().value;
      if (oldest !== undefined) prompts.delete(oldest);
    }
  }
}
