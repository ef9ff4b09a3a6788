import { promptTokens, type WindowMode } from "@holdfast/fake-provider";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// Fleets of agents on one key, through one gateway or two, against each shape of window a
// provider uses: refilled continuously, cleared whole every period (fixed), a sliding log,
// and one that sends no rate-limit headers at all (only a 429 and its retry-after). The
// gateways are told nothing of the shape: they learn it from the readings. Each fleet's
// calls need about three windows; the SDK retries nothing, so any 429 reaches the agent.

const STEPS = 3;
const MAX_TOKENS = 20;
const WINDOW_MS = 1_000;
const MODES: readonly WindowMode[] = ["continuous", "fixed", "sliding", "none"];
const FLEETS = [
  { agents: 1, gateways: 1 },
  { agents: 8, gateways: 1 },
  { agents: 50, gateways: 1 },
  { agents: 8, gateways: 2 },
] as const;

const question = (agent: number, step: number) => `agent ${agent} step ${step} ${"to do ".repeat(40)}`;
// What one call takes of a window, as the fake counts it: its input and its output cap.
const CALL_TOKENS = promptTokens([{ role: "user", content: question(10, 1) }]) + MAX_TOKENS;

const keyOf = (mode: string, agents: number, gateways: number) =>
  `sk-shape-${mode}-${agents}x${gateways}-${"0".repeat(20)}`;

let stack: Stack;
let second: Awaited<ReturnType<Stack["extraGateway"]>>;
beforeAll(async () => {
  const limitsByKey: Record<string, { tpm: number; rpm: number; windowMs: number; mode: WindowMode }> = {};
  for (const mode of MODES) {
    for (const { agents, gateways } of FLEETS) {
      // The fleet's tokens need three windows; a window holds at least three calls.
      const tokens = agents * STEPS * CALL_TOKENS;
      limitsByKey[keyOf(mode, agents, gateways)] = {
        tpm: Math.max(3 * CALL_TOKENS, Math.ceil(tokens / 3)),
        rpm: 1_000_000,
        windowMs: WINDOW_MS,
        mode,
      };
    }
  }
  stack = await startStack({
    config: { predict: { wait_threshold_s: 10, max_wait_s: 60 } },
    provider: { limitsByKey },
  });
  second = await stack.extraGateway({});
}, 60_000);
afterAll(async () => {
  await stack?.close();
});

async function fleet(
  mode: WindowMode,
  agents: number,
  gateways: number,
): Promise<{ seen: number; sent: number }> {
  const apiKey = keyOf(mode, agents, gateways);
  const bases = [stack.gatewayUrl, second.baseUrl].slice(0, gateways);
  let seen = 0;
  await Promise.all(
    Array.from({ length: agents }, async (_, agent) => {
      const client = new OpenAI({
        apiKey,
        baseURL: bases[agent % bases.length],
        maxRetries: 0,
        timeout: 60_000,
        defaultHeaders: { "X-Holdfast-Run": `shape-${mode}-${agents}x${gateways}-${agent}` },
      });
      for (let step = 1; step <= STEPS; step++) {
        try {
          await client.chat.completions.create({
            model: "gpt-4o-mini",
            max_tokens: MAX_TOKENS,
            messages: [{ role: "user", content: question(agent, step) }],
          });
        } catch (error) {
          if (error instanceof OpenAI.APIError && error.status === 429) seen += 1;
          else throw error;
        }
      }
    }),
  );
  const sent = stack.provider.requests.filter((r) => r.apiKey === apiKey && r.status === 429).length;
  return { seen, sent };
}

describe.each(MODES)("a %s window", (mode) => {
  it.each(FLEETS)(
    "$agents agents on $gateways gateway(s): no 429 reaches an agent",
    async ({ agents, gateways }) => {
      const { seen, sent } = await fleet(mode, agents, gateways);
      expect(seen).toBe(0);
      // A provider that says what is left is never sent a call it refuses; one that says
      // nothing is found out by its refusals, which the gateway absorbs.
      if (mode !== "none") expect(sent).toBe(0);
    },
    180_000,
  );
});
