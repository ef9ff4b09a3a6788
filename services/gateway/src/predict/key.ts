import { createHash } from "node:crypto";
import type { Config } from "@holdfast/config";
import {
  ANTHROPIC_HEADERS,
  type Dimension,
  declaredShapes,
  type KeyWindow,
  KeyWindows,
  OPENAI_HEADERS,
  type RateLimitHeaderNames,
} from "@holdfast/predict";
import type { Call } from "../pipeline/hooks.js";

type PredictConfig = Config["predict"];

/** A provider key as the gateway knows it: its id (a hash, never the key) and its window. */
export interface Key {
  readonly keyId: string;
  readonly window: KeyWindow;
  readonly names: RateLimitHeaderNames;
}

const KEY_IDS_KEPT = 10_000;

/**
 * The provider keys this gateway has seen, each with its window: a key is named by the
 * first 16 hex digits of a SHA-256 of upstream origin and API key.
 */
export class Keys {
  readonly windows: KeyWindows;
  private readonly keyIds = new Map<string, string>();

  constructor(private readonly config: PredictConfig) {
    this.windows = new KeyWindows(undefined, declaredShapes(config.window_shapes));
  }

  /** The key of the upstream a call goes to now (a route may have moved it). */
  of(call: Call): Key {
    return this.for(call, call.upstreamOrigin, call.secrets[0] ?? "");
  }

  for(call: Call, upstream: string, credential: string): Key {
    const cacheKey = `${upstream}\n${credential}`;
    let keyId = this.keyIds.get(cacheKey);
    if (keyId === undefined) {
      keyId = createHash("sha256").update(cacheKey).digest("hex").slice(0, 16);
      if (this.keyIds.size >= KEY_IDS_KEPT) this.keyIds.clear();
      this.keyIds.set(cacheKey, keyId);
    }
    return {
      keyId,
      window: this.windows.of(keyId, upstream),
      names: headerNames(this.config, upstream, call),
    };
  }
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
