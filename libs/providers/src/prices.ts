import { calcPrice, findProvider } from "@pydantic/genai-prices";
import { InvalidPriceOverrideError } from "./errors.js";
import type { UsageReport } from "./usage.js";

/** A configured price, in USD per million tokens, for a model the catalog lacks or misprices. */
export interface PriceOverride {
  readonly input_per_mtok: number;
  readonly output_per_mtok: number;
  /** Defaults to `input_per_mtok`: no cache discount unless one is configured. */
  readonly cached_input_per_mtok?: number;
  /** Tokens written to the prompt cache; defaults to `input_per_mtok`. */
  readonly cache_write_per_mtok?: number;
}

export interface PriceInput {
  readonly model: string;
  readonly usage: UsageReport;
  /** A provider id as the catalog knows it (see `providerFromUpstream`); absent, the model name decides. */
  readonly provider?: string | undefined;
  /** When the call was made: some prices change by date or time of day. Defaults to now. */
  readonly at?: Date | undefined;
}

/**
 * The cost of one call in billionths of a US dollar, an integer so that sums are exact.
 * `known: false` means there is no price, never that the call was free.
 */
export interface PriceResult {
  readonly known: boolean;
  readonly nanoUsd: number;
}

export interface Pricer {
  price(input: PriceInput): PriceResult;
  /**
   * What a call of a model with no known price is charged where a cost limit or budget
   * must count it: every token, input (cached or not) and output alike, at the unknown rate.
   */
  priceUnknown(usage: UsageReport): number;
}

export interface PricerOptions {
  /** Keyed by exact model name; checked before the catalog. */
  readonly overrides?: Readonly<Record<string, PriceOverride>>;
  /** USD per million tokens that `priceUnknown` charges; DEFAULT_UNKNOWN_USD_PER_MTOK by default. */
  readonly unknownUsdPerMtok?: number;
}

/**
 * The rate a model with no known price is charged at by default, in USD per million tokens
 * of any kind: the output rate of the dearest flagship models (Claude Opus), so that a limit
 * trips early on such a model rather than late.
 */
export const DEFAULT_UNKNOWN_USD_PER_MTOK = 75;

/**
 * The most a cost may be, in nano-USD: what every reader of an event decodes exactly (2^53 - 1,
 * about USD 9 million). A cost beyond it is recorded as it (saturated), never as an overflow.
 */
export const MAX_NANO_USD = Number.MAX_SAFE_INTEGER;

const UNKNOWN: PriceResult = Object.freeze({ known: false, nanoUsd: 0 });
const NANO_PER_USD = 1e9;
const NANO_PER_MTOK_PER_TOKEN = NANO_PER_USD / 1e6;

interface Rates {
  readonly input: number;
  readonly cachedInput: number;
  readonly cacheWrite: number;
  readonly output: number;
}

/**
 * Prices calls from configured overrides, then from genai-prices' bundled catalog. The
 * catalog is never updated over the network: prices change with a dependency upgrade,
 * reviewed, not under a running gateway.
 */
export function createPricer(options: PricerOptions = {}): Pricer {
  const overrides = new Map<string, Rates>();
  for (const [model, override] of Object.entries(options.overrides ?? {})) {
    overrides.set(model, ratesOf(model, override));
  }
  const unknownRate = checkedRate(
    "*",
    "unknown_usd_per_mtok",
    options.unknownUsdPerMtok ?? DEFAULT_UNKNOWN_USD_PER_MTOK,
  );

  // The catalog's lookup (finding the provider, matching the model, resolving its price
  // units) costs far more than the arithmetic, so it is done once per (provider, model):
  // a model whose price is linear in the four token counts (no tiers, no price that
  // changes by date or time of day) is priced from memoised per-token rates after that.
  const memo = new Map<string, CatalogEntry>();
  function catalogEntry(model: string, provider: string | undefined): CatalogEntry {
    const key = `${provider ?? ""}\u0000${model}`;
    let found = memo.get(key);
    if (found === undefined) {
      const catalogProvider =
        findProvider({ modelId: model.toLowerCase().trim(), providerId: provider }) ?? null;
      found =
        catalogProvider === null
          ? NOT_IN_CATALOG
          : { provider: catalogProvider, linear: linearRates(model, catalogProvider) };
      if (memo.size >= MAX_MEMO) memo.clear();
      memo.set(key, found);
    }
    return found;
  }

  return {
    price({ model, usage, provider, at }: PriceInput): PriceResult {
      if (!usage.reported) return UNKNOWN;
      // Cached and cache-written tokens are part of the input; more of them than input is
      // a provider bug that no price can make sense of.
      if (usage.cachedInputTokens + usage.cacheWriteTokens > usage.inputTokens) return UNKNOWN;
      const rates = overrides.get(model);
      if (rates !== undefined) {
        const uncached = usage.inputTokens - usage.cachedInputTokens - usage.cacheWriteTokens;
        const nano =
          (uncached * rates.input +
            usage.cachedInputTokens * rates.cachedInput +
            usage.cacheWriteTokens * rates.cacheWrite +
            usage.outputTokens * rates.output) *
          NANO_PER_MTOK_PER_TOKEN;
        return { known: true, nanoUsd: roundNano(nano) };
      }
      const entry = catalogEntry(model, provider);
      if (entry.provider === null) return UNKNOWN;
      if (entry.linear !== null)
        return { known: true, nanoUsd: roundNano(linearUsd(entry.linear, usage) * NANO_PER_USD) };
      return priceFromCatalog(model, usage, entry.provider, at);
    },

    priceUnknown(usage: UsageReport): number {
      return roundNano((usage.inputTokens + usage.outputTokens) * unknownRate * NANO_PER_MTOK_PER_TOKEN);
    },
  };
}

interface CatalogEntry {
  readonly provider: CatalogProvider | null;
  readonly linear: LinearRates | null;
}

const NOT_IN_CATALOG: CatalogEntry = Object.freeze({ provider: null, linear: null });

/** A price that is a fixed amount per call plus a rate per token of each kind, in USD. */
interface LinearRates {
  readonly perCall: number;
  readonly uncachedInput: number;
  readonly cachedInput: number;
  readonly cacheWrite: number;
  readonly output: number;
}

function linearUsd(r: LinearRates, u: UsageReport): number {
  const uncached = u.inputTokens - u.cachedInputTokens - u.cacheWriteTokens;
  return (
    r.perCall +
    uncached * r.uncachedInput +
    u.cachedInputTokens * r.cachedInput +
    u.cacheWriteTokens * r.cacheWrite +
    u.outputTokens * r.output
  );
}

const PROBE = 1_000_000;

/**
 * The model's price as per-token rates, read off the catalog by pricing one million
 * tokens of each kind; null when the price is not linear in them (tiers by prompt
 * length, prices by date or hour), and checked against the catalog on a mixed call
 * before it is trusted.
 */
function linearRates(model: string, provider: CatalogProvider): LinearRates | null {
  const total = (input: number, cacheRead: number, cacheWrite: number, output: number): number | null => {
    try {
      const result = calcPrice(
        {
          input_tokens: input,
          cache_read_tokens: cacheRead,
          cache_write_tokens: cacheWrite,
          output_tokens: output,
        },
        model,
        { provider },
      );
      if (result === null || !Number.isFinite(result.total_price)) return null;
      if (Array.isArray(result.model.prices)) return null;
      if (Object.values(result.model_price).some((price) => typeof price === "object")) return null;
      return result.total_price;
    } catch {
      return null;
    }
  };
  const perCall = total(0, 0, 0, 0);
  const input = total(PROBE, 0, 0, 0);
  const cached = total(PROBE, PROBE, 0, 0);
  const written = total(PROBE, 0, PROBE, 0);
  const output = total(0, 0, 0, PROBE);
  if (perCall === null || input === null || cached === null || written === null || output === null)
    return null;
  const rates: LinearRates = {
    perCall,
    uncachedInput: (input - perCall) / PROBE,
    cachedInput: (cached - perCall) / PROBE,
    cacheWrite: (written - perCall) / PROBE,
    output: (output - perCall) / PROBE,
  };
  const check = {
    reported: true,
    inputTokens: 12_345,
    cachedInputTokens: 2_345,
    cacheWriteTokens: 1_000,
    outputTokens: 678,
    reasoningTokens: 0,
  };
  const expected = total(
    check.inputTokens,
    check.cachedInputTokens,
    check.cacheWriteTokens,
    check.outputTokens,
  );
  if (expected === null) return null;
  const got = linearUsd(rates, check);
  return Math.abs(got - expected) <= Math.abs(expected) * 1e-9 ? rates : null;
}

type CatalogProvider = NonNullable<ReturnType<typeof findProvider>>;
const MAX_MEMO = 4_096;

function priceFromCatalog(
  model: string,
  usage: UsageReport,
  provider: CatalogProvider,
  at: Date | undefined,
): PriceResult {
  let result: ReturnType<typeof calcPrice>;
  try {
    result = calcPrice(
      {
        // genai-prices wants the total input and the cached and cache-written parts of it.
        input_tokens: usage.inputTokens,
        cache_read_tokens: usage.cachedInputTokens,
        cache_write_tokens: usage.cacheWriteTokens,
        output_tokens: usage.outputTokens,
      },
      model,
      { provider, timestamp: at },
    );
  } catch {
    // The catalog refuses usage it cannot decompose; that is a missing price, not a crash.
    return UNKNOWN;
  }
  if (result === null || !Number.isFinite(result.total_price)) return UNKNOWN;
  return { known: true, nanoUsd: roundNano(result.total_price * NANO_PER_USD) };
}

/**
 * Rounds half away from zero, and saturates: a cost is from 0 to MAX_NANO_USD, whatever a
 * price times a count comes to. Prices arrive as binary fractions, so an exact half such as
 * 112.5 can land on 112.49999999999999; snapping to 15 significant digits first removes
 * that noise without touching any digit a real price has.
 */
function roundNano(nano: number): number {
  if (nano >= MAX_NANO_USD) return MAX_NANO_USD;
  // Negative (no price is) or NaN (no count is, once checked): nothing to charge.
  if (!(nano > 0)) return 0;
  // Snapping moves a value by at most half a unit of its 15th digit: only a fraction that
  // close to one half can round differently for it.
  if (Math.abs(nano - Math.floor(nano) - 0.5) > nano * 1e-14) return Math.round(nano);
  return Math.round(Number(nano.toPrecision(15)));
}

function ratesOf(model: string, override: PriceOverride): Rates {
  const input = checkedRate(model, "input_per_mtok", override.input_per_mtok);
  const output = checkedRate(model, "output_per_mtok", override.output_per_mtok);
  const cachedInput =
    override.cached_input_per_mtok === undefined
      ? input
      : checkedRate(model, "cached_input_per_mtok", override.cached_input_per_mtok);
  const cacheWrite =
    override.cache_write_per_mtok === undefined
      ? input
      : checkedRate(model, "cache_write_per_mtok", override.cache_write_per_mtok);
  return { input, cachedInput, cacheWrite, output };
}

function checkedRate(model: string, field: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new InvalidPriceOverrideError(model, field, value);
  }
  return value;
}

const PROVIDER_BY_HOST: ReadonlyMap<string, string> = new Map([
  ["api.openai.com", "openai"],
  ["api.anthropic.com", "anthropic"],
  ["api.groq.com", "groq"],
  ["generativelanguage.googleapis.com", "google"],
  ["api.mistral.ai", "mistral"],
  ["api.deepseek.com", "deepseek"],
  ["openrouter.ai", "openrouter"],
  ["api.x.ai", "x-ai"],
]);

/**
 * The catalog's provider id for an upstream base URL, when the host is one Holdfast
 * knows. Any other host (a self-hosted model, a regional endpoint) gives undefined and
 * the model name alone picks the price.
 */
export function providerFromUpstream(url: string): string | undefined {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return undefined;
  }
  return PROVIDER_BY_HOST.get(host);
}
