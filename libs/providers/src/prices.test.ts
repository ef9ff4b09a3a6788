import { calcPrice, findProvider } from "@pydantic/genai-prices";
import { describe, expect, it } from "vitest";
import { readAnthropicUsage } from "./anthropic-messages/usage.js";
import { InvalidPriceOverrideError } from "./errors.js";
import { readResponsesUsage } from "./openai-responses/usage.js";
import { createPricer, DEFAULT_UNKNOWN_USD_PER_MTOK, MAX_NANO_USD, providerFromUpstream } from "./prices.js";
import type { UsageReport } from "./usage.js";

function usage(inputTokens: number, outputTokens: number, cachedInputTokens = 0): UsageReport {
  return {
    reported: true,
    inputTokens,
    outputTokens,
    cachedInputTokens,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
  };
}

// gpt-4o-mini's list price: $0.15 per million input tokens, $0.075 cached, $0.60 output.
const GPT_4O_MINI = { input: 150_000_000, cachedInput: 75_000_000, output: 600_000_000 };

describe("createPricer, from the bundled catalog", () => {
  const pricer = createPricer();

  it("given a million input tokens of gpt-4o-mini, then the cost is its list price", () => {
    expect(pricer.price({ model: "gpt-4o-mini", usage: usage(1_000_000, 0), provider: "openai" })).toEqual({
      known: true,
      nanoUsd: GPT_4O_MINI.input,
    });
  });

  it("given a million output tokens, then the cost is the output list price", () => {
    expect(pricer.price({ model: "gpt-4o-mini", usage: usage(0, 1_000_000) })).toEqual({
      known: true,
      nanoUsd: GPT_4O_MINI.output,
    });
  });

  it("given a dated snapshot name, then it prices like its model, with or without a provider", () => {
    const call = usage(1_000_000, 1_000_000);
    const expected = { known: true, nanoUsd: GPT_4O_MINI.input + GPT_4O_MINI.output };
    expect(pricer.price({ model: "gpt-4o-mini-2024-07-18", usage: call, provider: "openai" })).toEqual(
      expected,
    );
    expect(pricer.price({ model: "gpt-4o-mini-2024-07-18", usage: call })).toEqual(expected);
  });

  it("given cached input tokens, then they are charged at the cache rate and only the rest at full rate", () => {
    const result = pricer.price({ model: "gpt-4o-mini", usage: usage(1_000_000, 1_000_000, 500_000) });
    expect(result).toEqual({
      known: true,
      nanoUsd: GPT_4O_MINI.input / 2 + GPT_4O_MINI.cachedInput / 2 + GPT_4O_MINI.output,
    });
  });

  it("given a model the catalog does not know, then the price is unknown, not zero", () => {
    expect(pricer.price({ model: "my-finetune-v7", usage: usage(1000, 1000) })).toEqual({
      known: false,
      nanoUsd: 0,
    });
  });

  it("given a provider that does not serve the model, then the price is unknown", () => {
    expect(pricer.price({ model: "gpt-4o-mini", usage: usage(1000, 1000), provider: "anthropic" })).toEqual({
      known: false,
      nanoUsd: 0,
    });
  });

  it("given usage the provider did not report, then the price is unknown", () => {
    const unreported = {
      reported: false,
      inputTokens: 0,
      outputTokens: 0,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    };
    expect(pricer.price({ model: "gpt-4o-mini", usage: unreported })).toEqual({ known: false, nanoUsd: 0 });
  });

  it("given more cached tokens than input tokens, then the price is unknown instead of an exception", () => {
    expect(pricer.price({ model: "gpt-4o-mini", usage: usage(10, 0, 20) })).toEqual({
      known: false,
      nanoUsd: 0,
    });
  });

  it("given reported zero usage, then the call is known to cost nothing", () => {
    expect(pricer.price({ model: "gpt-4o-mini", usage: usage(0, 0) })).toEqual({ known: true, nanoUsd: 0 });
  });

  it("given a half-nano result from the catalog, then it rounds away from zero", () => {
    // gemini-1.5-flash cache reads cost $0.01875 per million: 18.75 nano a token, 37.5 for two.
    expect(pricer.price({ model: "gemini-1.5-flash", usage: usage(2, 0, 2), provider: "google" })).toEqual({
      known: true,
      nanoUsd: 38,
    });
  });

  it("given a model whose price changed, then the call's date picks the price", () => {
    const call = usage(1_000_000, 0);
    const before = pricer.price({
      model: "o3",
      usage: call,
      provider: "openai",
      at: new Date("2025-05-01T00:00:00Z"),
    });
    const after = pricer.price({
      model: "o3",
      usage: call,
      provider: "openai",
      at: new Date("2025-07-01T00:00:00Z"),
    });
    expect(before).toEqual({ known: true, nanoUsd: 10_000_000_000 });
    expect(after).toEqual({ known: true, nanoUsd: 2_000_000_000 });
  });

  it("given many small calls, then their nano sums equal the price of one call of the same size", () => {
    const one = pricer.price({ model: "gpt-4o-mini", usage: usage(1, 1) });
    const thousand = pricer.price({ model: "gpt-4o-mini", usage: usage(1000, 1000) });
    expect(Number.isInteger(one.nanoUsd)).toBe(true);
    expect(one.nanoUsd * 1000).toBe(thousand.nanoUsd);
  });
});

// List prices in nano-USD per token ($1 per million tokens is 1,000 nano a token).
// claude-3-5-haiku: $0.80 input, $1.00 cache write, $0.08 cache read, $4 output.
const HAIKU_3_5 = { input: 800, cacheWrite: 1_000, cacheRead: 80, output: 4_000 };
// claude-sonnet-4-5 up to 200k prompt tokens: $3 input, $3.75 cache write, $0.30 cache read, $15 output.
const SONNET_4_5 = { input: 3_000, cacheWrite: 3_750, cacheRead: 300, output: 15_000 };
// o4-mini: $1.10 input, $0.275 cached input, $4.40 output.
const O4_MINI = { input: 1_100, cachedInput: 275, output: 4_400 };

// An Anthropic usage object as a cached tool loop reports it: `input_tokens` is only the
// uncached part.
const ANTHROPIC_USAGE = {
  input_tokens: 2_000,
  cache_creation_input_tokens: 10_000,
  cache_read_input_tokens: 50_000,
  output_tokens: 500,
};

describe("createPricer, Anthropic usage from the bundled catalog", () => {
  const pricer = createPricer();
  const call = readAnthropicUsage(ANTHROPIC_USAGE);

  it.each([
    ["anthropic", "anthropic"],
    ["no provider", undefined],
  ])(
    "given claude-3-5-haiku with %s, then uncached, cache-written, cache-read and output tokens each get their rate",
    (_case, provider) => {
      expect(pricer.price({ model: "claude-3-5-haiku-20241022", usage: call, provider })).toEqual({
        known: true,
        nanoUsd:
          2_000 * HAIKU_3_5.input +
          10_000 * HAIKU_3_5.cacheWrite +
          50_000 * HAIKU_3_5.cacheRead +
          500 * HAIKU_3_5.output,
      });
    },
  );

  it.each([
    ["anthropic", "anthropic"],
    ["no provider", undefined],
  ])("given claude-sonnet-4-5 with %s, then it prices the same way at its own rates", (_case, provider) => {
    expect(pricer.price({ model: "claude-sonnet-4-5", usage: call, provider })).toEqual({
      known: true,
      nanoUsd:
        2_000 * SONNET_4_5.input +
        10_000 * SONNET_4_5.cacheWrite +
        50_000 * SONNET_4_5.cacheRead +
        500 * SONNET_4_5.output,
    });
  });

  it("given cache tokens, then the call costs what its parts cost, not its whole input at the input rate", () => {
    const uncachedOnly = readAnthropicUsage({ input_tokens: 62_000, output_tokens: 500 });
    const cached = pricer.price({ model: "claude-3-5-haiku-20241022", usage: call });
    const uncached = pricer.price({ model: "claude-3-5-haiku-20241022", usage: uncachedOnly });
    expect(call.inputTokens).toBe(uncachedOnly.inputTokens);
    expect(cached.nanoUsd).toBeLessThan(uncached.nanoUsd);
  });
});

describe("createPricer, Responses usage with reasoning tokens", () => {
  const pricer = createPricer();
  // A reasoning model's usage: 1,024 of its 1,200 output tokens were reasoning.
  const call = readResponsesUsage({
    input_tokens: 5_000,
    input_tokens_details: { cached_tokens: 4_096 },
    output_tokens: 1_200,
    output_tokens_details: { reasoning_tokens: 1_024 },
    total_tokens: 6_200,
  });

  it("given reasoning tokens, then they are billed as the output they are part of, once", () => {
    expect(call.reasoningTokens).toBe(1_024);
    expect(pricer.price({ model: "o4-mini", usage: call, provider: "openai" })).toEqual({
      known: true,
      nanoUsd: (5_000 - 4_096) * O4_MINI.input + 4_096 * O4_MINI.cachedInput + 1_200 * O4_MINI.output,
    });
  });

  it("given the same usage without reasoning, then the price is the same", () => {
    const plain = { ...call, reasoningTokens: 0 };
    expect(pricer.price({ model: "o4-mini-2025-04-16", usage: plain })).toEqual(
      pricer.price({ model: "o4-mini-2025-04-16", usage: call }),
    );
  });
});

describe("createPricer, with overrides", () => {
  it("given an override for a model the catalog lacks, then it prices from the override", () => {
    const pricer = createPricer({
      overrides: { "my-finetune-v7": { input_per_mtok: 2, output_per_mtok: 8 } },
    });
    expect(pricer.price({ model: "my-finetune-v7", usage: usage(1_000_000, 500_000) })).toEqual({
      known: true,
      nanoUsd: 2_000_000_000 + 4_000_000_000,
    });
  });

  it("given an override for a catalog model, then the override wins, for that exact name only", () => {
    const pricer = createPricer({ overrides: { "gpt-4o-mini": { input_per_mtok: 1, output_per_mtok: 1 } } });
    expect(
      pricer.price({ model: "gpt-4o-mini", usage: usage(1_000_000, 0), provider: "openai" }).nanoUsd,
    ).toBe(1_000_000_000);
    expect(pricer.price({ model: "gpt-4o-mini-2024-07-18", usage: usage(1_000_000, 0) }).nanoUsd).toBe(
      GPT_4O_MINI.input,
    );
  });

  it("given an override without a cached rate, then cached tokens cost the full input rate", () => {
    const pricer = createPricer({ overrides: { m: { input_per_mtok: 4, output_per_mtok: 0 } } });
    expect(pricer.price({ model: "m", usage: usage(1_000_000, 0, 750_000) }).nanoUsd).toBe(4_000_000_000);
  });

  it("given an override with a cached rate, then cached tokens get the discount", () => {
    const pricer = createPricer({
      overrides: { m: { input_per_mtok: 4, output_per_mtok: 0, cached_input_per_mtok: 0.4 } },
    });
    expect(pricer.price({ model: "m", usage: usage(1_000_000, 0, 750_000) }).nanoUsd).toBe(
      1_000_000_000 + 300_000_000,
    );
  });

  it.each([
    [1, 2],
    [3, 5],
    [2, 3],
  ])("given %i tokens at 1.5 nano each, then the half rounds away from zero to %i", (tokens, nano) => {
    const pricer = createPricer({ overrides: { m: { input_per_mtok: 0.0015, output_per_mtok: 0 } } });
    expect(pricer.price({ model: "m", usage: usage(tokens, 0) }).nanoUsd).toBe(nano);
  });

  it("given a half that binary arithmetic lands just below, then it still rounds up", () => {
    // 3 × 0.0375 × 1000 is 112.49999999999999 in floating point; the true cost is 112.5.
    const pricer = createPricer({ overrides: { m: { input_per_mtok: 0.0375, output_per_mtok: 0 } } });
    expect(pricer.price({ model: "m", usage: usage(3, 0) }).nanoUsd).toBe(113);
  });

  it("given an override with a negative or missing rate, then creating the pricer fails naming model and field", () => {
    const bad = { m: { input_per_mtok: -1, output_per_mtok: 1 } };
    expect(() => createPricer({ overrides: bad })).toThrow(InvalidPriceOverrideError);
    expect(() => createPricer({ overrides: bad })).toThrow(/'m'.*'input_per_mtok'/);
    const missing = { m: { input_per_mtok: 1 } } as unknown as Record<string, never>;
    expect(() => createPricer({ overrides: missing })).toThrow(/'output_per_mtok'/);
  });
});

describe("createPricer, costs beyond what an event carries", () => {
  it("given a price times a count past 2^53 nano-USD, then the cost saturates at MAX_NANO_USD", () => {
    const pricer = createPricer({ overrides: { dear: { input_per_mtok: 1e12, output_per_mtok: 1e12 } } });
    expect(pricer.price({ model: "dear", usage: usage(1_000, 1_000) })).toEqual({
      known: true,
      nanoUsd: MAX_NANO_USD,
    });
    expect(MAX_NANO_USD).toBe(Number.MAX_SAFE_INTEGER);
  });

  it("given the catalog's price of a huge call, then the cost saturates too", () => {
    // gpt-4o at USD 10 a million output tokens: 10^15 tokens are USD 10^10, past int64 nano-USD.
    const price = createPricer().price({ model: "gpt-4o", usage: usage(0, 1e15), provider: "openai" });
    expect(price).toEqual({ known: true, nanoUsd: MAX_NANO_USD });
  });
});

describe("createPricer, a model with no known price", () => {
  it("is unknown to price, never zero", () => {
    expect(createPricer().price({ model: "fake-unpriced-model", usage: usage(100, 100) })).toEqual({
      known: false,
      nanoUsd: 0,
    });
  });

  it("is charged every token at the unknown rate: USD 75 a million by default", () => {
    expect(DEFAULT_UNKNOWN_USD_PER_MTOK).toBe(75);
    expect(createPricer().priceUnknown(usage(1_000, 200, 600))).toBe(1_200 * 75_000);
  });

  it("is charged at the configured rate, saturated", () => {
    expect(createPricer({ unknownUsdPerMtok: 2 }).priceUnknown(usage(1_000_000, 500_000))).toBe(3e9);
    expect(createPricer({ unknownUsdPerMtok: 1e15 }).priceUnknown(usage(1_000_000, 0))).toBe(MAX_NANO_USD);
    expect(() => createPricer({ unknownUsdPerMtok: -1 })).toThrow(/'unknown_usd_per_mtok'/);
  });
});

describe("providerFromUpstream", () => {
  it.each([
    ["https://api.openai.com/v1", "openai"],
    ["https://api.anthropic.com", "anthropic"],
    ["https://api.groq.com/openai/v1", "groq"],
    ["https://generativelanguage.googleapis.com/v1beta/openai/", "google"],
    ["https://api.mistral.ai/v1", "mistral"],
    ["https://api.deepseek.com", "deepseek"],
    ["https://openrouter.ai/api/v1", "openrouter"],
    ["https://api.x.ai/v1", "x-ai"],
    ["https://API.OpenAI.com:443/v1", "openai"],
  ])("given %s, then the provider is %s, an id the catalog knows", (url, id) => {
    expect(providerFromUpstream(url)).toBe(id);
    expect(findProvider({ providerId: id })?.id).toBe(id);
  });

  it.each([
    ["http://localhost:8080/v1"],
    ["https://my-resource.openai.azure.com"],
    ["not a url"],
    ["https://openai.com.evil.example"],
  ])("given %s, then the provider is unknown", (url) => {
    expect(providerFromUpstream(url)).toBeUndefined();
  });
});

describe("createPricer, memoised rates against the catalog itself", () => {
  // Every call after the first is priced from per-token rates read off the catalog once;
  // they must give what the catalog gives, call after call, tiered and dated prices included.
  const models: [string, string | undefined][] = [
    ["gpt-4o-mini", "openai"],
    ["gpt-4o", undefined],
    ["o4-mini", "openai"],
    ["claude-sonnet-4-5", "anthropic"],
    ["claude-3-5-haiku-20241022", undefined],
    ["gemini-1.5-pro", "google"],
    ["gemini-2.5-pro", "google"],
    ["deepseek-chat", "deepseek"],
  ];
  const usages: UsageReport[] = [
    usage(10, 5),
    usage(1_234, 567, 200),
    { ...usage(250_000, 4_000, 100_000), cacheWriteTokens: 50_000 },
    { ...usage(3_000, 900), cacheWriteTokens: 2_500 },
  ];

  it.each(models)("prices %s (provider %s) as calcPrice does, on every call", (model, provider) => {
    const pricer = createPricer();
    const catalogProvider = findProvider({ modelId: model, providerId: provider });
    expect(catalogProvider, `${model} is in the catalog`).toBeDefined();
    for (let round = 0; round < 2; round++) {
      for (const u of usages) {
        const direct = calcPrice(
          {
            input_tokens: u.inputTokens,
            cache_read_tokens: u.cachedInputTokens,
            cache_write_tokens: u.cacheWriteTokens,
            output_tokens: u.outputTokens,
          },
          model,
          { provider: catalogProvider },
        );
        const expected =
          direct === null
            ? { known: false, nanoUsd: 0 }
            : { known: true, nanoUsd: Math.round(direct.total_price * 1e9) };
        expect(pricer.price({ model, usage: u, provider }), `${model} ${JSON.stringify(u)}`).toEqual(
          expected,
        );
      }
    }
  });
});
