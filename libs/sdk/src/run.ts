import type { RecordedStep, StepReport } from "@holdfast/proto";
import { NonRetriable, RunRevokedError, StepFailedError, UnrecordableResultError } from "./errors.js";

/** How a run's steps reach the log: each resolves once the step is recorded. */
export interface StepRecorder {
  record(report: Omit<StepReport, "requestId" | "runId" | "lease">): Promise<void>;
}

export interface StepOptions {
  /** Attempts after the first (default 4: five in all). 0: never retried. */
  readonly retries?: number;
}

/** One step of a `run.parallel` turn. */
export interface ParallelStep<T> {
  readonly label: string;
  readonly fn: (attempt: StepAttempt) => T | Promise<T>;
  readonly retries?: number;
}

/** What a step's function is told of the attempt it is. */
export interface StepAttempt {
  /** 1-based, counted across re-drives of the run. */
  readonly attempt: number;
  /** Aborted when the run is no longer this worker's. */
  readonly signal: AbortSignal;
}

export interface RunSettings {
  readonly runId: string;
  readonly lease: number;
  readonly tag: string;
  readonly tenant: string;
  /** Steps recorded before (reused by label and ordinal), and the attempts failed steps took so far. */
  readonly recorded: readonly RecordedStep[];
  readonly attempts: Readonly<Record<string, number>>;
  /** Waits between a step's attempts (the last repeats): 1, 2, 4, 8 s by default. */
  readonly retryDelaysMs: readonly number[];
  /** The gateway's base (without /v1), for the model clients; undefined when none is known. */
  readonly gatewayUrl: string | undefined;
  /** The run's tenant's gateway key (X-Holdfast-Key), for a gateway with `tenants` configured. */
  readonly tenantKey?: string | undefined;
  readonly recorder: StepRecorder;
}

/** The largest result a step may record (it is part of an event of the run's log). */
export const MAX_RESULT_BYTES = 512 * 1024;

/**
 * A result as it is recorded: its JSON ("" for undefined). Throws a clear error for what
 * JSON cannot hold (a function, a symbol, a BigInt, a cycle) or what is too large for an
 * event. `what` names it in the message ("a step", "a run").
 */
export function recordableJson(value: unknown, what: string): string {
  if (value === undefined) return "";
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError(`a ${typeof value} is not a JSON value`);
  const bytes = Buffer.byteLength(json);
  if (bytes > MAX_RESULT_BYTES) {
    throw new RangeError(
      `${bytes} bytes, more than the ${MAX_RESULT_BYTES} ${what} may record: keep large content elsewhere and return a reference to it`,
    );
  }
  return json;
}

export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = Object.freeze([1_000, 2_000, 4_000, 8_000]);
const DEFAULT_RETRIES = 4;

/**
 * A durable run as its agent's code sees it. Each `step` is checkpointed when it returns:
 * run again (a re-drive after a failure, another worker after this one died), a step
 * recorded before hands back what it returned then instead of running. Steps are matched
 * by label and ordinal (the nth step of that label in the run), so the code must take the
 * same steps in the same order for the same input: what the steps return is what may
 * differ, and that is what is recorded.
 */
export class Run {
  readonly id: string;
  readonly tag: string;
  readonly tenant: string;
  private readonly recorded = new Map<string, string>();
  private readonly ordinals = new Map<string, number>();
  private readonly controller = new AbortController();
  private degradedReason = "";
  private reusedSteps = 0;
  private ranSteps = 0;
  private openaiClient: Promise<unknown> | undefined;
  private anthropicClient: Promise<unknown> | undefined;
  /** The step that raised last (what the run failed in, if it fails). */
  failedStep: { label: string; ordinal: number } | undefined;

  constructor(private readonly settings: RunSettings) {
    this.id = settings.runId;
    this.tag = settings.tag;
    this.tenant = settings.tenant;
    for (const step of settings.recorded) this.recorded.set(`${step.label}#${step.ordinal}`, step.resultJson);
  }

  /** Aborted when the run is no longer this worker's (held, cancelled, past its ceiling, its lease lost). */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Steps handed back from the run's record, and steps run, in this execution. */
  get stats(): { reused: number; ran: number } {
    return { reused: this.reusedSteps, ran: this.ranSteps };
  }

  get degraded(): string {
    return this.degradedReason;
  }

  /**
   * Runs `fn` as the run's next step labelled `label`, and records what it returns before
   * handing it back (as JSON makes it: what a re-drive hands back too). A step that raises
   * is retried (`retries`, default 4, waiting 1, 2, 4, 8 s) unless it raises NonRetriable;
   * each attempt is recorded. A step recorded before is not run: its recorded result is
   * returned.
   */
  step<T>(
    label: string,
    fn: (attempt: StepAttempt) => T | Promise<T>,
    options: StepOptions = {},
  ): Promise<T> {
    if (typeof label !== "string" || label === "") throw new TypeError("a step needs a label");
    // The ordinal is taken now, before anything is awaited: steps started together (a
    // parallel turn) are numbered in the order the code started them. Branches that await
    // and then take more steps of one shared label would be numbered by timing, so each
    // branch needs labels of its own (said in the README's Steps paragraph).
    const ordinal = (this.ordinals.get(label) ?? 0) + 1;
    this.ordinals.set(label, ordinal);
    const recorded = this.recorded.get(`${label}#${ordinal}`);
    if (recorded !== undefined) {
      this.reusedSteps += 1;
      return Promise.resolve(parseResult(recorded) as T);
    }
    return this.execute(label, ordinal, fn, options.retries ?? DEFAULT_RETRIES);
  }

  /**
   * A turn's independent steps (e.g. its tool calls) run at once, each checkpointed on its
   * own. Resolves with their results in order once all have settled; if any failed, rejects
   * with the first failure (the others' results are recorded, so a re-drive runs only the
   * ones that did not finish).
   */
  async parallel<T>(steps: readonly ParallelStep<T>[]): Promise<T[]> {
    const running = steps.map((step) =>
      this.step(step.label, step.fn, step.retries === undefined ? {} : { retries: step.retries }),
    );
    const settled = await Promise.allSettled(running);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
  }

  /** Says the run's answer is not what it should be (it returns anyway); recorded on its end. */
  markDegraded(reason: string): void {
    this.degradedReason = reason;
  }

  /**
   * Where this run's model calls go so that each is metered against it (and held, gated,
   * scheduled around the provider's window): the gateway's base URL and the headers that
   * name the run (its id, tag and tenant, and its tenant's gateway key when the worker has
   * it). For any SDK: `new OpenAI({ baseURL, defaultHeaders: headers })`.
   */
  get gateway(): { baseURL: string; headers: Record<string, string> } {
    const base = this.settings.gatewayUrl;
    if (base === undefined) {
      throw new Error(
        "no gateway is known to this worker: pass worker({ gatewayUrl }) or set HOLDFAST_GATEWAY_URL (the scheduler's scheduler.gateway_url is told to workers)",
      );
    }
    const headers: Record<string, string> = { "X-Holdfast-Run": this.id };
    if (this.tag !== "") headers["X-Holdfast-Tag"] = this.tag;
    // The run's id is its tenant's (`<tenant>/…`): the gateway scopes it the same only when
    // told the tenant, by the header, or (with tenants configured) by the tenant's key.
    if (this.tenant !== "") headers["X-Holdfast-Tenant"] = this.tenant;
    const key = this.settings.tenantKey;
    if (key !== undefined && key !== "") headers["X-Holdfast-Key"] = key;
    return { baseURL: base, headers };
  }

  /** An `openai` client whose calls go through the gateway under this run (OPENAI_API_KEY, or `apiKey`). */
  async openai(options: { apiKey?: string } = {}): Promise<import("openai").OpenAI> {
    this.openaiClient ??= import("openai").then(({ OpenAI }) => {
      const { baseURL, headers } = this.gateway;
      return new OpenAI({
        baseURL: `${baseURL}/v1`,
        apiKey: options.apiKey ?? process.env.OPENAI_API_KEY ?? "",
        defaultHeaders: headers,
        // The run's steps retry; the SDK's own retries would only repeat a failed step's call.
        maxRetries: 0,
        fetch: this.fetchForRun(),
      });
    });
    return this.openaiClient as Promise<import("openai").OpenAI>;
  }

  /** An `@anthropic-ai/sdk` client whose calls go through the gateway under this run (ANTHROPIC_API_KEY, or `apiKey`). */
  async anthropic(options: { apiKey?: string } = {}): Promise<import("@anthropic-ai/sdk").Anthropic> {
    this.anthropicClient ??= import("@anthropic-ai/sdk").then(({ Anthropic }) => {
      const { baseURL, headers } = this.gateway;
      return new Anthropic({
        baseURL,
        apiKey: options.apiKey ?? process.env.ANTHROPIC_API_KEY ?? "",
        defaultHeaders: headers,
        maxRetries: 0,
        fetch: this.fetchForRun(),
      });
    });
    return this.anthropicClient as Promise<import("@anthropic-ai/sdk").Anthropic>;
  }

  /**
   * fetch, with every request of the run given up when the run is no longer this worker's
   * (a held run's call parked in the gateway leaves, instead of reaching the provider after
   * the run went elsewhere).
   */
  private fetchForRun(): typeof fetch {
    const run = this.controller.signal;
    return (input, init) =>
      fetch(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, run]) : run });
  }

  /** The run is no longer this worker's: its code is told (signal), and nothing more is recorded. */
  revoke(reason: string): void {
    if (!this.controller.signal.aborted) this.controller.abort(new RunRevokedError(this.id, reason));
  }

  private async execute<T>(
    label: string,
    ordinal: number,
    fn: (attempt: StepAttempt) => T | Promise<T>,
    retries: number,
  ): Promise<T> {
    const key = `${label}#${ordinal}`;
    const before = this.settings.attempts[key] ?? 0;
    const attempts = Math.max(0, Math.floor(retries)) + 1;
    for (let n = 1; ; n++) {
      const attempt = before + n;
      this.revokedCheck();
      const startedAt = performance.now();
      let value: T;
      try {
        value = await fn({ attempt, signal: this.controller.signal });
      } catch (error) {
        this.revokedCheck();
        const durationMs = Math.round(performance.now() - startedAt);
        const final = error instanceof NonRetriable || n >= attempts;
        await this.settings.recorder.record({
          label,
          ordinal,
          attempt,
          ok: false,
          resultJson: "",
          error: messageOf(error),
          final,
          durationMs,
        });
        if (final) {
          this.failedStep = { label, ordinal };
          throw new StepFailedError(label, ordinal, attempt, error);
        }
        await this.pause(
          this.settings.retryDelaysMs[Math.min(n - 1, this.settings.retryDelaysMs.length - 1)] ?? 0,
        );
        continue;
      }
      this.revokedCheck();
      const durationMs = Math.round(performance.now() - startedAt);
      let resultJson: string;
      try {
        resultJson = recordableJson(value, "a step");
      } catch (error) {
        this.failedStep = { label, ordinal };
        const unrecordable = new UnrecordableResultError(label, error);
        await this.settings.recorder.record({
          label,
          ordinal,
          attempt,
          ok: false,
          resultJson: "",
          error: unrecordable.message,
          final: true,
          durationMs,
        });
        throw new StepFailedError(label, ordinal, attempt, unrecordable);
      }
      await this.settings.recorder.record({
        label,
        ordinal,
        attempt,
        ok: true,
        resultJson,
        error: "",
        final: true,
        durationMs,
      });
      this.ranSteps += 1;
      return parseResult(resultJson) as T;
    }
  }

  private revokedCheck(): void {
    if (this.controller.signal.aborted) throw this.controller.signal.reason;
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const signal = this.controller.signal;
      const timer = setTimeout(() => {
        signal.removeEventListener("abort", stop);
        resolve();
      }, ms);
      const stop = () => {
        clearTimeout(timer);
        reject(signal.reason);
      };
      signal.addEventListener("abort", stop, { once: true });
    });
  }
}

function parseResult(json: string): unknown {
  return json === "" ? undefined : JSON.parse(json);
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 4_000);
  return String(error).slice(0, 4_000);
}
