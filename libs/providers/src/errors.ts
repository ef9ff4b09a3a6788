/** Base of this package's errors. `retryable` says whether trying again can succeed. */
export abstract class ProvidersError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
}

/** A configured price override cannot price anything; fix the configuration. */
export class InvalidPriceOverrideError extends ProvidersError {
  override readonly name = "InvalidPriceOverrideError";
  readonly code = "HF_PROVIDERS_INVALID_PRICE_OVERRIDE";
  readonly retryable = false;

  constructor(
    readonly model: string,
    readonly field: string,
    value: unknown,
  ) {
    super(
      `Price override for model '${model}': '${field}' must be a finite number >= 0, got ${String(value)}.`,
    );
  }
}
