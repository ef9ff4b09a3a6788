import { connectBus } from "@holdfast/bus";
import { loadConfig } from "@holdfast/config";
import { describeRun } from "@holdfast/events";
import { type FakeProvider, startFakeProvider } from "@holdfast/fake-provider";
import { type RunningGateway, startGateway } from "@holdfast/gateway";
import { createLogger } from "@holdfast/log";
import { findNatsServer, type RunningNatsServer, startNatsServer } from "@holdfast/natsd";
import { freePort, makeTempDir, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The event log going away and coming back, under a live gateway: calls that cannot be
// recorded are refused (not forwarded unmetered), and the outcome of a call that was in
// flight reaches the log once it is back, exactly once.
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let nats: RunningNatsServer | undefined;
let provider: FakeProvider;
let gateway: RunningGateway;
let port: number;
let binary: string;
const prefix = uniqueNamespace("outage");

async function startNats(): Promise<void> {
  nats = await startNatsServer({ binary, storeDir: `${dir.path}/nats`, port });
}

beforeAll(async () => {
  dir = await makeTempDir("outage");
  binary = (await findNatsServer())!.path;
  port = await freePort();
  await startNats();
  provider = await startFakeProvider();
  const config = loadConfig({
    env: {},
    overrides: {
      data_dir: dir.path,
      nats: { url: `nats://127.0.0.1:${port}`, prefix },
      gateway: { port: 0, upstream: `${provider.url}/v1` },
    },
  });
  gateway = await startGateway(config, createLogger({ name: "gateway", level: "silent" }));
});
afterAll(async () => {
  if (nats === undefined) await startNats();
  await gateway?.close();
  await provider?.close();
  await nats?.stop();
  await dir[Symbol.asyncDispose]();
});

async function history(runId: string) {
  const bus = await connectBus({ servers: `nats://127.0.0.1:${port}`, prefix, name: "reader" });
  try {
    return (await bus.readRun(runId)).events.map((e) => e.envelope);
  } finally {
    await bus.close();
  }
}

describe("event log outage", () => {
  it("refuses calls it cannot record, and records an in-flight call's outcome once the log is back", async () => {
    const client = new OpenAI({
      apiKey: "sk-outage",
      baseURL: gateway.baseUrl,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "outage" },
    });
    await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "before" }],
    });

    // A streamed call is in flight (its StepStarted is in the log) when NATS goes down.
    const stream = await client.chat.completions.create(
      { model: "gpt-4o-mini", stream: true, messages: [{ role: "user", content: "during the outage" }] },
      { headers: { "x-fake-pause-after": "2" } },
    );
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    await nats!.stop();
    nats = undefined;
    provider.resumePaused();
    let chunks = 1;
    while (!(await iterator.next()).done) chunks += 1;
    expect(chunks).toBeGreaterThan(2);

    // A new call cannot be recorded: refused in the provider's error shape, not forwarded.
    const forwarded = provider.requests.length;
    const refused = (await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "refused" }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(refused.status).toBe(503);
    expect(refused.error).toMatchObject({ type: "server_error", code: "holdfast_log_unavailable" });
    expect(provider.requests.length).toBe(forwarded);

    // NATS comes back on the same store: the pending outcome lands, and calls work again.
    await startNats();
    await waitFor(async () => describeRun("outage", await history("outage")).completed === 2, {
      timeoutMs: 30_000,
      message: "the in-flight call's outcome never reached the log",
    });
    await waitFor(
      () =>
        client.chat.completions
          .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "after" }] })
          .then(() => true)
          .catch(() => false),
      { timeoutMs: 30_000, message: "gateway did not recover" },
    );
    const events = await history("outage");
    const run = describeRun("outage", events);
    expect(run.steps.map((s) => [s.step, s.status])).toEqual([
      [1, "completed"],
      [2, "completed"],
      [3, "completed"],
    ]);
    expect(events.map((e) => e.sequence)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(events.filter((e) => e.type === "StepCompleted")).toHaveLength(3);
  });
});
