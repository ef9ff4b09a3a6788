import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { readStep } from "@holdfast/cli";
import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "./stack.js";

// The client's path does not wait for a call's outcome to reach the log: the outcome is
// appended after the answer, and may even wait a moment to share a write with other
// events. A gateway killed in that moment must leave the call charged, never unmetered.
const GATEWAY = fileURLToPath(new URL("../../../services/gateway/dist/main.js", import.meta.url));
const HEARTBEAT_MS = 200;

let stack: Stack;
let victim: ChildProcess | undefined;
beforeAll(async () => {
  // The in-process gateway is the survivor whose reaper finishes the victim's calls.
  stack = await startStack({ config: { gateway: { heartbeat_ms: HEARTBEAT_MS } } });
});
afterAll(async () => {
  victim?.kill("SIGKILL");
  await stack?.close();
});

/** A gateway process on the stack's log whose outcomes wait a whole minute for company. */
async function startVictim(): Promise<string> {
  const child = spawn(process.execPath, [GATEWAY], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      HOLDFAST_LOG_LEVEL: "info",
      HOLDFAST_DATA_DIR: stack.config.data_dir,
      HOLDFAST_NATS__URL: stack.config.nats.url,
      HOLDFAST_NATS__PREFIX: stack.config.nats.prefix,
      HOLDFAST_NATS__CREDENTIALS: stack.configFor("gateway").nats.credentials,
      HOLDFAST_GATEWAY__PORT: "0",
      HOLDFAST_GATEWAY__UPSTREAM: `${stack.provider.url}/v1`,
      HOLDFAST_GATEWAY__HEARTBEAT_MS: String(HEARTBEAT_MS),
      HOLDFAST_GATEWAY__OUTCOME_DEFER_MS: "60000",
      HOLDFAST_GATEWAY__INSTANCE_ID: "victim",
    },
  });
  victim = child;
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const port = await waitFor(() => /"port":(\d+)[^\n]*gateway listening/.exec(output)?.[1], {
    timeoutMs: 20_000,
    message: "the victim gateway did not start",
  });
  return `http://127.0.0.1:${port}/v1`;
}

describe("a gateway killed between the answer and its outcome reaching the log", () => {
  it("leaves the answered call charged from its estimate, never missing", async () => {
    const baseURL = await startVictim();
    const client = new OpenAI({
      apiKey: API_KEY,
      baseURL,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "answered-then-killed" },
    });
    const answer = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Say something worth charging for" }],
    });
    expect(answer.choices[0]?.message.content).toContain("Fake reply");

    // The client has its answer; the outcome is still waiting in the dead gateway.
    const exited = once(victim!, "exit");
    victim!.kill("SIGKILL");
    await exited;
    const before = await stack.run("answered-then-killed");
    expect(before.steps.map((s) => s.status)).toEqual(["in_flight"]);

    // The survivor charges it from what the start recorded: the input it estimated from
    // the request, priced, marked estimated.
    const run = await waitFor(
      async () => {
        const state = await stack.run("answered-then-killed");
        return state.inFlight === 0 ? state : undefined;
      },
      { timeoutMs: 10_000, message: "the killed gateway's call was never charged" },
    );
    const [step] = run.steps;
    expect(step).toMatchObject({ status: "failed", estimated: true });
    expect(step?.failure?.reason).toBe("gateway_error");
    expect(step?.inputTokens).toBeGreaterThan(0);
    expect(step?.costNanoUsd).toBeGreaterThan(0);

    // Analytics count it once, as estimated.
    const rows = await waitFor(
      async () => {
        const found = await stack.sql<{ estimated: boolean; cost_usd: string | null }>(
          "SELECT estimated, cost_usd FROM steps WHERE run_id = 'answered-then-killed'",
        );
        return found.length > 0 ? found : undefined;
      },
      { timeoutMs: 10_000, message: "the charged step never reached ClickHouse" },
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]?.estimated).toBe(true);
    expect(Number(rows[0]?.cost_usd)).toBeGreaterThan(0);

    // Its snapshot: the request went with the step's start, so it is whole; the answer went
    // with the outcome the process died holding, so it is there whole or said missing,
    // never half.
    const reader = await stack.connect("reader");
    try {
      const { snapshot } = await readStep(reader, run, 1);
      const sent = stack.provider.requests.at(-1)!;
      expect(snapshot.request?.forwardedText).toBe(sent.rawBody);
      if (snapshot.answer === undefined) expect(snapshot.missing).toEqual(["answer: not stored"]);
      else expect(snapshot.answer.text).toBe(sent.responseBody);
    } finally {
      await reader.close();
    }
  });
});
