import type { Api, Trip } from "@holdfast/events";
import type { Prediction, RouteChoice, Usage } from "@holdfast/proto";
import type { AnswerSummary, ApiShape, RequestView } from "@holdfast/providers";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { GatewayError } from "../errors.js";
import type { ResolvedRun } from "../identify/resolve.js";
import type { Upstream } from "../upstream/upstream.js";
import type { ResponseWriter } from "./writer.js";

/** One model call as the pipeline's hooks see it. */
export interface Call {
  readonly shape: ApiShape;
  readonly api: Api;
  readonly view: RequestView;
  readonly run: ResolvedRun;
  readonly stepId: string;
  readonly request: FastifyRequest;
  /** The client's side: whether anything has been written yet, keepalives, the answer. */
  readonly writer: ResponseWriter;
  /** Aborted when the client goes away. */
  readonly clientGone: AbortSignal;
  /** Input tokens estimated from the body sent (about four characters a token; a compaction lowers it). */
  estimatedInputTokens: number;
  /** Cost reserved for this call while in flight: its input, and the run's usual output, priced. */
  reservedNanoUsd: number;
  /** The model the reservation was priced for (a routing feature may send the call to another). */
  reservedFor: string;
  /** That model has no known price, and a cost limit or budget applies to the run. */
  unpriced: boolean;
  /** Budget leases this call's reservation was taken from (a budget feature fills it). */
  readonly budgetLeases: string[];
  /**
   * The call's credentials (its API key, a route target's own, a tenant's Holdfast key),
   * kept out of everything recorded about it; the first is the one the provider is sent
   * ("" when the call sends none).
   */
  secrets: readonly string[];
  /** Where the call goes: its API shape's upstream, or the route target a routing feature chose. */
  upstream: Upstream;
  /** The origin (scheme://host:port) of that upstream. */
  upstreamOrigin: string;
  /** The body as forwarded to the provider (its model a route target's). */
  upstreamBody: Buffer;
  /** The model asked of the provider: the request's, or a route target's. */
  model: string;
  /** Headers that replace the client's credential when forwarded (a route target's own key). */
  credentialHeaders: Readonly<Record<string, string>> | undefined;
  /**
   * A call to a routed model alias: where it went and why (recorded with its start), and
   * the model name its answer shows the agent (the alias; undefined: as the provider says).
   */
  route: { readonly choice: RouteChoice; readonly answerModel: string | undefined } | undefined;
  /** The step's number in its run, once the log has started it (0 before). */
  step: number;
  /** What rate-limit prediction decided before the call went on (recorded with its start). */
  prediction: Prediction | undefined;
  /**
   * Aborted when a feature gives up on the call while it waits (parked on a held run): its
   * reason, a GatewayError, is the answer the client gets instead.
   */
  readonly giveUp: AbortController;
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

/**
 * What a hook decides before forward: go on; go on, but only once the log has accepted
 * the step's start (a limit or budget is near: no overlap of the start with the
 * provider's latency); trip the run (a budget across runs is spent: the run is held or
 * stopped as `on_trip` says, and the call parked or refused); or answer the client with
 * this error instead.
 */
export type Verdict =
  | { readonly kind: "continue" }
  | { readonly kind: "confirm" }
  | { readonly kind: "trip"; readonly trip: Trip; readonly action?: "hold" | "stop" }
  | { readonly kind: "refuse"; readonly error: GatewayError };

export const CONTINUE: Verdict = Object.freeze({ kind: "continue" });
export const CONFIRM: Verdict = Object.freeze({ kind: "confirm" });

/** Decides before the call is recorded and forwarded (limits, holds, waits, routing). */
export type BeforeForward = (call: Call) => Verdict | Promise<Verdict>;
/**
 * Decides before the end of the answer reaches the client: after the provider answered, the
 * answer was metered and its outcome handed to the log (an append the hook's own appends
 * for the run queue behind), before a buffered body is sent or a stream's terminal event
 * is released (the tool-call gate).
 */
export type BeforeDeliver = (call: Call, answer: Answer) => Verdict | Promise<Verdict>;

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

/**
 * Asked when the provider refused a started call (a 429): how long to wait before sending
 * it again, or undefined to let the client have the refusal. `attempt` is the one that was refused.
 */
export type RetryPolicy = (call: Call, answer: UpstreamAnswer, attempt: number) => number | undefined;

/**
 * Asked when a started call's attempt failed (a 429, a 5xx, or no answer at all): the
 * route target the call goes to next (the call already moved there), or undefined to keep
 * it where it is (a 429 is then retried in place, as the retry policy says).
 */
export type Reroute = (
  call: Call,
  failure: { statusCode: number } | { error: unknown },
) => RouteChoice | undefined;

/** Told once a call is over, however it ended (answered, refused, abandoned). */
export type OnCallEnd = (call: Call) => void;

/** The two decision points of the pipeline, filled by feature plugins, and what follows an outcome. */
export class PipelineHooks {
  readonly beforeForward: BeforeForward[] = [];
  readonly beforeDeliver: BeforeDeliver[] = [];
  readonly afterOutcome: AfterOutcome[] = [];
  readonly upstreamAnswered: OnUpstreamAnswer[] = [];
  readonly callEnded: OnCallEnd[] = [];
  /** The one policy for sending a refused call again (rate-limit prediction sets it). */
  retry: RetryPolicy | undefined;
  /** Where a failed attempt goes next (routing sets it). */
  reroute: Reroute | undefined;

  async forward(call: Call): Promise<Verdict> {
    let confirm = false;
    for (const hook of this.beforeForward) {
      const verdict = await hook(call);
      if (verdict.kind === "confirm") confirm = true;
      else if (verdict.kind !== "continue") return verdict;
    }
    return confirm ? CONFIRM : CONTINUE;
  }

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

  ended(call: Call): void {
    for (const hook of this.callEnded) hook(call);
  }

  async deliver(call: Call, answer: Answer): Promise<Verdict> {
    for (const hook of this.beforeDeliver) {
      const verdict = await hook(call, answer);
      if (verdict.kind !== "continue") return verdict;
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
