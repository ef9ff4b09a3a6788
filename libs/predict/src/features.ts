import {
  type Actual,
  type CallFeatures,
  type CostEstimator,
  ESTIMATOR_DEFAULTS,
  type Estimate,
  type EstimatorOptions,
  InputRatio,
} from "./estimator.js";

/** The features a `FeatureEstimator` may learn from. */
export type FeatureName = "model" | "tag" | "tools" | "messages" | "input";

export const FEATURE_NAMES: readonly FeatureName[] = ["model", "tag", "tools", "messages", "input"];

// Names (models, tags) are hashed into this many columns each: a fixed-size problem
// whatever the fleet's vocabulary.
const BUCKETS = 16;
// The ridge penalty: keeps the solution defined before every column has been seen.
const LAMBDA = 1;
// The normal equations are solved again after this many new observations.
const SOLVE_EVERY = 8;

/**
 * A least-squares fit with a ridge penalty, learnt online: the normal equations are
 * accumulated as observations come and solved now and then (a few dozen columns).
 */
class Ridge {
  private readonly xtx: Float64Array;
  private readonly xty: Float64Array;
  private weights: Float64Array;
  private pending = 0;

  constructor(private readonly size: number) {
    this.xtx = new Float64Array(size * size);
    this.xty = new Float64Array(size);
    this.weights = new Float64Array(size);
    for (let i = 0; i < size; i++) this.xtx[i * size + i] = LAMBDA;
  }

  learn(x: Float64Array, y: number): void {
    const n = this.size;
    for (let i = 0; i < n; i++) {
      const xi = x[i]!;
      if (xi === 0) continue;
      this.xty[i]! += xi * y;
      for (let j = 0; j < n; j++) this.xtx[i * n + j]! += xi * x[j]!;
    }
    if (++this.pending >= SOLVE_EVERY || this.pending === 1) this.solve();
  }

  predict(x: Float64Array): number {
    let sum = 0;
    for (let i = 0; i < this.size; i++) sum += this.weights[i]! * x[i]!;
    return sum;
  }

  /** Gaussian elimination with partial pivoting on a copy of the normal equations. */
  private solve(): void {
    this.pending = 0;
    const n = this.size;
    const a = Float64Array.from(this.xtx);
    const b = Float64Array.from(this.xty);
    for (let col = 0; col < n; col++) {
      let pivot = col;
      for (let row = col + 1; row < n; row++) {
        if (Math.abs(a[row * n + col]!) > Math.abs(a[pivot * n + col]!)) pivot = row;
      }
      if (a[pivot * n + col] === 0) continue;
      if (pivot !== col) {
        for (let k = 0; k < n; k++) {
          const t = a[col * n + k]!;
          a[col * n + k] = a[pivot * n + k]!;
          a[pivot * n + k] = t;
        }
        const t = b[col]!;
        b[col] = b[pivot]!;
        b[pivot] = t;
      }
      for (let row = col + 1; row < n; row++) {
        const factor = a[row * n + col]! / a[col * n + col]!;
        if (factor === 0) continue;
        for (let k = col; k < n; k++) a[row * n + k]! -= factor * a[col * n + k]!;
        b[row]! -= factor * b[col]!;
      }
    }
    const w = new Float64Array(n);
    for (let row = n - 1; row >= 0; row--) {
      let sum = b[row]!;
      for (let k = row + 1; k < n; k++) sum -= a[row * n + k]! * w[k]!;
      const diagonal = a[row * n + row]!;
      w[row] = diagonal === 0 ? 0 : sum / diagonal;
    }
    this.weights = w;
  }
}

/**
 * An estimator that learns a call's output tokens and latency from the features declared
 * (`predict.features`: model, tag, tool count, message count, input size) by ridge
 * regression, instead of a run's moving average: it predicts a run's first calls from
 * what like calls cost across the fleet. Input, the error correction, σ and k work as in
 * the default estimator.
 */
export class FeatureEstimator implements CostEstimator {
  private readonly output: Ridge;
  private readonly latency: Ridge;
  private readonly size: number;
  private n = 0;
  private readonly ratio = new InputRatio();
  private error = 0;
  private variance = 0;
  private kNow: number;

  constructor(
    private readonly features: readonly FeatureName[],
    private readonly options: EstimatorOptions = ESTIMATOR_DEFAULTS,
  ) {
    this.size = 1 + features.reduce((sum, f) => sum + (f === "model" || f === "tag" ? BUCKETS : 1), 0);
    this.output = new Ridge(this.size);
    this.latency = new Ridge(this.size);
    this.kNow = options.k;
  }

  get k(): number {
    return this.kNow;
  }

  estimate(call: CallFeatures): Estimate {
    const x = this.vector(call);
    const input = this.ratio.input(call);
    let output = this.n === 0 ? this.options.defaultOutput : Math.max(0, this.output.predict(x));
    if (call.maxOutput !== undefined) output = Math.min(output, call.maxOutput);
    const total = Math.max(1, input + output + this.error);
    const sigma = this.n >= 2 ? Math.sqrt(Math.max(0, this.variance)) : total / 4;
    const floor = call.maxOutput !== undefined ? input + call.maxOutput : 0;
    return {
      input,
      output: Math.round(output),
      total: Math.round(total),
      sigma: Math.round(sigma),
      k: this.kNow,
      need: Math.ceil(Math.max(total + this.kNow * sigma, floor)),
      latencyMs: this.n === 0 ? 0 : Math.max(0, Math.round(this.latency.predict(x))),
    };
  }

  record(call: CallFeatures, estimate: Estimate, actual: Actual): void {
    const x = this.vector(call);
    const alpha = this.options.alpha;
    this.ratio.learn(alpha, call, actual);
    const miss = actual.input + actual.output - estimate.total;
    if (this.n === 0) {
      this.variance = miss * miss;
    } else {
      const deviation = miss - this.error;
      this.error += alpha * deviation;
      this.variance = (1 - alpha) * (this.variance + alpha * deviation * deviation);
    }
    this.n += 1;
    this.output.learn(x, actual.output);
    this.latency.learn(x, actual.latencyMs);
  }

  slipped(): void {
    this.kNow = Math.min(this.options.kMax, this.kNow + this.options.kStep);
  }

  private vector(call: CallFeatures): Float64Array {
    const x = new Float64Array(this.size);
    x[0] = 1;
    let at = 1;
    for (const feature of this.features) {
      switch (feature) {
        case "model":
          x[at + bucket(call.model)] = 1;
          at += BUCKETS;
          break;
        case "tag":
          x[at + bucket(call.tag)] = 1;
          at += BUCKETS;
          break;
        case "tools":
          x[at++] = call.toolCount;
          break;
        case "messages":
          x[at++] = call.messageCount;
          break;
        case "input":
          x[at++] = Math.log1p(call.countedInput);
          break;
      }
    }
    return x;
  }
}

/** FNV-1a of a name, into one of the columns its feature has. */
function bucket(name: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    hash ^= name.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % BUCKETS;
}
