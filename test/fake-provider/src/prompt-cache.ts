import { digest, stableJson } from "./hash.js";
import type { ChatMessage } from "./request.js";

// OpenAI caches prompts in blocks; the fake uses 64-token blocks so small test prompts can hit.
const BLOCK_TOKENS = 64;

/**
 * A per-API-key model of OpenAI's prompt cache: a prompt whose messages extend an earlier prompt
 * of the same key reads that earlier prompt's tokens from the cache, in whole blocks.
 */
export class PromptCache {
  // Per key, a hash of each whole message list seen (chained message by message, so every
  // prefix of a new prompt is looked up in one pass) to that prompt's token count.
  readonly #prompts = new Map<string, Map<string, number>>();

  /** Bounds memory when a benchmark sends many distinct prompts with one key. */
  constructor(private readonly maxPromptsPerKey = 10_000) {}

  /** Returns how many of this prompt's tokens were cached, then caches the prompt. */
  serve(apiKey: string, messages: readonly ChatMessage[], promptTokens: number): number {
    let prompts = this.#prompts.get(apiKey);
    if (prompts === undefined) {
      prompts = new Map();
      this.#prompts.set(apiKey, prompts);
    }

    let chain = "";
    let cached = 0;
    for (const message of messages) {
      // Looked up before each message joins the chain, so only a strict prefix can match.
      cached = prompts.get(chain) ?? cached;
      chain = digest(chain, stableJson(message));
    }

    prompts.delete(chain);
    prompts.set(chain, promptTokens);
    if (prompts.size > this.maxPromptsPerKey) {
      const oldest = prompts.keys().next().value;
      if (oldest !== undefined) prompts.delete(oldest);
    }

    const tokens = Math.min(cached, promptTokens);
    return tokens - (tokens % BLOCK_TOKENS);
  }
}
