/** About four characters a token: the count for models no tokenizer here knows. */
export const CHARS_PER_TOKEN = 4;

type Count = (text: string) => number;

/** The encoding a model's tokenizer uses, for the models whose tokenizer is public; undefined otherwise. */
export function encodingOf(model: string): "o200k_base" | "cl100k_base" | undefined {
  const name = model.toLowerCase().replace(/^(openai\/|azure\/)/, "");
  if (/^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4|chatgpt-4o|gpt-oss)/.test(name)) return "o200k_base";
  if (/^(gpt-4|gpt-3\.5|text-embedding-3|text-embedding-ada)/.test(name)) return "cl100k_base";
  return undefined;
}

/**
 * Counts a request's tokens: with the model's own tokenizer (gpt-tokenizer's encodings)
 * for the models whose tokenizer is public, about four characters a token for the rest.
 * The encodings (a few MB each) are loaded once, by `load()`, off the call's path; until
 * then every count is the character estimate.
 */
export class TokenCounter {
  private readonly encodings = new Map<string, Count>();

  /** Loads the encodings; a tokenizer that fails to load leaves its models to the estimate. */
  async load(): Promise<void> {
    const [o200k, cl100k] = await Promise.allSettled([
      import("gpt-tokenizer/encoding/o200k_base"),
      import("gpt-tokenizer/encoding/cl100k_base"),
    ]);
    if (o200k.status === "fulfilled") this.encodings.set("o200k_base", o200k.value.countTokens);
    if (cl100k.status === "fulfilled") this.encodings.set("cl100k_base", cl100k.value.countTokens);
  }

  /** Tokens of `text` as `model` counts them; `exact` says whether a tokenizer counted. */
  count(text: string, model: string): { tokens: number; exact: boolean } {
    const encoding = encodingOf(model);
    const count = encoding === undefined ? undefined : this.encodings.get(encoding);
    if (count === undefined) return { tokens: Math.ceil(text.length / CHARS_PER_TOKEN), exact: false };
    return { tokens: count(text), exact: true };
  }
}
