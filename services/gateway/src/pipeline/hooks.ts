import type { Api, Trip } from "@holdfast/events";
import type { Prediction, RouteChoice, Usage } from "@holdfast/proto";
import type { AnswerSummary, ApiShape, RequestView } from "@holdfast/providers";
import type { RunLabels } from "@holdfast/runs";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { GatewayError } from "../errors.js";
import type { ResolvedRun } from "../identify/resolve.js";
import type { Upstream } from "../upstream/upstream.js";
import type { RequestBody } from "./body.js";
import type { CallOrigin } from "./origin.js";
import type { Waiting } from "./wait.js";
import type { ResponseWriter } from "./writer.js";

/**
 * Why a call was cancelled, as the reason of its one cancellation signal: the client left,
 * the gateway shut down while the call waited, or a feature gave up on it while it waited
 * (its error is the answer the client gets instead).
 */
export type Cancellation =
  | { readonly kind: "client_gone" }
  | { readonly kind: "shutdown" }
  | { readonly kind: "gave_up"; readonly error: GatewayError };

/**
 * One model call as the pipeline's hooks see it. Features read it; what they decide comes
 * back to the pipeline as an amendment, which the pipeline applies (only the pipeline
 * writes a call).
 */
export interface Call {
  readonly shape: ApiShape;
  readonly api: Api;
  readonly view: RequestView;
  readonly run: ResolvedRun;
  readonly labels: RunLabels;
  readonly stepId: string;
  readonly request: FastifyRequest;
  /** The client's side: whether anything has been written yet, keepalives, the answer. */
  readonly writer: ResponseWriter;
  /**
   * The call's one cancellation signal: aborted when the client goes away, when the gateway
   * shuts down while the call waits, or when a feature gives up on it; its reason a Cancellation.
   */
  readonly signal: AbortSignal;
  /** How the call was cancelled, if it was. */
  readonly cancelled: Cancellation | undefined;
  /** Cancels the call (a feature giving up on it while it waits); the first reason stands. */
  cancel(reason: Cancellation): void;
  /** The request body, parsed once, as features amended it. */
  readonly body: RequestBody;
  /**
   * An operator's call sent again from a recorded step (replay, fork, compare), checked
   * against the control token: holds, the gate and budgets let it by.
   */
  readonly origin: CallOrigin | undefined;
  /** The body as forwarded to the provider (its model a route target's). */
  readonly upstreamBody: Buffer;
  /** Input tokens estimated from the body sent (about four characters a token; a compaction lowers it). */
  readonly estimatedInputTokens: number;
  /** Cost reserved for this call while in flight: its input, and the run's usual output, priced. */
  readonly reservedNanoUsd: number;
  /** The model the reservation was priced for ("" until priced; a routing feature may send the call to another). */
  readonly reservedFor: string;
  /** That model has no known price, and a cost limit or budget applies to the run. */
  readonly unpriced: boolean;
  /** Budget leases this call's reservation was taken from. */
  readonly budgetLeases: readonly string[];
  /**
   * The call's credentials (its API key, a route target's own, a tenant's Holdfast key),
   * kept out of everything recorded about it; the first is the one the provider is sent
   * ("" when the call sends none).
   */
  readonly secrets: readonly string[];
  /** Where the call goes: its API shape's upstream, or the route target a routing feature chose. */
  readonly upstream: Upstream;
  /** The origin (scheme://host:port) of that upstream. */
  readonly upstreamOrigin: string;
  /** The model asked of the provider: the request's, or a route target's. */
  readonly model: string;
  /** Headers that replace the client's credential when forwarded (a route target's own key). */
  readonly credentialHeaders: Readonly<Record<string, string>> | undefined;
  /**
   * A call to a routed model alias: where it went and why (recorded with its start), and
   * the model name its answer shows the agent (the alias; undefined: as the provider says).
   */
  readonly route: { readonly choice: RouteChoice; readonly answerModel: string | undefined } | undefined;
  /** The step's number in its run, once the log has started it (0 before). */
  readonly step: number;
  /** What rate-limit prediction decided before the call went on (recorded with its start). */
  readonly prediction: Prediction | undefined;
}

/** A provider's answer to one attempt of a call, as its status line and headers came. */
export interface UpstreamAnswer {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** When the attempt was sent (ms since the epoch). */
  readonly sentAtMs: number;
}

/** An answer as the hooks before delivery see it: metered, its outcome on its way to the log. */
export interface Answer {
  readonly summary: AnswerSummary;
  /** The answer's tool calls as one signature ("" when it asks for none), as its outcome records it. */
  readonly toolCallsSignature: string;
}

/** Another upstream for the call: a route target, with its model, key and what the start records of it. */
export interface Destination {
  readonly upstream: Upstream;
  readonly model: string;
  readonly secrets: readonly string[];
  readonly credentialHeaders: Readonly<Record<string, string>> | undefined;
  readonly route: { readonly choice: RouteChoice; readonly answerModel: string | undefined };
}

/** What a feature found out for the call's start to record (its StartStep carries them). */
export interface StartNotes {
  /** The reservation, priced for the model the call goes to. */
  readonly reservation?: { readonly nanoUsd: number; readonly model: string; readonly unpriced: boolean };
  /** The budget leases the reservation was taken from. */
  readonly budgetLeases?: readonly string[];
  /** What rate-limit prediction decided. */
  readonly prediction?: Prediction;
}

/**
 * What a feature decides of a call, for the pipeline to apply:
 * - `continue`: go on (with what the start should record, if anything);
 * - `confirm`: go on, but only once the log has accepted the step's start (a limit or
 *   budget is near: no overlap of the start with the provider's latency);
 * - `wait`: wait `ms` in place (with keepalives), then ask the same feature again;
 * - `park`: the run is held: the call waits, parked, until it is resumed, and is then
 *   decided anew from the first feature. With a `trip` (a limit or budget is spent), the
 *   pipeline records the trip first (the run held or stopped as `action`, or `on_trip`,
 *   says) and the features after this one are not asked: the holds decide.
 * - `reroute`: send the call to another upstream (a route target);
 * - `rewrite`: send this body instead (a compaction; `json` its serialization, when the
 *   feature made one), then ask the same feature again;
 * - `refuse`: answer the client with this error instead.
 */
export type Amendment =
  | { readonly kind: "continue"; readonly notes?: StartNotes }
  | { readonly kind: "confirm"; readonly notes?: StartNotes }
  | { readonly kind: "wait"; readonly ms: number }
  | { readonly kind: "park"; readonly trip?: Trip; readonly action?: "hold" | "stop" }
  | { readonly kind: "reroute"; readonly to: Destination }
  | { readonly kind: "rewrite"; readonly body: Record<string, unknown>; readonly json?: Buffer }
  | { readonly kind: "refuse"; readonly error: GatewayError };

/** What features decided before forward, as the hooks of earlier versions called it. */
export type Verdict = Amendment;

export const CONTINUE: Amendment = Object.freeze({ kind: "continue" });
export const CONFIRM: Amendment = Object.freeze({ kind: "confirm" });

/** Decides before the call is recorded and forwarded (routing, pricing, prediction, budgets, holds). */
export type BeforeForward = (call: Call) => Amendment | Promise<Amendment>;
/**
 * Decides before the end of the answer reaches the client: after the provider answered, the
 * answer was metered and its outcome handed to the log (an append the hook's own appends
 * for the run queue behind), before a buffered body is sent or a stream's terminal event
 * is released (the tool-call gate). Continue or refuse.
 */
export type BeforeDeliver = (call: Call, answer: Answer) => Amendment | Promise<Amendment>;

/**
 * Told what a started step cost once its outcome is known (after the answer, off the
 * client's path): a budget feature settles its local account with it.
 */
export type AfterOutcome = (
  call: Call,
  cost: { known: boolean; nanoUsd: number },
  observed: { usage: Usage | undefined; latencyMs: number; status: number },
) => void;

/** Told of every attempt's answer from the provider, before its body is read (rate-limit headers). */
export type OnUpstreamAnswer = (call: Call, answer: UpstreamAnswer) => void;

/** How a started call's attempt failed: the provider refused it (a 429, a 5xx), or could not be reached. */
export type Failure = UpstreamAnswer | { readonly error: unknown };

/**
 * What a feature decides of a failed attempt: send it to another upstream at once
 * (`reroute`), or send it again after `ms` (`wait`) and, with a `turn`, once that has
 * come too (a slot of its key's calls at once), waiting for it at most `withinMs`: past
 * that, or cancelled, the client has the failure.
 */
export type Retry =
  | Extract<Amendment, { kind: "reroute" }>
  | {
      readonly kind: "wait";
      readonly ms: number;
      readonly turn?: { readonly promise: Promise<void>; readonly withinMs: number };
    };

/**
 * Asked when a started call's attempt failed (a 429, a 5xx, or no answer at all), in the
 * features' order, until one decides: `reroute` (send it to another route target at once)
 * or `wait` (send it again after `ms`, a 429's retry-after, and its turn); undefined leaves
 * it to the next (and, when none decides, the client gets the failure). `attempt` is the
 * one that failed.
 */
export type AfterFailure = (call: Call, failure: Failure, attempt: number) => Retry | undefined;

/** Told once a call is over, however it ended (answered, refused, abandoned). */
export type OnCallEnd = (call: Call) => void;

/**
 * Told when a call parks because its run is held (for as long as that takes): what a
 * feature took for it to go on (a slot of its key's calls at once) is given back, and
 * taken again when the call is decided anew after it.
 */
export type OnCallParked = (call: Call) => void;

/**
 * The pipeline's decision points, filled by the features in their declared order
 * (pipeline/order.ts), what follows an outcome, and the waiting the pipeline offers them.
 */
export class PipelineHooks {
  /** Before the call is recorded and forwarded, in order: routing, pricing, prediction, budgets. */
  readonly beforeForward: BeforeForward[] = [];
  /** Last before the start is appended: the holds (a held run's call parks here). */
  readonly beforeStart: BeforeForward[] = [];
  readonly beforeDeliver: BeforeDeliver[] = [];
  readonly afterOutcome: AfterOutcome[] = [];
  readonly upstreamAnswered: OnUpstreamAnswer[] = [];
  /** Where a failed attempt goes next (routing), or how long until it is sent again (prediction). */
  readonly afterFailure: AfterFailure[] = [];
  readonly callEnded: OnCallEnd[] = [];
  readonly callParked: OnCallParked[] = [];

  /** Waiting in place, parking and following a run's state, with keepalives: what features wait with. */
  constructor(readonly waiting: Waiting) {}

  outcome(
    call: Call,
    cost: { known: boolean; nanoUsd: number },
    observed: { usage: Usage | undefined; latencyMs: number; status: number },
  ): void {
    for (const hook of this.afterOutcome) hook(call, cost, observed);
  }

  answered(call: Call, answer: UpstreamAnswer): void {
    for (const hook of this.upstreamAnswered) hook(call, answer);
  }

  failed(call: Call, failure: Failure, attempt: number): Retry | undefined {
    for (const hook of this.afterFailure) {
      const amendment = hook(call, failure, attempt);
      if (amendment !== undefined) return amendment;
    }
    return undefined;
  }

  ended(call: Call): void {
    for (const hook of this.callEnded) hook(call);
  }

  parked(call: Call): void {
    for (const hook of this.callParked) hook(call);
  }

  async deliver(call: Call, answer: Answer): Promise<Amendment> {
    for (const hook of this.beforeDeliver) {
      const amendment = await hook(call, answer);
      if (amendment.kind !== "continue") return amendment;
    }
    return CONTINUE;
  }
}

declare module "fastify" {
  interface FastifyInstance {
    /** Where feature plugins add their decisions: `app.pipeline.beforeForward.push(hook)`. */
    pipeline: PipelineHooks;
  }
}

/**
 * A feature of the gateway: a fastify plugin that adds its decisions to `app.pipeline`
 * (and may add routes of its own), with whatever dependencies it closes over.
 */
export type GatewayFeature = (app: FastifyInstance) => Promise<void>;

/**
 * A fastify plugin whose decorations and hooks reach the whole app (what fastify-plugin
 * does), so a feature registered as a plugin can add to `app.pipeline`.
 */
export function shared<Options>(
  plugin: (app: FastifyInstance, options: Options) => Promise<void>,
): (app: FastifyInstance, options: Options) => Promise<void> {
  Object.assign(plugin, { [Symbol.for("skip-override")]: true });
  return plugin;
}
