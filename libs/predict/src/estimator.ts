/** What is known of a call before it is sent. */
export interface CallFeatures {
  readonly runId: string;
  readonly model: string;
  readonly tag: string;
  /** Input tokens as counted from the request: a tokenizer's count (`exact`), or about four characters a token. */
  readonly countedInput: number;
  readonly exact: boolean;
  /** The input at about four characters a token, whichever way `countedInput` was counted. */
  readonly approxInput?: number;
  /** The output cap the request sets (max_tokens, max_output_tokens), when it sets one. */
  readonly maxOutput: number | undefined;
  readonly toolCount: number;
  readonly messageCount: number;
}

/** A call's predicted cost in tokens, and the margin it is granted with. */
export interface Estimate {
  readonly input: number;
  readonly output: number;
  /** input + output, corrected by the moving error. */
  readonly total: number;
  /** The spread of the error between estimates and what calls really cost. */
  readonly sigma: number;
  readonly k: number;
  /** What the call is granted with: total + k·σ, and never less than the provider reserves for it (input + its output cap). */
  readonly need: number;
  /** The predicted latency in ms (0 when not predicted). */
  readonly latencyMs: number;
}

/** What a call really cost, once answered. */
export interface Actual {
  readonly input: number;
  readonly output: number;
  readonly latencyMs: number;
}

/** Predicts calls and learns from their answers. */
export interface CostEstimator {
  estimate(call: CallFeatures): Estimate;
  record(call: CallFeatures, estimate: Estimate, actual: Actual): void;
  /** A 429 got past a prediction: be more cautious (k grows, up to its cap). */
  slipped(): void;
  readonly k: number;
}

export interface EstimatorOptions {
  /** The margin's multiple of σ to start with. */
  readonly k: number;
  readonly kMax: number;
  /** How much each 429 that slips through adds to k. */
  readonly kStep: number;
  /** Weight of the newest observation in the moving averages. */
  readonly alpha: number;
  /** Output tokens assumed for a model nothing is known of yet (capped by the request's own cap). */
  readonly defaultOutput: number;
  /** Runs whose history is kept; past it the least recent is forgotten. */
  readonly maxRuns: number;
}

export const ESTIMATOR_DEFAULTS: EstimatorOptions = Object.freeze({
  k: 3,
  kMax: 8,
  kStep: 1,
  alpha: 0.3,
  defaultOutput: 1_024,
  maxRuns: 10_000,
});

/**
 * How the provider's input counts compare with the request's own count, per way of
 * counting: about four characters a token and a tokenizer's count differ, and a call is
 * counted either way (the tokenizer only when the window is close).
 */
export class InputRatio {
  private characters = { n: 0, ratio: 1 };
  private tokenizer = { n: 0, ratio: 1 };

  of(call: Pick<CallFeatures, "exact">): number {
    return call.exact ? this.tokenizer.ratio : this.characters.ratio;
  }

  /**
   * The call's input as the provider will count it: its count scaled by how the provider's
   * counts compared. A tokenizer's count the provider has not been compared with yet (the
   * first calls counted exactly, near a window's end) is taken no lower than the character
   * count scaled as learned: a tokenizer that differs from the provider's must not turn a
   * careful estimate into a low one.
   */
  input(call: Pick<CallFeatures, "exact" | "countedInput" | "approxInput">): number {
    const counted = Math.ceil(call.countedInput * this.of(call));
    if (!call.exact || this.tokenizer.n >= 2 || call.approxInput === undefined || this.characters.n === 0) {
      return counted;
    }
    return Math.max(counted, Math.ceil(call.approxInput * this.characters.ratio));
  }

  learn(alpha: number, call: Pick<CallFeatures, "exact" | "countedInput">, actual: Actual): void {
    if (call.countedInput <= 0 || actual.input <= 0) return;
    const ratio = actual.input / call.countedInput;
    const way = call.exact ? this.tokenizer : this.characters;
    way.ratio = way.n === 0 ? ratio : way.ratio + alpha * (ratio - way.ratio);
    way.n += 1;
  }
}

/** Moving averages of one run's (or one model's) calls. */
class History {
  n = 0;
  /** Reported input over counted input, per way of counting (characters, a tokenizer). */
  readonly ratio = new InputRatio();
  output = 0;
  latencyMs = 0;
  /** The moving error (actual − predicted) and its variance. */
  error = 0;
  variance = 0;

  learn(alpha: number, call: CallFeatures, predicted: number, actual: Actual): void {
    this.ratio.learn(alpha, call, actual);
    const total = actual.input + actual.output;
    const miss = total - predicted;
    if (this.n === 0) {
      this.output = actual.output;
      this.latencyMs = actual.latencyMs;
      this.error = 0;
      this.variance = miss * miss;
    } else {
      this.output += alpha * (actual.output - this.output);
      this.latencyMs += alpha * (actual.latencyMs - this.latencyMs);
      const deviation = miss - this.error;
      this.error += alpha * deviation;
      // West's incremental form of an exponentially weighted variance.
      this.variance = (1 - alpha) * (this.variance + alpha * deviation * deviation);
    }
    this.n += 1;
  }
}

/**
 * The default estimator (agentpause's rule, per run and model): input is the request's
 * count scaled by how the provider's own counts compared so far; output is the run's
 * moving average (the model's across the fleet before the run has any, a default before
 * that); a moving error corrects the total, and its spread σ sets the margin k·σ (a
 * quarter of the estimate until two calls are known). A 429 that slips through raises k.
 */
export class Estimator implements CostEstimator {
  private readonly runs = new Map<string, History>();
  private readonly models = new Map<string, History>();
  private kNow: number;

  constructor(private readonly options: EstimatorOptions = ESTIMATOR_DEFAULTS) {
    this.kNow = options.k;
  }

  get k(): number {
    return this.kNow;
  }

  estimate(call: CallFeatures): Estimate {
    const history = this.runs.get(runKey(call)) ?? this.models.get(call.model);
    const input = history?.ratio.input(call) ?? call.countedInput;
    let output = history !== undefined && history.n > 0 ? history.output : this.options.defaultOutput;
    if (call.maxOutput !== undefined) output = Math.min(output, call.maxOutput);
    const total = Math.max(1, input + output + (history?.error ?? 0));
    const sigma =
      history !== undefined && history.n >= 2 ? Math.sqrt(Math.max(0, history.variance)) : total / 4;
    const floor = call.maxOutput !== undefined ? input + call.maxOutput : 0;
    return {
      input,
      output: Math.round(output),
      total: Math.round(total),
      sigma: Math.round(sigma),
      k: this.kNow,
      need: Math.ceil(Math.max(total + this.kNow * sigma, floor)),
      latencyMs: Math.round(history?.latencyMs ?? 0),
    };
  }

  record(call: CallFeatures, estimate: Estimate, actual: Actual): void {
    const key = runKey(call);
    let run = this.runs.get(key);
    if (run === undefined) {
      run = new History();
      if (this.runs.size >= this.options.maxRuns) {
        const oldest = this.runs.keys().next().value;
        if (oldest !== undefined) this.runs.delete(oldest);
      }
    } else {
      this.runs.delete(key);
    }
    this.runs.set(key, run);
    run.learn(this.options.alpha, call, estimate.total, actual);
    let model = this.models.get(call.model);
    if (model === undefined) {
      model = new History();
      this.models.set(call.model, model);
    }
    model.learn(this.options.alpha, call, estimate.total, actual);
  }

  slipped(): void {
    this.kNow = Math.min(this.options.kMax, this.kNow + this.options.kStep);
  }
}

function runKey(call: CallFeatures): string {
  return `${call.model}\u0000${call.runId}`;
}
