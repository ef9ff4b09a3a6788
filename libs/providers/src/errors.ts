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

/**
 * A provider's answer went past a bound the gateway reads it within: the whole answer
 * (`answer`, its bytes decompressed) or one event of its stream while still incomplete
 * (`event`). What is past the bound is never read; the answer is cut off there.
 */
export class AnswerTooLargeError extends ProvidersError {
  override readonly name = "AnswerTooLargeError";
  readonly code = "HF_PROVIDERS_ANSWER_TOO_LARGE";
  readonly retryable = false;

  constructor(
    readonly what: "answer" | "event",
    readonly limitBytes: number,
    /** Bytes read from the provider before the cut, as they came (compressed, if they were). */
    readonly receivedBytes = 0,
    /** Bytes of text those gave (decompressed, when they came compressed): what the output was. */
    readonly textBytes = receivedBytes,
  ) {
    super(
      what === "answer"
        ? `The provider's answer is larger than ${limitBytes} bytes.`
        : `An event of the provider's stream is larger than ${limitBytes} bytes.`,
    );
  }
}
