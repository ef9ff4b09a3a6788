import { createIdGenerator, type RunCommand, type RunState } from "@holdfast/events";
import { start as startStep } from "@holdfast/events/fixtures";
import { createLogger } from "@holdfast/log";
import { Ledger, runAggregate } from "@holdfast/runs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// A gateway alone in the fleet appends its runs' calls itself: it follows only the events
// it must act on at once (holds, resumes, stops, gate decisions), not its own calls read
// back from the log. Once another gateway is alive, each follows every event, so a run or
// a response both serve is current on each; when the other says goodbye, back to urgent.
let stack: Stack;
const HEARTBEAT_MS = 200;
beforeAll(async () => {
  stack = await startStack({ config: { gateway: { heartbeat_ms: HEARTBEAT_MS } } });
});
afterAll(async () => {
  await stack?.close();
});

async function health(baseUrl: string): Promise<{ peer_gateways: boolean; log_followed: string }> {
  const response = await fetch(new URL("/holdfast/health", baseUrl));
  return (await response.json()) as { peer_gateways: boolean; log_followed: string };
}

const alone = { peer_gateways: false, log_followed: "urgent_events" };
const together = { peer_gateways: true, log_followed: "every_event" };

describe("a gateway's view of the fleet", () => {
  it("follows every event only while another gateway is alive", async () => {
    expect(await health(stack.gatewayUrl)).toMatchObject(alone);

    const other = await stack.extraGateway({});
    await expect.poll(() => health(stack.gatewayUrl), { timeout: 5_000 }).toMatchObject(together);
    await expect.poll(() => health(other.baseUrl), { timeout: 5_000 }).toMatchObject(together);

    // Calls alternating between the two on one run: each gateway hears the other's.
    for (let i = 0; i < 6; i++) {
      const client =
        i % 2 === 0
          ? stack.client({ headers: { "X-Holdfast-Run": "peers" } })
          : other.client({ "X-Holdfast-Run": "peers" });
      await client.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: `call ${i}` }],
      });
    }
    const run = await stack.settled("peers", 6);
    expect(run.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5, 6]);

    await other.close();
    await expect.poll(() => health(stack.gatewayUrl), { timeout: 5_000 }).toMatchObject(alone);

    // Alone again, its calls are recorded as before.
    await stack.client({ headers: { "X-Holdfast-Run": "peers" } }).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "alone again" }],
    });
    const after = await stack.settled("peers", 7);
    expect(after.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it("takes a gateway that stops beating without a goodbye for dead after three beats, whatever its clock says", async () => {
    expect(await health(stack.gatewayUrl)).toMatchObject(alone);
    // A gateway that beat once and was then killed (kill -9 says no goodbye), its clock an
    // hour behind: its beat is timed by when it arrived.
    const bucket = await stack.bus.keyValue("GATEWAYS");
    const putAt = Date.now();
    await bucket.put(
      Buffer.from("killed#000000", "utf8").toString("base64url"),
      JSON.stringify({ beatMs: putAt - 3_600_000, heartbeatMs: HEARTBEAT_MS }),
    );
    await expect
      .poll(() => health(stack.gatewayUrl), { timeout: 5_000, interval: 20 })
      .toMatchObject(together);
    await expect.poll(() => health(stack.gatewayUrl), { timeout: 5_000, interval: 20 }).toMatchObject(alone);
    // Not before its three beats were missed.
    expect(Date.now() - putAt).toBeGreaterThanOrEqual(3 * HEARTBEAT_MS);
  });

  it("does not take a value in the bucket that is not a beat for a gateway", async () => {
    const bucket = await stack.bus.keyValue("GATEWAYS");
    const beatMs = Date.now();
    for (const [i, value] of [
      "not json",
      JSON.stringify({ beatMs: "now", heartbeatMs: HEARTBEAT_MS }),
      JSON.stringify({ beatMs }),
      JSON.stringify({ beatMs, heartbeatMs: 0 }),
      JSON.stringify({ beatMs, heartbeatMs: -5 }),
    ].entries()) {
      await bucket.put(Buffer.from(`garbage#${i}`, "utf8").toString("base64url"), value);
    }
    await new Promise((resolve) => setTimeout(resolve, 2 * HEARTBEAT_MS));
    expect(await health(stack.gatewayUrl)).toMatchObject(alone);
  });

  it("numbers its call after another process's, appended to the run while it was alone", async () => {
    expect(await health(stack.gatewayUrl)).toMatchObject(alone);
    const client = stack.client({ headers: { "X-Holdfast-Run": "other-writer" } });
    const ask = () =>
      client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    await ask();
    await stack.settled("other-writer", 1);
    // Another process (not a gateway in the fleet) starts a call on the run.
    const other = new Ledger<RunState, RunCommand>({
      aggregate: runAggregate,
      bus: stack.bus,
      log: createLogger({ name: "other-writer", level: "silent" }),
      clock: Date.now,
      newId: createIdGenerator(),
    });
    await other.execute(
      "other-writer",
      { tag: "", tenant: "" },
      startStep("other-writer-step", { upstream: "http://elsewhere", gateway: "elsewhere#1" }),
    );
    // The gateway did not hear of it; its next start meets the sequence check and reads it.
    await ask();
    const events = (await stack.bus.readRun("other-writer")).events.map((e) => e.envelope);
    const starts = events.flatMap((e) => (e.payload?.$case === "stepStarted" ? [e.payload.value] : []));
    expect(starts.map((s) => s.step)).toEqual([1, 2, 3]);
    expect(starts[1]!.stepId).toBe("other-writer-step");
    expect(events.map((e) => e.sequence)).toEqual(events.map((_, i) => i + 1));
  });
});
