import { type Bus, connectBus } from "@holdfast/bus";
import { loadConfig } from "@holdfast/config";
import { createIdGenerator, makeEnvelope } from "@holdfast/events";
import { connect } from "@holdfast/grpc";
import { createLogger } from "@holdfast/log";
import { RateWindowsClient, type ReserveRequest, type ReserveResponse } from "@holdfast/proto";
import { makeTempDir, natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningBudget, startBudget } from "../service.js";

// The rate-limit coordinator as deployed: the budget service's gRPC RateWindows on a real
// socket over the harness's nats-server. Readings go into the log as gateways record
// them; reservations are asked for as gateways ask.

const log = createLogger({ name: "windows-test", level: "silent" });
const prefix = uniqueNamespace("windows");
const newId = createIdGenerator();
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let bus: Bus;
let budget: RunningBudget;
let client: RateWindowsClient;

const start = async () => {
  budget = await startBudget(
    loadConfig({
      env: {},
      overrides: { data_dir: dir.path, nats: { url: natsUrl(), prefix }, budget: { port: 0 } },
    }),
    log,
  );
  client = connect(RateWindowsClient, { address: budget.address, deadlineMs: 10_000 });
};

beforeAll(async () => {
  dir = await makeTempDir("windows");
  bus = await connectBus({ servers: natsUrl(), prefix, name: "windows-test" });
  await bus.provision();
  await start();
}, 120_000);

afterAll(async () => {
  client?.close();
  await budget?.close();
  await bus?.close();
  await dir?.[Symbol.asyncDispose]();
});

/** A gateway's reading of a key: `tokens` of 6,000 a minute left (100 a second), as of now. */
async function record(keyId: string, tokens: number): Promise<void> {
  const now = Date.now();
  await bus.appendKeyEvent(
    keyId,
    makeEnvelope({
      id: newId(),
      runId: "",
      sequence: 0,
      timestampMs: now,
      tag: "",
      payload: {
        $case: "rateLimitObserved",
        value: {
          keyId,
          upstream: "https://api.example",
          requests: { reported: false, limit: 0, remaining: 0, resetAtMs: 0, shape: "", shapeReadings: 0 },
          // As a gateway that had learnt the window refills evenly records it.
          tokens: {
            reported: true,
            limit: 6_000,
            remaining: tokens,
            resetAtMs: now + (6_000 - tokens) * 10,
            shape: "continuous",
            shapeReadings: 3,
          },
          inputTokens: undefined,
          outputTokens: undefined,
          retryAfterMs: 0,
          gateway: "gw-test",
          asOfMs: now,
        },
      },
    }),
  );
}

const amounts = (tokens: number) => ({ requests: 0, tokens, inputTokens: 0, outputTokens: 0 });

function ask(keyId: string, tokens: number, overrides: Partial<ReserveRequest> = {}): ReserveRequest {
  return {
    keyId,
    upstream: "https://api.example",
    gateway: "gw-test",
    need: amounts(tokens),
    floor: amounts(tokens),
    wantCalls: 1,
    priority: 0,
    sinceMs: Date.now(),
    thresholdMs: 15_000,
    deadlineMs: 0,
    returnedLeaseId: "",
    returnedLeft: undefined,
    returnedLastSentAtMs: 0,
    ...overrides,
  };
}

/** Every message of one Reserve stream, and how it ended. */
function reserve(request: ReserveRequest): {
  messages: ReserveResponse[];
  ended: Promise<"end" | string>;
  cancel(): void;
} {
  const stream = client.reserve(request);
  const messages: ReserveResponse[] = [];
  stream.on("data", (message: ReserveResponse) => messages.push(message));
  const ended = new Promise<"end" | string>((resolve) => {
    stream.on("end", () => resolve("end"));
    stream.on("error", (error: Error & { code?: number }) => resolve(`error ${error.code}`));
  });
  return { messages, ended, cancel: () => stream.cancel() };
}

const keyIds = (() => {
  let n = 0;
  return () => (0xa000000000000000n + BigInt(++n)).toString(16);
})();

describe("the rate-limit coordinator over gRPC", () => {
  it("knows nothing of a key until a gateway records a reading, then grants out of it", async () => {
    const key = keyIds();
    const before = reserve(ask(key, 100));
    expect(await before.ended).toBe("end");
    expect(before.messages[0]?.outcome?.$case).toBe("unknown");
    await record(key, 1_000);
    await waitFor(async () => {
      const asked = reserve(ask(key, 100));
      await asked.ended;
      return asked.messages[0]?.outcome?.$case === "granted";
    });
  });

  it("keeps a call that does not fit waiting on its stream, and grants it the moment room comes back", async () => {
    const key = keyIds();
    await record(key, 500);
    let first: ReturnType<typeof reserve> | undefined;
    await waitFor(async () => {
      first = reserve(ask(key, 500));
      await first.ended;
      return first.messages[0]?.outcome?.$case === "granted";
    });
    const granted = first!.messages[0]!.outcome;
    if (granted?.$case !== "granted") throw new Error("expected a grant");
    // The window is spent: the next call waits (5 s of refill), the one behind it too.
    const waiting = reserve(ask(key, 500));
    const behind = reserve(ask(key, 100, { sinceMs: Date.now() + 1 }));
    await waitFor(() => waiting.messages.length === 1 && behind.messages.length === 1);
    expect(waiting.messages[0]?.outcome?.$case).toBe("queued");
    // The first call cost nothing after all (refused before the work): all 500 come back.
    await new Promise<void>((resolve, reject) =>
      client.releaseSlice({ leaseId: granted.value.leaseId, left: amounts(500), lastSentAtMs: 0 }, (error) =>
        error === null ? resolve() : reject(error),
      ),
    );
    expect(await waiting.ended).toBe("end");
    expect(waiting.messages[1]?.outcome?.$case).toBe("granted");
    // The one behind did not jump the queue, and still waits for its own room.
    expect(behind.messages).toHaveLength(1);
    behind.cancel();
    expect(await behind.ended).toMatch(/^error 1$/);
  });

  it("lets the next waiter have the turn of one whose gateway gave up on it", async () => {
    const key = keyIds();
    await record(key, 0);
    let gone: ReturnType<typeof reserve> | undefined;
    await waitFor(async () => {
      gone?.cancel();
      gone = reserve(ask(key, 300));
      await waitFor(() => gone!.messages.length === 1);
      return gone.messages[0]?.outcome?.$case === "queued";
    });
    const next = reserve(ask(key, 300, { sinceMs: Date.now() + 1 }));
    await waitFor(() => next.messages.length === 1);
    const queued = next.messages[0]?.outcome;
    // Behind the first: 6 s of refill for both.
    expect(queued?.$case === "queued" && queued.value.etaMs - Date.now()).toBeGreaterThan(4_500);
    gone!.cancel();
    // With the first gone, the second's turn comes after 3 s of refill, not 6.
    const cancelledAt = Date.now();
    expect(await next.ended).toBe("end");
    expect(next.messages[1]?.outcome?.$case).toBe("granted");
    expect(Date.now() - cancelledAt).toBeLessThan(4_500);
  }, 30_000);

  it("grants a call queued behind the waiter its handed-back slice lets go, in the same turn", async () => {
    const key = keyIds();
    await record(key, 1_000);
    let first: ReturnType<typeof reserve> | undefined;
    await waitFor(async () => {
      first = reserve(ask(key, 1_000, { gateway: "gw-a" }));
      await first.ended;
      return first.messages[0]?.outcome?.$case === "granted";
    });
    const slice = first!.messages[0]!.outcome;
    if (slice?.$case !== "granted") throw new Error("expected a grant");
    // The window is spent: another gateway's call waits for 6 s of refill.
    const waiting = reserve(ask(key, 600, { gateway: "gw-b" }));
    await waitFor(() => waiting.messages.length === 1);
    expect(waiting.messages[0]?.outcome?.$case).toBe("queued");
    // The first gateway's next call does not fit what is left of its slice (its call cost
    // nothing after all), so it asks, handing the slice back whole: behind the waiter it
    // queues, and the 1,000 that came back are enough for both at once.
    const next = reserve(
      ask(key, 100, {
        gateway: "gw-a",
        sinceMs: Date.now() + 1,
        returnedLeaseId: slice.value.leaseId,
        returnedLeft: amounts(1_000),
      }),
    );
    expect(await waiting.ended).toBe("end");
    expect(waiting.messages[1]?.outcome?.$case).toBe("granted");
    // Its turn comes on its stream too: 600 + 100 of 1,000 leave the window room, and no
    // one is left waiting for it to come back.
    await waitFor(() => next.messages.length === 2, { timeoutMs: 5_000 });
    expect(next.messages.map((m) => m.outcome?.$case)).toEqual(["queued", "granted"]);
    expect(await next.ended).toBe("end");
  }, 30_000);

  it("after a restart still counts the slices it granted before, kept in KV", async () => {
    const key = keyIds();
    await record(key, 6_000);
    await waitFor(async () => {
      const asked = reserve(ask(key, 5_000));
      await asked.ended;
      return asked.messages[0]?.outcome?.$case === "granted";
    });
    client.close();
    await budget.close();
    await start();
    // 1,000 left (and a little refill), not 6,000: the 5,000 granted before are spent.
    const asked = reserve(ask(key, 2_000));
    await waitFor(() => asked.messages.length === 1);
    expect(asked.messages[0]?.outcome?.$case).toBe("queued");
    asked.cancel();
    expect(await asked.ended).toBe("error 1");
  }, 60_000);
});
