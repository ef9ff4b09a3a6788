/**
 * Token usage of one model call, the same shape whichever provider reported it.
 * `reported: false` means the provider said nothing usable, which is not the same as zero.
 */
export interface UsageReport {
  readonly reported: boolean;
  /** Every prompt token, cached ones included. */
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** The part of `inputTokens` served from the provider's prompt cache. */
  readonly cachedInputTokens: number;
  /** The part of `inputTokens` written to the provider's prompt cache (Anthropic bills it apart). */
  readonly cacheWriteTokens: number;
  /** The part of `outputTokens` the model spent reasoning. */
  readonly reasoningTokens: number;
  /**
   * What was wrong with the provider's figures, in words ("output_tokens -5 is negative").
   * With `reported: false` the report was unusable and every count is 0; with `reported:
   * true` only fractions were rounded. Undefined when nothing was wrong (or nothing was said).
   */
  readonly problem?: string | undefined;
}

export const NO_USAGE: UsageReport = Object.freeze({
  reported: false,
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
});

/**
 * The most tokens one call is taken to use, in any one of its counts: ten times the largest
 * context window of any model offered today (10 million tokens), and far inside what every
 * reader of an event decodes exactly (2^53). A provider that reports more is not believed.
 */
export const MAX_TOKENS_PER_CALL = 100_000_000;

// A problem is said in a few words; a provider sending many bad counts gets the first few.
const MAX_PROBLEM_CHARS = 400;

/**
 * A provider's token counts, checked as each becomes a number: the one place, for every
 * API shape, where what a provider says turns into figures that events, prices, limits
 * and the estimator are built on. A count is a whole number from 0 to MAX_TOKENS_PER_CALL;
 * a fraction is rounded (and said to be); anything else (negative, beyond the bound, not a
 * number at all, a count the answer must carry missing, cached tokens more than the input)
 * makes the whole report unusable: `reported: false`, every count 0, and `problem` says why.
 *
 * Use one per report: `count` each field under the provider's own name for it, then `report`.
 */
export class UsageCheck {
  #problem: string | undefined;
  #unusable = false;

  /**
   * One count as the provider sent it. `required`: the answer must carry it (absent or null,
   * the report is unusable); otherwise absent or null reads as 0.
   */
  count(name: string, value: unknown, required = false): number {
    if (typeof value === "number") {
      // Almost every count: a whole number in range, let through at the cost of three comparisons.
      if (Number.isInteger(value) && value >= 0 && value <= MAX_TOKENS_PER_CALL) return value;
      if (value < 0) return this.#unusableBecause(`${name} ${value} is negative`);
      if (!(value <= MAX_TOKENS_PER_CALL)) {
        return this.#unusableBecause(
          `${name} ${value} is more than ${MAX_TOKENS_PER_CALL}, the most one call is taken to use`,
        );
      }
      const rounded = Math.round(value);
      this.#say(`${name} ${value} is not a whole number: rounded to ${rounded}`);
      return rounded;
    }
    if (value === undefined || value === null) {
      return required ? this.#unusableBecause(`${name} is missing`) : 0;
    }
    return this.#unusableBecause(`${name} is ${kindOf(value)}, not a number`);
  }

  /** The checked report: the counts as given, or NO_USAGE's zeros with the problem when unusable. */
  report(counts: Omit<UsageReport, "reported" | "problem">): UsageReport {
    if (!this.#unusable) {
      if (counts.cachedInputTokens + counts.cacheWriteTokens > counts.inputTokens) {
        this.#unusableBecause(
          `cached and cache-written tokens (${counts.cachedInputTokens} + ${counts.cacheWriteTokens}) are more than the input (${counts.inputTokens})`,
        );
      } else if (counts.inputTokens > MAX_TOKENS_PER_CALL) {
        // Each part was in range; their sum (Anthropic reports the input in three) is not.
        this.#unusableBecause(
          `the input (${counts.inputTokens} tokens) is more than ${MAX_TOKENS_PER_CALL}, the most one call is taken to use`,
        );
      }
    }
    if (this.#unusable) return { ...NO_USAGE, problem: this.#problem };
    return {
      reported: true,
      inputTokens: counts.inputTokens,
      outputTokens: counts.outputTokens,
      cachedInputTokens: counts.cachedInputTokens,
      cacheWriteTokens: counts.cacheWriteTokens,
      reasoningTokens: counts.reasoningTokens,
      problem: this.#problem,
    };
  }

  #unusableBecause(problem: string): number {
    this.#unusable = true;
    this.#say(problem);
    return 0;
  }

  #say(problem: string): void {
    if (this.#problem === undefined) this.#problem = problem;
    else if (this.#problem.length < MAX_PROBLEM_CHARS) this.#problem += `; ${problem}`;
  }
}

function kindOf(value: unknown): string {
  if (typeof value === "string") return "a string";
  if (typeof value === "boolean") return "a boolean";
  if (Array.isArray(value)) return "a list";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}
