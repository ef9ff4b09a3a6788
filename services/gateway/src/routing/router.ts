/** One upstream a model alias may go to: a provider's base URL, the model asked of it, its key. */
export interface RouteTarget {
  readonly alias: string;
  /** Its place in routes.<alias> (0 first): the order fallbacks take. */
  readonly index: number;
  readonly baseUrl: string;
  readonly model: string;
  /** The target's own API key (read from its key_env at start); undefined: the caller's is sent. */
  readonly key: string | undefined;
}

export interface Route {
  readonly alias: string;
  readonly targets: readonly RouteTarget[];
  /** Answers name the model that served them, not the alias. */
  readonly exposeModel: boolean;
}

/** What a target's key window says of one call (from rate-limit prediction; `unknown` without it). */
export type Room =
  /** Fits now, leaving this share (0 to 1) of its tightest dimension. */
  | { readonly kind: "ready"; readonly headroom: number }
  /** Nothing read of the window yet: taken as whole. */
  | { readonly kind: "unknown" }
  /** Fits after this long. */
  | { readonly kind: "wait"; readonly waitMs: number }
  /** More than the whole window holds. */
  | { readonly kind: "too_large" };

export type Standing = "ready" | "unknown" | "wait" | "cooling" | "open" | "too_large" | "tried" | "probing";
export type Reason = "headroom" | "soonest" | "fallback" | "probe" | "none_available";

export interface Candidate {
  readonly target: number;
  readonly standing: Standing;
  readonly headroom: number;
  readonly waitMs: number;
  readonly untilMs: number;
}

export interface Choice {
  readonly target: RouteTarget;
  readonly reason: Reason;
  /** How every target stood, for the decision's event. */
  readonly candidates: readonly Candidate[];
}

export interface RouterOptions {
  /** Consecutive 5xx (or unreachable) answers that open a target's breaker. */
  readonly breakerFailures: number;
  /** How long an open breaker keeps calls off its target before one call probes it. */
  readonly breakerOpenMs: number;
  /** How long a 429 keeps calls off its target when the provider named no wait. */
  readonly cooldownMs: number;
}

interface Health {
  cooldownUntilMs: number;
  /** Consecutive 5xx or unreachable attempts. */
  failures: number;
  openUntilMs: number;
  /** A half-open breaker's probe in flight since then (0: none). */
  probingSinceMs: number;
}

/**
 * Where each call to a model alias goes, and what this gateway has learned of each target:
 * a 429 cools a target down until its reset; repeated 5xx (or unreachable attempts) open
 * its circuit breaker for a while, after which one call probes it (half-open) and its
 * answer closes or reopens it. A call goes to the target its window has the most headroom
 * in for the call's estimate (the first in order among equals); when none fits now, to the
 * one that fits soonest. A target that fails a started call hands it to the next available
 * one in order.
 */
export class Router {
  private readonly health = new Map<RouteTarget, Health>();

  constructor(
    private readonly routes: ReadonlyMap<string, Route>,
    private readonly options: RouterOptions,
  ) {}

  route(alias: string | undefined): Route | undefined {
    return alias === undefined ? undefined : this.routes.get(alias);
  }

  /**
   * The target for a call: by headroom before it starts (`tried` empty); the next one in
   * order that is available when `tried` failed it. Undefined when a failed call has nowhere
   * left to go.
   */
  choose(
    route: Route,
    nowMs: number,
    roomOf: (target: RouteTarget) => Room,
    tried: ReadonlySet<number> = new Set(),
  ): Choice | undefined {
    const candidates: Candidate[] = [];
    const rooms = new Map<RouteTarget, Room>();
    for (const target of route.targets) {
      const standing = this.standing(target, nowMs, tried);
      if (standing !== undefined) {
        candidates.push({ target: target.index, ...standing, headroom: 0, waitMs: 0 });
        continue;
      }
      const room = roomOf(target);
      rooms.set(target, room);
      candidates.push({
        target: target.index,
        standing: room.kind,
        headroom: room.kind === "ready" ? room.headroom : room.kind === "unknown" ? 1 : 0,
        waitMs: room.kind === "wait" ? Math.ceil(room.waitMs) : 0,
        untilMs: 0,
      });
    }
    const pick = (target: RouteTarget, reason: Reason): Choice => {
      const health = this.of(target);
      const probe = health.failures >= this.options.breakerFailures;
      if (probe) health.probingSinceMs = nowMs;
      return { target, reason: probe ? "probe" : reason, candidates };
    };
    const fits = route.targets.filter((t) => {
      const kind = rooms.get(t)?.kind;
      return kind === "ready" || kind === "unknown";
    });
    if (tried.size > 0) {
      // Falling back: the next in order that could take the call now.
      const next = fits[0];
      return next === undefined ? undefined : pick(next, "fallback");
    }
    const headroom = (t: RouteTarget) => candidates[t.index]?.headroom ?? 0;
    let best: RouteTarget | undefined;
    for (const target of fits) if (best === undefined || headroom(target) > headroom(best)) best = target;
    if (best !== undefined) return pick(best, "headroom");
    let soonest: RouteTarget | undefined;
    const waitOf = (t: RouteTarget) => candidates[t.index]?.waitMs ?? 0;
    for (const target of route.targets) {
      if (rooms.get(target)?.kind !== "wait") continue;
      if (soonest === undefined || waitOf(target) < waitOf(soonest)) soonest = target;
    }
    if (soonest !== undefined) return pick(soonest, "soonest");
    // Every target cooling, open or too small: the one back soonest (prediction waits for it,
    // or says why the call cannot be served).
    let back: RouteTarget | undefined;
    const backAt = (t: RouteTarget) => candidates[t.index]?.untilMs || Number.POSITIVE_INFINITY;
    for (const target of route.targets)
      if (back === undefined || backAt(target) < backAt(back)) back = target;
    return back === undefined ? undefined : { target: back, reason: "none_available", candidates };
  }

  /**
   * What a target's answer says of it: a 429 cools it down (for `waitMs`, what the
   * provider asked for, or `cooldown_s`); a 5xx counts towards its breaker; anything else
   * closes it.
   */
  answered(target: RouteTarget, status: number, nowMs: number, waitMs?: number): void {
    const health = this.of(target);
    health.probingSinceMs = 0;
    if (status === 429) {
      health.cooldownUntilMs = Math.max(health.cooldownUntilMs, nowMs + (waitMs ?? this.options.cooldownMs));
      return;
    }
    if (status >= 500) {
      this.failed(health, nowMs);
      return;
    }
    health.failures = 0;
    health.openUntilMs = 0;
  }

  /** The target could not be reached (or timed out): a failure towards its breaker. */
  unreachable(target: RouteTarget, nowMs: number): void {
    const health = this.of(target);
    health.probingSinceMs = 0;
    this.failed(health, nowMs);
  }

  /** Every target's standing now, for `holdfast windows` and logs. */
  list(nowMs: number): { alias: string; target: number; model: string; standing: Standing | "closed" }[] {
    const out: { alias: string; target: number; model: string; standing: Standing | "closed" }[] = [];
    for (const route of this.routes.values()) {
      for (const target of route.targets) {
        out.push({
          alias: route.alias,
          target: target.index,
          model: target.model,
          standing: this.standing(target, nowMs, new Set())?.standing ?? "closed",
        });
      }
    }
    return out;
  }

  private failed(health: Health, nowMs: number): void {
    health.failures += 1;
    if (health.failures >= this.options.breakerFailures)
      health.openUntilMs = nowMs + this.options.breakerOpenMs;
  }

  /** Why a target cannot take a call now, or undefined when it can (its window permitting). */
  private standing(
    target: RouteTarget,
    nowMs: number,
    tried: ReadonlySet<number>,
  ): { standing: Standing; untilMs: number } | undefined {
    if (tried.has(target.index)) return { standing: "tried", untilMs: 0 };
    const health = this.health.get(target);
    if (health === undefined) return undefined;
    if (health.openUntilMs > nowMs) return { standing: "open", untilMs: health.openUntilMs };
    if (health.cooldownUntilMs > nowMs) return { standing: "cooling", untilMs: health.cooldownUntilMs };
    // Half-open: one call at a time probes it (a probe whose call vanished is given up on).
    const probing =
      health.failures >= this.options.breakerFailures &&
      health.probingSinceMs > 0 &&
      nowMs - health.probingSinceMs < this.options.breakerOpenMs;
    return probing
      ? { standing: "probing", untilMs: health.probingSinceMs + this.options.breakerOpenMs }
      : undefined;
  }

  private of(target: RouteTarget): Health {
    let health = this.health.get(target);
    if (health === undefined) {
      health = { cooldownUntilMs: 0, failures: 0, openUntilMs: 0, probingSinceMs: 0 };
      this.health.set(target, health);
    }
    return health;
  }
}

/** The configured routes, each target's key read from its environment variable. */
export function routesFrom(
  config: Readonly<
    Record<
      string,
      {
        targets: readonly { upstream: string; model: string; key_env?: string | undefined }[];
        expose_model: boolean;
      }
    >
  >,
  env: Readonly<Record<string, string | undefined>>,
): Map<string, Route> {
  const routes = new Map<string, Route>();
  for (const [alias, route] of Object.entries(config)) {
    const targets = route.targets.map((t, index): RouteTarget => {
      let key: string | undefined;
      if (t.key_env !== undefined) {
        key = env[t.key_env]?.trim();
        if (key === undefined || key === "") {
          throw new Error(
            `routes.${alias}[${index}].key_env names ${t.key_env}, which is not set: set it to that upstream's API key, or remove key_env to send the caller's own key`,
          );
        }
      }
      return { alias, index, baseUrl: t.upstream, model: t.model, key };
    });
    routes.set(alias, { alias, targets, exposeModel: route.expose_model });
  }
  return routes;
}
