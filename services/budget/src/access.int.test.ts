import { type Bus, connectBus } from "@holdfast/bus";
import { type Config, loadConfig } from "@holdfast/config";
import { connect, GrpcStatus, type ServiceError } from "@holdfast/grpc";
import { createLogger } from "@holdfast/log";
import { type AcquireResponse, BudgetClient, RateWindowsClient, type ReserveResponse } from "@holdfast/proto";
import { makeTempDir, natsUrl, uniqueNamespace } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningBudget, startBudget } from "./service.js";

// The budget service leases slices of budgets and windows to gateways alone: a caller
// without budget.token (an agent on the same host, say) is turned away at once, before it
// can reserve anything, on every method and on the reservation stream.

const log = createLogger({ name: "budget-access-test", level: "silent" });
const prefix = uniqueNamespace("budget_access");
const TOKEN = "budget-token-0123456789abcdef";
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let bus: Bus;
let budget: RunningBudget;

const configWith = (budgetSection: Partial<Config["budget"]>): Config =>
  loadConfig({
    env: {},
    overrides: {
      data_dir: dir.path,
      nats: { url: natsUrl(), prefix },
      budget: { port: 0, ...budgetSection },
      budgets: { "*": { daily_usd: 100 } },
    },
  });

beforeAll(async () => {
  dir = await makeTempDir("budget-access");
  bus = await connectBus({ servers: natsUrl(), prefix, name: "budget-access-test" });
  await bus.provision();
  budget = await startBudget(configWith({ token: TOKEN }), log);
}, 120_000);

afterAll(async () => {
  await budget?.close();
  await bus?.close();
  await dir?.[Symbol.asyncDispose]();
});

const acquire = (client: BudgetClient) =>
  new Promise<AcquireResponse>((resolve, reject) =>
    client.acquire(
      { key: "*", gateway: "gw", wantNanoUsd: 1_000_000_000, needNanoUsd: 1_000_000, reportedNanoUsd: 0 },
      (error, response) => (error === null ? resolve(response) : reject(error)),
    ),
  );

describe("the budget service", () => {
  it("leases a slice to a caller with budget.token", async () => {
    const client = connect(BudgetClient, {
      address: budget.address,
      deadlineMs: 5_000,
      metadata: { authorization: `Bearer ${TOKEN}` },
    });
    const lease = await acquire(client);
    expect(lease.grantedNanoUsd).toBeGreaterThan(0);
    client.close();
  });

  it("turns away a caller without the token, or with another, and grants nothing", async () => {
    for (const metadata of [undefined, { authorization: "Bearer not-the-token" }, { authorization: TOKEN }]) {
      const client = connect(BudgetClient, { address: budget.address, deadlineMs: 5_000, metadata });
      const refused = (await acquire(client).catch((error: ServiceError) => error)) as ServiceError;
      expect(refused.code).toBe(GrpcStatus.UNAUTHENTICATED);
      expect(refused.details).toMatch(/budget\.token|not one the budget service knows/);
      client.close();
    }
  });

  it("ends a reservation stream without the token at once, with the reason", async () => {
    const client = connect(RateWindowsClient, { address: budget.address, deadlineMs: 5_000 });
    const amounts = { requests: 1, tokens: 100, inputTokens: 0, outputTokens: 0 };
    const stream = client.reserve({
      keyId: "0123456789abcdef",
      upstream: "https://api.example",
      gateway: "gw",
      need: amounts,
      floor: amounts,
      wantCalls: 1_000,
      priority: 0,
      sinceMs: Date.now(),
      thresholdMs: 15_000,
      deadlineMs: 0,
      returnedLeaseId: "",
      returnedLeft: undefined,
      returnedLastSentAtMs: 0,
    });
    const ended = await new Promise<ServiceError | ReserveResponse>((resolve) => {
      stream.on("data", resolve);
      stream.on("error", resolve);
    });
    expect((ended as ServiceError).code).toBe(GrpcStatus.UNAUTHENTICATED);
    client.close();
  });

  it("will not listen off loopback without a token, unless told it is insecure", async () => {
    await expect(startBudget(configWith({ host: "0.0.0.0" }), log)).rejects.toThrow(
      /budget service will not start.*budget\.token/,
    );
    const insecure = await startBudget(configWith({ host: "0.0.0.0", insecure: true }), log);
    await insecure.close();
  });
});
