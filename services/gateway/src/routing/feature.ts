import { ANTHROPIC_HEADERS, OPENAI_HEADERS, readRateLimits } from "@holdfast/predict";
import { type RouteChoice, RouteReason, RouteStanding } from "@holdfast/proto";
import {
  type Amendment,
  type Call,
  CONTINUE,
  type Destination,
  type GatewayFeature,
  type UpstreamAnswer,
} from "../pipeline/hooks.js";
import type { Upstreams } from "../upstream/upstream.js";
import type { Choice, Reason, Room, Route, Router, RouteTarget, Standing } from "./router.js";

export interface RoutingFeatureOptions {
  router: Router;
  upstreams: Upstreams;
  clock: () => number;
  /**
   * How much room a target's key window has for a call (rate-limit prediction's); without
   * it every target is taken as whole, and calls go in order around cooldowns and breakers.
   */
  roomOf?: (call: Call, target: { origin: string; credential: string; model: string }) => Room;
}

/** The caller's own credentials, the route, the target the call is at, and the targets that failed it. */
interface Routed {
  readonly route: Route;
  readonly secrets: readonly string[];
  readonly tried: Set<number>;
  target: RouteTarget;
}

/**
 * Routing at the pipeline's hook before forward, ahead of rate-limit prediction: a call
 * asking for a model alias goes to the route target whose key window has the most
 * headroom for it (before the 429, not after), with that target's model, key and base
 * URL; prediction then decides for that target's window. A target that fails a started
 * call (429, 5xx, unreachable) hands it on to the next available one in order at once,
 * within the same step; what each answer says (a 429's wait, a 5xx) is the target's
 * standing for the calls after it.
 */
export function routingFeature(options: RoutingFeatureOptions): GatewayFeature {
  const { router, upstreams, clock } = options;
  const routed = new WeakMap<Call, Routed>();

  const roomFor =
    (call: Call, state: Routed) =>
    (target: RouteTarget): Room => {
      if (options.roomOf === undefined) return { kind: "unknown" };
      const origin = upstreams.at(target.baseUrl).origin;
      return options.roomOf(call, {
        origin,
        credential: target.key ?? state.secrets[0] ?? "",
        model: target.model,
      });
    };

  /** Where the call goes at a target: its upstream, its model, its key (the pipeline moves it there). */
  const destination = (call: Call, state: Routed, choice: Choice): Destination => {
    const { target } = choice;
    const upstream = upstreams.at(target.baseUrl);
    state.target = target;
    return {
      upstream,
      model: target.model,
      secrets: target.key === undefined ? state.secrets : [target.key, ...state.secrets],
      credentialHeaders:
        target.key === undefined
          ? undefined
          : call.shape.family === "anthropic"
            ? { "x-api-key": target.key }
            : { authorization: `Bearer ${target.key}` },
      route: {
        choice: choiceOf(state.route, choice, upstream.origin),
        answerModel:
          state.route.exposeModel || target.model === state.route.alias ? undefined : state.route.alias,
      },
    };
  };

  return async (app) => {
    app.pipeline.beforeForward.push((call): Amendment => {
      const route = router.route(call.view.model);
      if (route === undefined) return CONTINUE;
      let state = routed.get(call);
      if (state === undefined) {
        state = {
          route,
          secrets: call.secrets,
          tried: new Set(),
          target: route.targets[0]!,
        };
        routed.set(call, state);
      }
      // Again after a park: the windows have moved since.
      const choice = router.choose(route, clock(), roomFor(call, state));
      return choice === undefined ? CONTINUE : { kind: "reroute", to: destination(call, state, choice) };
    });
    app.pipeline.upstreamAnswered.push((call: Call, answer: UpstreamAnswer) => {
      const state = routed.get(call);
      if (state === undefined) return;
      router.answered(state.target, answer.statusCode, clock(), waitNamed(call, answer, clock()));
    });
    app.pipeline.afterFailure.push((call, failure) => {
      const state = routed.get(call);
      if (state === undefined) return undefined;
      const nowMs = clock();
      if ("error" in failure) router.unreachable(state.target, nowMs);
      state.tried.add(state.target.index);
      const choice = router.choose(state.route, nowMs, roomFor(call, state), state.tried);
      if (choice === undefined) return undefined;
      const from = state.target;
      const to = destination(call, state, choice);
      call.request.log.info(
        {
          alias: state.route.alias,
          from: from.index,
          to: choice.target.index,
          status: "statusCode" in failure ? failure.statusCode : 0,
        },
        "route target failed the call: sent to the next",
      );
      return { kind: "reroute", to };
    });
  };
}

/** How long a 429 asked to wait: its retry-after, or the reset of the dimension it spent; undefined when unsaid. */
function waitNamed(call: Call, answer: UpstreamAnswer, nowMs: number): number | undefined {
  if (answer.statusCode !== 429) return undefined;
  const names = call.shape.family === "anthropic" ? ANTHROPIC_HEADERS : OPENAI_HEADERS;
  const reading = readRateLimits(answer.headers, names, nowMs);
  if (reading === undefined) return undefined;
  if (reading.retryAfterMs !== undefined) return reading.retryAfterMs;
  let untilMs = 0;
  for (const window of [reading.requests, reading.tokens, reading.inputTokens, reading.outputTokens]) {
    if (window !== undefined && window.remaining <= 0 && window.resetAtMs !== undefined)
      untilMs = Math.max(untilMs, window.resetAtMs);
  }
  return untilMs > nowMs ? untilMs - nowMs : undefined;
}

const REASONS: Record<Reason, RouteReason> = {
  headroom: RouteReason.ROUTE_REASON_HEADROOM,
  soonest: RouteReason.ROUTE_REASON_SOONEST,
  fallback: RouteReason.ROUTE_REASON_FALLBACK,
  probe: RouteReason.ROUTE_REASON_PROBE,
  none_available: RouteReason.ROUTE_REASON_NONE_AVAILABLE,
};

const STANDINGS: Record<Standing, RouteStanding> = {
  ready: RouteStanding.ROUTE_STANDING_READY,
  unknown: RouteStanding.ROUTE_STANDING_UNKNOWN,
  wait: RouteStanding.ROUTE_STANDING_WAIT,
  cooling: RouteStanding.ROUTE_STANDING_COOLING,
  open: RouteStanding.ROUTE_STANDING_OPEN,
  too_large: RouteStanding.ROUTE_STANDING_TOO_LARGE,
  tried: RouteStanding.ROUTE_STANDING_TRIED,
  probing: RouteStanding.ROUTE_STANDING_PROBING,
};

/** A choice as its event records it. */
function choiceOf(route: Route, choice: Choice, origin: string): RouteChoice {
  return {
    alias: route.alias,
    target: choice.target.index,
    upstream: origin,
    model: choice.target.model,
    reason: REASONS[choice.reason],
    candidates: choice.candidates.map((c) => ({
      target: c.target,
      standing: STANDINGS[c.standing],
      headroom: Math.round(c.headroom * 10_000) / 10_000,
      waitMs: c.waitMs,
      untilMs: c.untilMs,
    })),
  };
}
