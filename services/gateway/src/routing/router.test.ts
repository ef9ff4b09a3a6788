import { describe, expect, it } from "vitest";
import { type Room, type Route, Router, type RouteTarget, routesFrom } from "./router.js";

const NOW = Date.parse("2026-12-04T12:00:00Z");

function routerWith(models: string[]): { router: Router; route: Route } {
  const routes = routesFrom(
    {
      fast: {
        targets: models.map((model, i) => ({ upstream: `https://p${i}.example/v1`, model })),
        expose_model: false,
      },
    },
    {},
  );
  const router = new Router(routes, { breakerFailures: 3, breakerOpenMs: 30_000, cooldownMs: 10_000 });
  return { router, route: router.route("fast")! };
}

const rooms =
  (byModel: Record<string, Room>) =>
  (target: RouteTarget): Room =>
    byModel[target.model] ?? { kind: "unknown" };

describe("Router: where a call to a model alias goes", () => {
  it("takes the target with the most headroom for the call, the first in order among equals", () => {
    const { router, route } = routerWith(["a", "b", "c"]);
    const choice = router.choose(
      route,
      NOW,
      rooms({
        a: { kind: "ready", headroom: 0.1 },
        b: { kind: "ready", headroom: 0.6 },
        c: { kind: "ready", headroom: 0.6 },
      }),
    );
    expect(choice?.target.model).toBe("b");
    expect(choice?.reason).toBe("headroom");
    expect(choice?.candidates.map((c) => [c.standing, c.headroom])).toEqual([
      ["ready", 0.1],
      ["ready", 0.6],
      ["ready", 0.6],
    ]);
    // Nothing read yet anywhere: the first.
    expect(router.choose(route, NOW, rooms({}))?.target.model).toBe("a");
  });

  it("switches before the 429: a target whose window cannot fit the call now is passed over", () => {
    const { router, route } = routerWith(["a", "b"]);
    const choice = router.choose(
      route,
      NOW,
      rooms({ a: { kind: "wait", waitMs: 4_000 }, b: { kind: "ready", headroom: 0.05 } }),
    );
    expect(choice?.target.model).toBe("b");
    // When none fits now, the one that fits soonest (prediction then waits for it).
    const soonest = router.choose(
      route,
      NOW,
      rooms({ a: { kind: "wait", waitMs: 4_000 }, b: { kind: "wait", waitMs: 1_500 } }),
    );
    expect(soonest).toMatchObject({ target: { model: "b" }, reason: "soonest" });
    // Too large for one window, not for another.
    expect(router.choose(route, NOW, rooms({ a: { kind: "too_large" } }))?.target.model).toBe("b");
  });

  it("cools a target that answered 429 down until the wait the provider named, then takes it again", () => {
    const { router, route } = routerWith(["a", "b"]);
    const [a] = route.targets;
    router.answered(a!, 429, NOW, 5_000);
    const cooling = router.choose(route, NOW + 1_000, rooms({}));
    expect(cooling?.target.model).toBe("b");
    expect(cooling?.candidates[0]).toMatchObject({ standing: "cooling", untilMs: NOW + 5_000 });
    expect(router.choose(route, NOW + 5_000, rooms({}))?.target.model).toBe("a");
    // No wait named: cooldown_s.
    router.answered(a!, 429, NOW + 6_000);
    expect(router.choose(route, NOW + 15_000, rooms({}))?.target.model).toBe("b");
    expect(router.choose(route, NOW + 16_000, rooms({}))?.target.model).toBe("a");
  });

  it("opens a breaker after repeated 5xx, lets one call probe it after breaker_open_s, and closes it on success", () => {
    const { router, route } = routerWith(["a", "b"]);
    const [a] = route.targets;
    router.answered(a!, 502, NOW);
    router.unreachable(a!, NOW);
    expect(router.choose(route, NOW, rooms({}))?.target.model).toBe("a");
    router.answered(a!, 503, NOW);
    const open = router.choose(route, NOW + 1_000, rooms({}));
    expect(open?.target.model).toBe("b");
    expect(open?.candidates[0]).toMatchObject({ standing: "open", untilMs: NOW + 30_000 });
    expect(router.choose(route, NOW + 29_999, rooms({}))?.target.model).toBe("b");
    // Half-open: one probe, the others go on elsewhere meanwhile.
    const probe = router.choose(route, NOW + 30_000, rooms({}));
    expect(probe).toMatchObject({ target: { model: "a" }, reason: "probe" });
    const meanwhile = router.choose(route, NOW + 30_100, rooms({}));
    expect(meanwhile?.target.model).toBe("b");
    expect(meanwhile?.candidates[0]?.standing).toBe("probing");
    router.answered(a!, 200, NOW + 30_200);
    expect(router.choose(route, NOW + 30_300, rooms({}))).toMatchObject({
      target: { model: "a" },
      reason: "headroom",
    });
  });

  it("a failed probe opens the breaker again for another breaker_open_s", () => {
    const { router, route } = routerWith(["a", "b"]);
    const [a] = route.targets;
    for (let i = 0; i < 3; i++) router.answered(a!, 500, NOW);
    expect(router.choose(route, NOW + 30_000, rooms({}))?.reason).toBe("probe");
    router.answered(a!, 500, NOW + 30_500);
    expect(router.choose(route, NOW + 31_000, rooms({}))?.candidates[0]).toMatchObject({
      standing: "open",
      untilMs: NOW + 60_500,
    });
  });

  it("falls back in order after a started call failed, and has nowhere to go once every target failed it", () => {
    const { router, route } = routerWith(["a", "b", "c"]);
    const tried = new Set([0]);
    // Order, not headroom, once a call has failed.
    const next = router.choose(
      route,
      NOW,
      rooms({ b: { kind: "ready", headroom: 0.1 }, c: { kind: "ready", headroom: 0.9 } }),
      tried,
    );
    expect(next).toMatchObject({ target: { model: "b" }, reason: "fallback" });
    expect(next?.candidates[0]?.standing).toBe("tried");
    // One that would make the call wait is no fallback.
    expect(
      router.choose(route, NOW, rooms({ b: { kind: "wait", waitMs: 1_000 } }), tried)?.target.model,
    ).toBe("c");
    expect(router.choose(route, NOW, rooms({}), new Set([0, 1, 2]))).toBeUndefined();
  });

  it("every target out: the one back soonest", () => {
    const { router, route } = routerWith(["a", "b"]);
    const [a, b] = route.targets;
    router.answered(a!, 429, NOW, 20_000);
    router.answered(b!, 429, NOW, 8_000);
    expect(router.choose(route, NOW, rooms({}))).toMatchObject({
      target: { model: "b" },
      reason: "none_available",
    });
  });

  it("reads each target's key from its environment variable, and says which one is missing", () => {
    const config = {
      fast: {
        targets: [{ upstream: "https://p.example/v1", model: "m", key_env: "ROUTE_KEY" }],
        expose_model: true,
      },
    };
    expect(routesFrom(config, { ROUTE_KEY: " sk-1 " }).get("fast")?.targets[0]?.key).toBe("sk-1");
    expect(() => routesFrom(config, {})).toThrow(
      /routes\.fast\[0\]\.key_env names ROUTE_KEY, which is not set/,
    );
  });
});
