import { randomUUID } from "node:crypto";
import type { Logger } from "@holdfast/log";
import {
  type DeclaredLimits,
  type Figures,
  type Grant,
  type Need,
  type ReserveOutcome,
  SharedWindows,
  type SliceRecord,
  type WindowShape,
} from "@holdfast/predict";
import type {
  ListSharedWindowsResponse,
  ReleaseSliceRequest,
  ReserveRequest,
  ReserveResponse,
  WindowAmounts,
  WindowFigures,
} from "@holdfast/proto";
import { BudgetNotReadyError, InvalidBudgetRequestError } from "../errors.js";

/** A server stream of Reserve answers, as grpc-js hands it to the handler. */
export interface ReserveStream {
  readonly request: ReserveRequest;
  readonly cancelled: boolean;
  write(message: ReserveResponse): boolean;
  end(): void;
  on(event: "cancelled", listener: () => void): unknown;
  emit(event: "error", error: unknown): boolean;
}

export interface WindowCoordinatorOptions {
  sliceMs: number;
  agingMs: number;
  /** The shape an operator said an upstream's windows have (`predict.window_shapes`); undefined: learnt. */
  knownShape?: (upstream: string) => WindowShape | undefined;
  /** The limits an operator said an upstream enforces (`predict.limits`), for keys that report none. */
  declaredLimits?: (upstream: string) => DeclaredLimits | undefined;
  clock: () => number;
  log: Logger;
  /**
   * Keeps a granted slice before its gateway may spend it, so a restarted coordinator
   * still counts it (a KV bucket); a slice that cannot be kept is not granted.
   */
  persist: (record: SliceRecord) => Promise<void>;
}

/**
 * The shared rate-limit windows behind gRPC `holdfast.v1.RateWindows`: each Reserve is
 * decided at once (granted, unknown, checkpoint, too large) or queued, its stream kept
 * open until the call's turn comes; a timer wakes the queue when the next turn is due,
 * and a slice handed back (or a waiter leaving) wakes it at once. Every slice is kept
 * (`persist`) before its gateway hears of it.
 */
export class WindowCoordinator {
  readonly windows: SharedWindows;
  private readonly waiting = new Map<string, ReserveStream>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: WindowCoordinatorOptions) {
    this.windows = new SharedWindows({
      sliceMs: options.sliceMs,
      agingMs: options.agingMs,
      knownShape: options.knownShape,
      declaredLimits: options.declaredLimits,
    });
  }

  reserve(stream: ReserveStream): void {
    const request = stream.request;
    const nowMs = this.options.clock();
    try {
      if (this.closed) throw new BudgetNotReadyError("the rate-limit coordinator is closing");
      if (!/^[0-9a-f]{16}$/.test(request.keyId) || request.gateway === "" || request.need === undefined) {
        throw new InvalidBudgetRequestError(
          "a reservation needs a key id, a gateway and what the call needs",
        );
      }
    } catch (error) {
      stream.emit("error", toStatusError(error));
      return;
    }
    const ticket = randomUUID();
    const need = needOf(request.need);
    const outcome = this.windows.reserve(
      {
        ticket,
        keyId: request.keyId,
        ...(request.upstream === "" ? {} : { upstream: request.upstream }),
        gateway: request.gateway,
        need,
        floor: request.floor === undefined ? need : needOf(request.floor),
        wantCalls: Math.max(1, request.wantCalls),
        priority: request.priority,
        sinceMs: request.sinceMs > 0 ? request.sinceMs : nowMs,
        thresholdMs: request.thresholdMs,
        ...(request.deadlineMs > 0 ? { deadlineMs: request.deadlineMs } : {}),
        ...(request.returnedLeaseId === ""
          ? {}
          : {
              returned: {
                leaseId: request.returnedLeaseId,
                left: request.returnedLeft === undefined ? ZERO : needOf(request.returnedLeft),
                ...(request.returnedLastSentAtMs > 0 ? { lastSentAtMs: request.returnedLastSentAtMs } : {}),
              },
            }),
      },
      nowMs,
    );
    if (outcome.kind === "granted") {
      void this.answerGrant(stream, outcome.lease, false);
    } else {
      stream.write(responseOf(outcome));
      if (outcome.kind === "queued") {
        this.waiting.set(ticket, stream);
        stream.on("cancelled", () => {
          if (!this.waiting.delete(ticket)) return;
          this.windows.cancel(ticket);
          this.wake();
        });
      } else stream.end();
    }
    // What came back with the request may be what the head of a queue was waiting for, and
    // then this call too, queued behind it: the queue is served only once this call's stream
    // is known. Served before, its turn found no stream to tell, so its room went back and
    // its stream waited for a turn no longer queued (a stall of up to predict.max_wait_s).
    if (outcome.kind === "queued" || request.returnedLeaseId !== "") this.wake();
  }

  release(request: ReleaseSliceRequest): void {
    if (request.leaseId === "") throw new InvalidBudgetRequestError("a release needs the slice's lease id");
    this.windows.release(
      request.leaseId,
      request.left === undefined ? ZERO : needOf(request.left),
      this.options.clock(),
      request.lastSentAtMs > 0 ? request.lastSentAtMs : undefined,
    );
    this.wake();
  }

  list(): ListSharedWindowsResponse {
    return {
      windows: this.windows.list(this.options.clock()).map((key) => ({
        keyId: key.keyId,
        upstream: key.upstream,
        cooldownUntilMs: key.cooldownUntilMs,
        queued: key.queued,
        slices: key.slices,
        dimensions: key.dimensions.map((d) => ({
          dimension: DIMENSION_NAMES[d.dimension],
          limit: d.limit,
          left: d.left,
          perMinute: d.perMinute,
        })),
      })),
    };
  }

  /** Serves every queue whose turn has come, then sleeps until the next one is due. */
  wake(): void {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    const nowMs = this.options.clock();
    const { granted, nextMs } = this.windows.tick(nowMs);
    for (const { ticket, lease } of granted) {
      const stream = this.waiting.get(ticket);
      this.waiting.delete(ticket);
      if (stream === undefined || stream.cancelled) {
        // The waiter left as its turn came: its room goes back.
        this.windows.release(lease.leaseId, lease.amounts, nowMs);
        continue;
      }
      void this.answerGrant(stream, lease, true);
    }
    if (nextMs !== undefined) {
      this.timer = setTimeout(() => this.wake(), Math.max(1, nextMs - nowMs));
    }
  }

  /** Keeps the slice, then tells its gateway; a slice that cannot be kept goes back, and the gateway decides alone. */
  private async answerGrant(stream: ReserveStream, lease: Grant, queued: boolean): Promise<void> {
    const record = this.windows.record(lease.leaseId);
    try {
      if (record !== undefined) await this.options.persist(record);
    } catch (error) {
      this.options.log.error({ err: error }, "could not keep a rate-limit slice: not granted");
      this.windows.release(lease.leaseId, lease.amounts, this.options.clock());
      stream.emit(
        "error",
        toStatusError(new BudgetNotReadyError("the coordinator could not keep the slice")),
      );
      if (queued) this.wake();
      return;
    }
    if (stream.cancelled) {
      this.windows.release(lease.leaseId, lease.amounts, this.options.clock());
      this.wake();
      return;
    }
    stream.write({ outcome: { $case: "granted", value: grantOf(lease) } });
    stream.end();
  }

  /** Ends every waiting stream (UNAVAILABLE: the gateway decides alone meanwhile). */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    for (const [ticket, stream] of this.waiting) {
      this.windows.cancel(ticket);
      stream.emit("error", toStatusError(new BudgetNotReadyError("the rate-limit coordinator is closing")));
    }
    this.waiting.clear();
  }
}

/** An error as grpc-js sends it on a stream: a code and details. */
function toStatusError(error: unknown): { code: number; details: string } {
  if (error instanceof BudgetNotReadyError || error instanceof InvalidBudgetRequestError) {
    return { code: error.grpcStatus, details: error.message };
  }
  return { code: 13, details: "the rate-limit coordinator failed while answering" };
}

const ZERO: Need = Object.freeze({ requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 });

const DIMENSION_NAMES = {
  requests: "requests",
  tokens: "tokens",
  inputTokens: "input_tokens",
  outputTokens: "output_tokens",
} as const;

function needOf(amounts: WindowAmounts): Need {
  return {
    requests: Math.max(0, amounts.requests),
    tokens: Math.max(0, amounts.tokens),
    inputTokens: Math.max(0, amounts.inputTokens),
    outputTokens: Math.max(0, amounts.outputTokens),
  };
}

function amountsOf(need: Need): WindowAmounts {
  return {
    requests: Math.round(need.requests),
    tokens: Math.round(need.tokens),
    inputTokens: Math.round(need.inputTokens),
    outputTokens: Math.round(need.outputTokens),
  };
}

function figuresOf(figures: Figures): WindowFigures {
  return {
    dimension: figures.dimension === undefined ? "" : DIMENSION_NAMES[figures.dimension],
    limit: figures.limit,
    remaining: figures.remaining,
    needed: figures.needed,
    resetAtMs: figures.resetAtMs,
  };
}

function grantOf(lease: Grant) {
  return {
    leaseId: lease.leaseId,
    amounts: amountsOf(lease.amounts),
    calls: lease.calls,
    validForMs: lease.validForMs,
  };
}

function responseOf(outcome: ReserveOutcome): ReserveResponse {
  switch (outcome.kind) {
    case "granted":
      return { outcome: { $case: "granted", value: grantOf(outcome.lease) } };
    case "unknown":
      return { outcome: { $case: "unknown", value: { validForMs: outcome.validForMs } } };
    case "queued":
      return {
        outcome: { $case: "queued", value: { etaMs: outcome.etaMs, figures: figuresOf(outcome.figures) } },
      };
    case "checkpoint":
      return {
        outcome: {
          $case: "checkpoint",
          value: { untilMs: outcome.untilMs, why: outcome.why, figures: figuresOf(outcome.figures) },
        },
      };
    case "too_large":
      return { outcome: { $case: "tooLarge", value: { figures: figuresOf(outcome.figures) } } };
  }
}
