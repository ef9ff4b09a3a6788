// pnpm bench:ratelimit — fleets of agents sharing one rate-limited key: the reactive
// baseline (the official SDK's retries) against Holdfast's prediction, one gateway and two.
//
// On the fake provider, whose buckets refill continuously (tokens and requests, charged
// input plus max_tokens at admission, as OpenAI does), fleets of 1, 8 and 50 agents each
// run STEPS steps of a conversation that grows every step. For each fleet the key's
// window is sized so that its lower bound (total tokens / TPM) is BOUND_S seconds, with a
// requests window binding too. The fake's buckets refill in a few seconds rather than a
// minute (twice the fleet's largest call at its rate), so a run takes BOUND_S, not an hour,
// and the full window it starts with is a small part of the whole. Three arms, each on a fresh key: the agents calling the
// provider directly with the openai SDK's own retries (2, honouring retry-after) and their
// loop redoing a step whose call still failed; the same agents through one Holdfast
// gateway; and through two gateways (half the agents each) sharing the key through the
// budget service's coordinator.
//
// Per arm it prints: the 429s the provider sent, the 429s that reached agent code, the steps
// redone, the input tokens re-sent (waste), the calls Holdfast made wait, the runs it
// checkpointed, the 429s it retried itself, and the wall-clock against the bound.
//
// BENCH_SIZES (default "1,8,50"), BENCH_STEPS (20) and BENCH_BOUND_S (30) change the run.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { connectBus } from "@holdfast/bus";
import { describeRun } from "@holdfast/events";
import {
  type ChatMessage,
  type FakeProvider,
  promptTokens,
  startFakeProvider,
} from "@holdfast/fake-provider";
import OpenAI from "openai";
import { startExtraGateway, startUp } from "./processes.js";

const SIZES = (process.env.BENCH_SIZES ?? "1,8,50").split(",").map(Number);
const STEPS = Number(process.env.BENCH_STEPS ?? 20);
const BOUND_S = Number(process.env.BENCH_BOUND_S ?? 30);
const MAX_TOKENS = 100;
// ~500 tokens of instructions to start with (about four characters a token), and ~100 more
// with every step's question, besides the answers.
const SYSTEM = "You are a careful research agent working through a long task. ".repeat(32);
const QUESTION = "Summarise what you found so far, then take the next step of the task. ".repeat(6);

type Arm = "reactive" | "holdfast" | "holdfast x2";
const ARMS: readonly Arm[] = ["reactive", "holdfast", "holdfast x2"];

interface Outcome {
  wallMs: number;
  sent429: number;
  seen429: number;
  redone: number;
  wastedTokens: number;
  chargedTokens: number;
  waits: number;
  checkpoints: number;
  gatewayRetries: number;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-ratelimit-"));
  const children: ChildProcess[] = [];
  const limitsByKey: Record<string, { tpm: number; rpm: number; windowMs: number }> = {};
  for (const size of SIZES) {
    const { tokens, requests, largest } = plannedTotals(size);
    // The fleet's tokens take BOUND_S at the refill rate, its requests 80% of that; the
    // window holds twice the largest call.
    const perMs = tokens / (BOUND_S * 1_000);
    const windowMs = Math.max(1_000, Math.ceil((2 * largest) / perMs));
    for (const arm of ARMS) {
      limitsByKey[keyOf(size, arm)] = {
        tpm: Math.ceil(perMs * windowMs),
        rpm: Math.max(2, Math.ceil((requests / (BOUND_S * 800)) * windowMs)),
        windowMs,
      };
    }
  }
  const provider = await startFakeProvider({ port: 0, limitsByKey, recordRequests: true });
  try {
    const { file: stack } = await startUp({ dataDir, providerUrl: provider.url }, children);
    const second = await startExtraGateway(
      {
        dataDir,
        natsUrl: stack.natsUrl,
        providerUrl: provider.url,
        instanceId: "gw-second",
        budgetUrl: stack.budgetUrl,
      },
      children,
    );
    const bus = await connectBus({ servers: stack.natsUrl, prefix: "hf", name: "bench-ratelimit" });
    console.log(
      `Holdfast rate-limit benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}\n` +
        `${STEPS} steps per agent, a ~500-token context growing ~150 tokens a step, max_tokens ${MAX_TOKENS}; ` +
        `each key sized for a ${BOUND_S} s bound\n`,
    );
    const rows: string[][] = [];
    for (const size of SIZES) {
      for (const arm of ARMS) {
        const key = keyOf(size, arm);
        const limits = limitsByKey[key]!;
        const bases =
          arm === "reactive"
            ? [`${provider.url}/v1`]
            : arm === "holdfast"
              ? [stack.gatewayUrl]
              : [stack.gatewayUrl, `${second.url}/v1`];
        const prefix = `${arm.replace(" ", "")}-${size}`;
        const outcome = await runFleet(size, bases, key, provider, prefix);
        if (arm !== "reactive") {
          for (let a = 0; a < size; a++) {
            const history = await bus.readRun(`${prefix}-agent-${a}`);
            const view = describeRun(
              "",
              history.events.map((e) => e.envelope),
            );
            outcome.waits += view.steps.filter((s) => s.prediction?.action === "wait").length;
            outcome.checkpoints += view.control.filter(
              (c) => c.what === "tripped" && c.trip?.limit === "rate_limit",
            ).length;
            outcome.gatewayRetries += view.totals.retries;
          }
        }
        // The provider's rates per minute; its bucket starts full (limits.tpm).
        const tpm = (limits.tpm * 60_000) / limits.windowMs;
        const rpm = (limits.rpm * 60_000) / limits.windowMs;
        const boundMs = (outcome.chargedTokens / tpm) * 60_000;
        const afterFullMs = (Math.max(0, outcome.chargedTokens - limits.tpm) / tpm) * 60_000;
        rows.push([
          String(size),
          arm,
          `${Math.round(tpm).toLocaleString("en-US")} / ${Math.round(rpm).toLocaleString("en-US")}`,
          String(outcome.sent429),
          String(outcome.seen429),
          String(outcome.redone),
          outcome.wastedTokens.toLocaleString("en-US"),
          arm === "reactive" ? "-" : `${outcome.waits} / ${outcome.checkpoints} / ${outcome.gatewayRetries}`,
          `${(outcome.wallMs / 1_000).toFixed(1)} s`,
          `${(boundMs / 1_000).toFixed(1)} s (${(afterFullMs / 1_000).toFixed(1)} s)`,
          `x${(outcome.wallMs / boundMs).toFixed(2)}`,
        ]);
        console.log(`  ${size} agents, ${arm}: done in ${(outcome.wallMs / 1_000).toFixed(1)} s`);
      }
    }
    console.log();
    printTable(
      [
        "agents",
        "arm",
        "TPM / RPM",
        "429s sent",
        "429s seen by agents",
        "steps redone",
        "tokens re-sent",
        "waits / checkpoints / retries",
        "wall-clock",
        "bound (less the full window)",
        "wall / bound",
      ],
      rows,
    );
    console.log(
      "\n429s sent: refusals the provider answered; seen by agents: those that reached the agents' code past the SDK's retries.\n" +
        "tokens re-sent: the input of every refused request (it was sent again). bound: the tokens the provider admitted / TPM;\n" +
        "in brackets, less the full window the key starts with (the least a run that uses every token can take).\n" +
        "Target: 0 seen, 0 re-sent, wall / bound ≤ 1.10.",
    );
    await bus.close();
  } finally {
    for (const child of children) child.kill("SIGTERM");
    await provider.close();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function keyOf(size: number, arm: Arm): string {
  return `sk-bench-${arm.replace(" ", "")}-${size}-0000000000000000000`;
}

/** What a fleet's calls will take of the window, roughly (the bound printed is from what the provider admitted). */
function plannedTotals(size: number): { tokens: number; requests: number; largest: number } {
  let tokens = 0;
  let largest = 0;
  let chars = SYSTEM.length;
  for (let step = 1; step <= STEPS; step++) {
    chars += QUESTION.length + 4 * MAX_TOKENS;
    const call = Math.ceil(chars / 4) + MAX_TOKENS;
    tokens += call;
    largest = Math.max(largest, call);
  }
  return { tokens: tokens * size, requests: STEPS * size, largest };
}

/** Every agent of the fleet at once, to the end; the provider's refusals counted on the key. */
async function runFleet(
  size: number,
  bases: readonly string[],
  apiKey: string,
  provider: FakeProvider,
  prefix: string,
): Promise<Outcome> {
  const started = Date.now();
  const results = await Promise.all(
    Array.from({ length: size }, (_, a) => agent(bases[a % bases.length]!, apiKey, `${prefix}-agent-${a}`)),
  );
  const wallMs = Date.now() - started;
  const mine = provider.requests.filter((r) => r.apiKey === apiKey);
  const refusals = mine.filter((r) => r.status === 429);
  return {
    wallMs,
    sent429: refusals.length,
    seen429: results.reduce((sum, r) => sum + r.seen, 0),
    redone: results.reduce((sum, r) => sum + r.redone, 0),
    wastedTokens: refusals.reduce((sum, r) => sum + inputOf(r.body), 0),
    chargedTokens: mine
      .filter((r) => r.status === 200)
      .reduce((sum, r) => sum + answeredInput(r.responseBody) + MAX_TOKENS, 0),
    waits: 0,
    checkpoints: 0,
    gatewayRetries: 0,
  };
}

/** One agent: STEPS calls on a growing conversation; a step whose call fails (after the SDK's retries) is redone. */
async function agent(
  baseUrl: string,
  apiKey: string,
  runId: string,
): Promise<{ seen: number; redone: number }> {
  const client = new OpenAI({
    apiKey,
    baseURL: baseUrl,
    defaultHeaders: { "X-Holdfast-Run": runId },
    timeout: 600_000,
  });
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "system", content: SYSTEM }];
  let seen = 0;
  let redone = 0;
  for (let step = 1; step <= STEPS; step++) {
    messages.push({ role: "user", content: `Step ${step}. ${QUESTION}` });
    for (;;) {
      try {
        const answer = await client.chat.completions.create({
          model: "gpt-4o-mini",
          max_tokens: MAX_TOKENS,
          messages,
        });
        messages.push({ role: "assistant", content: answer.choices[0]?.message.content ?? "" });
        break;
      } catch (error) {
        if (!(error instanceof OpenAI.APIError) || error.status !== 429) throw error;
        seen += 1;
        redone += 1;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }
  return { seen, redone };
}

/** The input the provider counted for an answer (its usage). */
function answeredInput(body: string): number {
  const usage = (JSON.parse(body) as { usage?: { prompt_tokens?: number } }).usage;
  return usage?.prompt_tokens ?? 0;
}

/** The input of a request as the provider counts it (what a refused request carried in vain). */
function inputOf(body: unknown): number {
  return promptTokens((body as { messages?: ChatMessage[] } | undefined)?.messages ?? []);
}

function printTable(head: string[], rows: string[][]): void {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(line(head));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const row of rows) console.log(line(row));
}

await main();
