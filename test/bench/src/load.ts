import { Pool } from "undici";

/** One API shape as the load generator calls it. */
export interface ShapeLoad {
  readonly name: string;
  readonly path: string;
  body(stream: boolean): string;
  readonly headers: Record<string, string>;
}

export const SHAPE_LOADS: readonly ShapeLoad[] = [
  {
    name: "chat",
    path: "/v1/chat/completions",
    headers: { authorization: "Bearer sk-bench" },
    body: (stream) =>
      JSON.stringify({
        model: "gpt-4o-mini",
        stream,
        messages: [
          { role: "system", content: "You are a benchmark." },
          { role: "user", content: "Reply with a short sentence about throughput." },
        ],
      }),
  },
  {
    name: "responses",
    path: "/v1/responses",
    headers: { authorization: "Bearer sk-bench" },
    body: (stream) =>
      JSON.stringify({
        model: "gpt-4o-mini",
        stream,
        instructions: "You are a benchmark.",
        input: "Reply with a short sentence about throughput.",
      }),
  },
  {
    name: "messages",
    path: "/v1/messages",
    headers: { "x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01" },
    body: (stream) =>
      JSON.stringify({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 256,
        stream,
        system: "You are a benchmark.",
        messages: [{ role: "user", content: "Reply with a short sentence about throughput." }],
      }),
  },
];

export interface PhaseOptions {
  readonly origin: string | readonly string[];
  readonly shape: ShapeLoad;
  readonly stream: boolean;
  readonly concurrency: number;
  readonly warmupMs: number;
  readonly measureMs: number;
  /** Run id of the i-th call. */
  readonly runOf: (i: number) => string;
  readonly headers?: Record<string, string>;
  /** Called when measuring starts and stops (CPU sampling). */
  readonly onMeasure?: (phase: "start" | "stop") => void;
  /** Stop after this many measured calls instead of after measureMs. */
  readonly calls?: number;
}

export interface PhaseResult {
  requests: number;
  errors: number;
  seconds: number;
  /** Whole call, sorted, ms. */
  latencies: Float64Array;
  /** To the first body byte, sorted, ms. */
  firstBytes: Float64Array;
  /** Whole call in the order made (for a long run: early versus late). */
  inOrder: Float64Array;
}

/**
 * Keeps `concurrency` calls in flight for the phase and records each one's latency and
 * time to first body byte. Several origins are called in turn (two gateways alternating).
 */
export async function runPhase(options: PhaseOptions): Promise<PhaseResult> {
  const origins = typeof options.origin === "string" ? [options.origin] : options.origin;
  const pools = origins.map(
    (origin) => new Pool(origin, { connections: options.concurrency, pipelining: 1 }),
  );
  const body = options.shape.body(options.stream);
  const headers = { "content-type": "application/json", ...options.shape.headers, ...options.headers };
  const latencies: number[] = [];
  const firstBytes: number[] = [];
  let errors = 0;
  let counter = 0;
  let measuring = false;
  let stop = false;
  let measured = 0;
  let done: (() => void) | undefined;
  const enough = new Promise<void>((resolve) => {
    done = resolve;
  });
  const worker = async () => {
    while (!stop) {
      const i = counter++;
      const pool = pools[i % pools.length]!;
      const start = performance.now();
      let first = 0;
      try {
        const response = await pool.request({
          path: options.shape.path,
          method: "POST",
          headers: { ...headers, "x-holdfast-run": options.runOf(i) },
          body,
        });
        for await (const _chunk of response.body) if (first === 0) first = performance.now();
        if (response.statusCode !== 200) errors += 1;
      } catch {
        errors += 1;
      }
      if (measuring) {
        const end = performance.now();
        latencies.push(end - start);
        firstBytes.push((first || end) - start);
        measured += 1;
        if (options.calls !== undefined && measured >= options.calls) done?.();
      }
    }
  };
  const workers = Array.from({ length: options.concurrency }, worker);
  await sleep(options.warmupMs);
  options.onMeasure?.("start");
  measuring = true;
  const started = performance.now();
  if (options.calls === undefined) await sleep(options.measureMs);
  else await enough;
  measuring = false;
  options.onMeasure?.("stop");
  const seconds = (performance.now() - started) / 1000;
  stop = true;
  await Promise.all(workers);
  await Promise.all(pools.map((pool) => pool.close()));
  return {
    requests: latencies.length,
    errors,
    seconds,
    latencies: Float64Array.from(latencies).sort(),
    firstBytes: Float64Array.from(firstBytes).sort(),
    inOrder: Float64Array.from(latencies),
  };
}

/** Several phases' calls as one phase's (rounds of one measurement taken in turn with others). */
export function mergePhases(parts: readonly PhaseResult[]): PhaseResult {
  const joined = (pick: (r: PhaseResult) => Float64Array) => {
    const out = new Float64Array(parts.reduce((n, r) => n + pick(r).length, 0));
    let at = 0;
    for (const r of parts) {
      out.set(pick(r), at);
      at += pick(r).length;
    }
    return out;
  };
  return {
    requests: parts.reduce((n, r) => n + r.requests, 0),
    errors: parts.reduce((n, r) => n + r.errors, 0),
    seconds: parts.reduce((n, r) => n + r.seconds, 0),
    latencies: joined((r) => r.latencies).sort(),
    firstBytes: joined((r) => r.firstBytes).sort(),
    inOrder: joined((r) => r.inOrder),
  };
}

export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
