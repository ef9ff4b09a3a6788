// pnpm bench:predict — agents on a shared rate-limited key: reactive against predictive.
//
// agentpause's live run, reproduced on the fake provider (whose token bucket refills
// continuously, like Groq's): a 6,000-tokens-a-minute key, an agent of 12 steps on a
// ~1,000-token context that grows each step, and (second scenario) a fleet of 4 such agents
// sharing one key of 4x the window. One `holdfast up` (prediction on, its defaults) and a
// second gateway on the same log with prediction off; each scenario runs once through
// each, on a fresh key. The agents are the same code on both: the official openai SDK with
// its default retries (2, honouring retry-after), and the agent's own loop redoing a step
// whose call still failed. Prints, per side: the 429s the provider sent, the steps the
// agents had to redo, the input tokens re-sent (the waste), the calls Holdfast made wait
// or checkpointed, and the wall-clock.
//
// BENCH_SCALE (default 1) multiplies every window, so a run takes 1/BENCH_SCALE the time.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { connectBus } from "@holdfast/bus";
import { describeRun } from "@holdfast/events";
import { type FakeProvider, startFakeProvider } from "@holdfast/fake-provider";
import OpenAI from "openai";
import { startExtraGateway, startUp } from "./processes.js";

const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const STEPS = 12;
const TPM = 6_000 * SCALE;
// ~1,000 tokens of context to start with (about four characters a token), growing each step.
const SYSTEM = "You are a careful research agent. ".repeat(118);
const MAX_TOKENS = 100;

interface Scenario {
  readonly name: string;
  readonly agents: number;
  readonly tpm: number;
}

const SCENARIOS: readonly Scenario[] = [
  { name: `1 agent, ${TPM.toLocaleString("en-US")} TPM`, agents: 1, tpm: TPM },
  { name: `4 agents sharing ${(4 * TPM).toLocaleString("en-US")} TPM`, agents: 4, tpm: 4 * TPM },
];

interface Outcome {
  wallMs: number;
  refused: number;
  redone: number;
  wastedTokens: number;
  waits: number;
  checkpoints: number;
  gatewayRetries: number;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-predict-"));
  const children: ChildProcess[] = [];
  const limitsByKey: Record<string, { tpm: number; rpm: number }> = {};
  for (const [i, scenario] of SCENARIOS.entries()) {
    for (const side of ["reactive", "predictive"]) {
      limitsByKey[keyOf(i, side)] = { tpm: scenario.tpm, rpm: 1_000 };
    }
  }
  const provider = await startFakeProvider({ port: 0, limitsByKey, recordRequests: true });
  try {
    const { file: stack } = await startUp({ dataDir, providerUrl: provider.url }, children);
    const offConfig = join(dataDir, "predict-off.yaml");
    writeFileSync(offConfig, "predict: { enabled: false }\n");
    const reactive = await startExtraGateway(
      {
        dataDir,
        natsUrl: stack.natsUrl,
        providerUrl: provider.url,
        instanceId: "gw-reactive",
        configFile: offConfig,
      },
      children,
    );
    const bus = await connectBus({ servers: stack.natsUrl, prefix: "hf", name: "bench-predict" });
    console.log(
      `Holdfast prediction benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}\n` +
        `${STEPS} steps per agent, ~1,000-token context growing each step, max_tokens ${MAX_TOKENS}; SDK retries 2 (its default)\n`,
    );
    const rows: string[][] = [];
    for (const [i, scenario] of SCENARIOS.entries()) {
      for (const side of ["reactive", "predictive"] as const) {
        const baseUrl = side === "reactive" ? `${reactive.url}/v1` : stack.gatewayUrl;
        const key = keyOf(i, side);
        const outcome = await runScenario(scenario, baseUrl, key, provider, `${side}-${i}`);
        const runs = await Promise.all(
          Array.from({ length: scenario.agents }, (_, a) => bus.readRun(`${side}-${i}-agent-${a}`)),
        );
        for (const history of runs) {
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
        rows.push([
          scenario.name,
          side,
          String(outcome.refused),
          String(outcome.redone),
          outcome.wastedTokens.toLocaleString("en-US"),
          `${outcome.waits} / ${outcome.checkpoints} / ${outcome.gatewayRetries}`,
          `${(outcome.wallMs / 1_000).toFixed(1)} s`,
        ]);
        console.log(`  ${scenario.name}, ${side}: done in ${(outcome.wallMs / 1_000).toFixed(1)} s`);
      }
    }
    console.log();
    printTable(
      [
        "scenario",
        "side",
        "429s sent",
        "steps redone",
        "tokens re-sent",
        "waits / checkpoints / retries",
        "wall-clock",
      ],
      rows,
    );
    console.log(
      "\n429s sent: refusals the provider answered (each a request wasted); tokens re-sent: the input of those requests.\n" +
        "waits / checkpoints / retries: calls Holdfast made wait in place, runs it checkpointed, 429s it retried itself.\n" +
        "agentpause's figures for its live run (Groq free tier, 6K TPM, 12 steps): reactive 7 429s, 7 steps redone,\n" +
        "12,840 tokens re-sent, 82 s; agentpause 0, 0, 0, 86 s (plus 259 tokens of telemetry pings; Holdfast sends none).",
    );
    await bus.close();
  } finally {
    for (const child of children) child.kill("SIGTERM");
    await provider.close();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function keyOf(scenario: number, side: string): string {
  return `sk-bench-${side}-${scenario}-000000000000000000`;
}

/** Every agent of the scenario, at once, to the end; the provider's refusals counted on the key. */
async function runScenario(
  scenario: Scenario,
  baseUrl: string,
  apiKey: string,
  provider: FakeProvider,
  runPrefix: string,
): Promise<Outcome> {
  const started = Date.now();
  const redone = await Promise.all(
    Array.from({ length: scenario.agents }, (_, a) => agent(baseUrl, apiKey, `${runPrefix}-agent-${a}`)),
  );
  const wallMs = Date.now() - started;
  const refusals = provider.requests.filter((r) => r.apiKey === apiKey && r.status === 429);
  return {
    wallMs,
    refused: refusals.length,
    redone: redone.reduce((sum, n) => sum + n, 0),
    // What a refused request carried in: its prompt, about four characters a token.
    wastedTokens: refusals.reduce((sum, r) => sum + Math.ceil(promptChars(r.body) / 4), 0),
    waits: 0,
    checkpoints: 0,
    gatewayRetries: 0,
  };
}

/** One agent: STEPS calls on a growing conversation; a step whose call fails (after the SDK's retries) is redone. */
async function agent(baseUrl: string, apiKey: string, runId: string): Promise<number> {
  const client = new OpenAI({
    apiKey,
    baseURL: baseUrl,
    defaultHeaders: { "X-Holdfast-Run": runId },
    timeout: 600_000,
  });
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "system", content: SYSTEM }];
  let redone = 0;
  for (let step = 1; step <= STEPS; step++) {
    messages.push({ role: "user", content: `Step ${step}: summarise what you found so far, then go on.` });
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
        redone += 1;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }
  return redone;
}

function promptChars(body: unknown): number {
  const messages = (body as { messages?: { content?: unknown }[] } | undefined)?.messages ?? [];
  return messages.reduce((sum, m) => sum + (typeof m.content === "string" ? m.content.length : 0), 0);
}

function printTable(head: string[], rows: string[][]): void {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(line(head));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const row of rows) console.log(line(row));
}

await main();
