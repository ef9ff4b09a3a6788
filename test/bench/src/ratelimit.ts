// pnpm bench:ratelimit — fleets of agents sharing one rate-limited key: the reactive
// baseline (the official SDK's retries) against Holdfast's prediction, one gateway and two,
// on every shape of window the fake provider has.
//
// For each window mode (BENCH_MODES) and fleet size (BENCH_SIZES: 1, 8 and 50 agents), each
// agent runs STEPS steps of a conversation that grows every step, charged input plus
// max_tokens at admission, as OpenAI does. Every cell is on a fresh key of its mode, sized so
// that its lower bound is about BOUND_S seconds:
// - continuous: buckets that refill steadily; bound = tokens admitted / rate. A bucket holds
//   twice the fleet's largest call and refills in a few seconds rather than a minute, so a run
//   takes BOUND_S, not an hour, and the full window it starts with is a small part of it.
// - fixed: whole windows that start at multiples of the window on the clock (each cell starts
//   at one); sliding: what was spent counts against the key for one window. In both no window
//   holds more than its capacity, so bound = (the windows the admitted tokens, or requests,
//   need − 1) × window: the start of the last one. Sized so the tokens need at least 4
//   windows, each holding at least twice the largest call.
// - none: a continuous bucket whose answers carry no rate-limit headers, and only retry-after
//   on a 429; the continuous bound.
// The requests window binds too, a little less than the tokens'.
//
// Four arms (BENCH_ARMS), each on a fresh key: the agents calling the provider directly with
// the openai SDK's own retries (2, honouring retry-after) and their loop redoing a step whose
// call still failed; the same agents through one Holdfast gateway; through two gateways
// (half the agents each) sharing the key through the budget service's coordinator; and, in
// the `none` mode only, through one gateway told the key's limits (predict.limits), as an
// operator who knows them tells it.
//
// Per cell it prints: the 429s the provider sent, the 429s that reached agent code, the steps
// redone, the input tokens re-sent (waste), the calls Holdfast made wait, the runs it
// checkpointed, the 429s it retried itself, and the wall-clock against the bound; then each
// Holdfast cell that misses a target.
//
// BENCH_MODES (default "continuous,fixed,sliding,none"), BENCH_SIZES ("1,8,50"), BENCH_ARMS
// ("reactive,holdfast,holdfast x2,holdfast told"), BENCH_STEPS (20) and BENCH_BOUND_S (30) change the run.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type Bus, connectBus } from "@holdfast/bus";
import { describeRun } from "@holdfast/events";
import {
  type ChatMessage,
  type FakeProvider,
  promptTokens,
  startFakeProvider,
  WINDOW_MODES,
  type WindowMode,
  windowOf,
} from "@holdfast/fake-provider";
import OpenAI from "openai";
import { startExtraGateway, startUp } from "./processes.js";

type Arm = "reactive" | "holdfast" | "holdfast x2" | "holdfast told";
const ALL_ARMS: readonly Arm[] = ["reactive", "holdfast", "holdfast x2", "holdfast told"];

const MODES = listOf("BENCH_MODES", "continuous,fixed,sliding,none", WINDOW_MODES);
const SIZES = (process.env.BENCH_SIZES ?? "1,8,50").split(",").map(Number);
const ARMS = listOf("BENCH_ARMS", ALL_ARMS.join(","), ALL_ARMS);
const STEPS = Number(process.env.BENCH_STEPS ?? 20);
const BOUND_S = Number(process.env.BENCH_BOUND_S ?? 30);
const MAX_TOKENS = 100;
// ~500 tokens of instructions to start with (about four characters a token), and ~100 more
// with every step's question, besides the answers.
const SYSTEM = "You are a careful research agent working through a long task. ".repeat(32);
const QUESTION = "Summarise what you found so far, then take the next step of the task. ".repeat(6);
// The fewest windows a fixed or sliding cell's tokens need, so that the bound is not one
// window's luck.
const MIN_WINDOWS = 4;
const TARGET_RATIO = 1.1;

/** One key's limits: `tpm` tokens and `rpm` requests per `windowMs`, whatever the mode. */
interface Limits {
  readonly mode: WindowMode;
  readonly tpm: number;
  readonly rpm: number;
  readonly windowMs: number;
}

interface Outcome {
  wallMs: number;
  sent429: number;
  seen429: number;
  redone: number;
  wastedTokens: number;
  chargedTokens: number;
  admitted: number;
  /** What each admitted call took of the tokens window, in the order the provider admitted them. */
  calls: number[];
  waits: number;
  checkpoints: number;
  gatewayRetries: number;
  /** Why the cell did not finish: an agent failed on something other than a 429. */
  error?: string;
}

interface Cell {
  readonly mode: WindowMode;
  readonly size: number;
  readonly arm: Arm;
  readonly key: string;
  readonly limits: Limits;
  /** The provider the cell's agents reach, and the gateway they call, when the cell has its own (`holdfast told`). */
  provider?: FakeProvider;
  bases?: string[];
}

async function main(): Promise<void> {
  const cells: Cell[] = [];
  for (const mode of MODES) {
    for (const size of SIZES) {
      const limits = limitsFor(mode, size);
      for (const arm of ARMS) {
        // Limits are declared for a provider that reports none: the other modes report theirs.
        if (arm === "holdfast told" && mode !== "none") continue;
        cells.push({ mode, size, arm, key: keyOf(mode, size, arm), limits });
      }
    }
  }
  const limitsByKey = Object.fromEntries(cells.map((cell) => [cell.key, cell.limits]));
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-ratelimit-"));
  const children: ChildProcess[] = [];
  const provider = await startFakeProvider({ port: 0, limitsByKey, recordRequests: true });
  const told: FakeProvider[] = [];
  let bus: Bus | undefined;
  try {
    // Each `holdfast told` cell has a provider of its own, whose origin its limits are
    // declared for (predict.limits is by origin), and a gateway of its own in front of it.
    const config = { predict: { limits: {}, window_shapes: {} } } as {
      predict: { limits: Record<string, object>; window_shapes: Record<string, string> };
    };
    for (const cell of cells.filter((c) => c.arm === "holdfast told")) {
      const own = await startFakeProvider({
        port: 0,
        limitsByKey: { [cell.key]: cell.limits },
        recordRequests: true,
      });
      told.push(own);
      cell.provider = own;
      const origin = new URL(own.url).origin;
      config.predict.limits[origin] = {
        window_s: cell.limits.windowMs / 1_000,
        tokens: cell.limits.tpm,
        requests: cell.limits.rpm,
      };
      // The fake's headerless mode is a token bucket, and is declared so.
      config.predict.window_shapes[origin] = "continuous";
    }
    const configFile = join(dataDir, "bench-ratelimit.json");
    writeFileSync(configFile, JSON.stringify(config));
    // The stack only when an arm goes through it: the reactive arm alone needs none.
    const bases: Record<Arm, string[]> = {
      reactive: [`${provider.url}/v1`],
      holdfast: [],
      "holdfast x2": [],
      "holdfast told": [],
    };
    if (ARMS.some((arm) => arm !== "reactive")) {
      const { file: stack } = await startUp({ dataDir, providerUrl: provider.url, configFile }, children);
      bases.holdfast = [stack.gatewayUrl];
      for (const cell of cells.filter((c) => c.provider !== undefined)) {
        const own = await startExtraGateway(
          {
            dataDir,
            natsUrl: stack.natsUrl,
            providerUrl: cell.provider!.url,
            instanceId: `gw-told-${cell.size}`,
            budgetUrl: stack.budgetUrl,
            configFile,
          },
          children,
        );
        cell.bases = [`${own.url}/v1`];
      }
      if (ARMS.includes("holdfast x2")) {
        const second = await startExtraGateway(
          {
            dataDir,
            natsUrl: stack.natsUrl,
            providerUrl: provider.url,
            instanceId: "gw-second",
            budgetUrl: stack.budgetUrl,
            configFile,
          },
          children,
        );
        bases["holdfast x2"] = [stack.gatewayUrl, `${second.url}/v1`];
      }
      // Read the runs' events as the CLI does: as the stack's reader, with the credential up made.
      bus = await connectBus({
        servers: stack.natsUrl,
        prefix: "hf",
        name: "bench-ratelimit",
        credentials: join(dataDir, "credentials", "nats-reader.nk"),
        principal: "reader",
      });
    }
    console.log(
      `Holdfast rate-limit benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}\n` +
        `${STEPS} steps per agent, a ~500-token context growing ~150 tokens a step, max_tokens ${MAX_TOKENS}; ` +
        `each key sized for a ${BOUND_S} s bound; modes ${MODES.join(", ")}\n`,
    );
    const rows: string[][] = [];
    const misses: string[] = [];
    for (const cell of cells) {
      const { mode, size, arm, key, limits } = cell;
      // A fixed window's periods are aligned on the clock: start at one, so the first is whole
      // for the whole of it and the bound is the windows' starts from here.
      if (mode === "fixed") await sleep(limits.windowMs - (Date.now() % limits.windowMs));
      const prefix = `${mode}-${arm.replace(" ", "")}-${size}`;
      const outcome = await runFleet(size, cell.bases ?? bases[arm], key, cell.provider ?? provider, prefix);
      if (arm !== "reactive" && bus !== undefined) await countHoldfast(bus, outcome, prefix, size);
      const bound = boundOf(limits, outcome, size);
      const ratio = bound.ms > 0 ? outcome.wallMs / bound.ms : Number.NaN;
      rows.push([
        mode,
        String(size),
        arm,
        `${limits.tpm.toLocaleString("en-US")} / ${limits.rpm.toLocaleString("en-US")} per ${seconds(limits.windowMs)}`,
        String(outcome.sent429),
        String(outcome.seen429),
        String(outcome.redone),
        outcome.wastedTokens.toLocaleString("en-US"),
        arm === "reactive" ? "-" : `${outcome.waits} / ${outcome.checkpoints} / ${outcome.gatewayRetries}`,
        outcome.error === undefined ? seconds(outcome.wallMs) : "failed",
        `${seconds(bound.ms)} (${bound.detail})`,
        Number.isNaN(ratio) ? "-" : `x${ratio.toFixed(2)}`,
      ]);
      console.log(
        `  ${mode}, ${size} agents, ${arm}: ` +
          (outcome.error === undefined ? `done in ${seconds(outcome.wallMs)}` : `failed: ${outcome.error}`),
      );
      // The targets are Holdfast's; the reactive arm is the baseline it is measured against.
      if (arm !== "reactive") {
        const missed: string[] = [];
        if (outcome.error !== undefined) missed.push(`failed (${outcome.error})`);
        if (outcome.seen429 > 0) missed.push(`${outcome.seen429} 429s seen by agents`);
        if (outcome.wastedTokens > 0)
          missed.push(`${outcome.wastedTokens.toLocaleString("en-US")} tokens re-sent`);
        if (!(ratio <= TARGET_RATIO))
          missed.push(`wall / bound ${Number.isNaN(ratio) ? "-" : `x${ratio.toFixed(2)}`}`);
        if (missed.length > 0) misses.push(`NOT met: ${mode}, ${size} agents, ${arm}: ${missed.join(", ")}`);
      }
    }
    console.log();
    printTable(
      [
        "mode",
        "agents",
        "arm",
        "tokens / requests per window",
        "429s sent",
        "429s seen by agents",
        "steps redone",
        "tokens re-sent",
        "waits / checkpoints / retries",
        "wall-clock",
        "bound",
        "wall / bound",
      ],
      rows,
    );
    console.log(
      "\n429s sent: refusals the provider answered; seen by agents: those that reached the agents' code past the SDK's retries.\n" +
        "tokens re-sent: the input of every refused request (it was sent again). bound, by mode:\n" +
        "  continuous: the tokens the provider admitted / its rate; in brackets, less the full window the key starts with\n" +
        "    (the least a run that uses every token can take).\n" +
        "  fixed, sliding: no window holds more than its capacity, so (the windows the admitted tokens need, or the\n" +
        "    requests if more, − 1) × the window: the start of the last one; in brackets, how many windows. Or, when\n" +
        '    later ("alone"), when one agent\'s calls could all be in with the windows to itself, each sent the moment\n' +
        "    they let it in: a call does not fit the part of a window the one before it left. fair: the windows the\n" +
        "    calls take when no agent is kept back while its call fits (least advanced first, answers taking no time);\n" +
        "    more than the bound when the requests limit leaves early windows short of tokens.\n" +
        "  none: the provider's own bucket; Holdfast sees no figures (no rate-limit headers, only retry-after on a 429);\n" +
        "    the continuous bound. holdfast told: the same, its limits and shape declared (predict.limits, window_shapes).\n" +
        `Target: 0 seen by agents, 0 re-sent, wall / bound ≤ ${TARGET_RATIO.toFixed(2)} (Holdfast's arms; the reactive arm is the baseline).\n`,
    );
    if (!ARMS.some((arm) => arm !== "reactive")) console.log("No Holdfast arm ran: no targets to meet.");
    else if (misses.length === 0) console.log("every cell met its targets");
    else for (const miss of misses) console.log(miss);
  } finally {
    await bus?.close();
    for (const child of children) child.kill("SIGTERM");
    await provider.close();
    for (const own of told) await own.close();
    await sleep(1_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** A cell's limits: a bound of about BOUND_S for the fleet's planned tokens, in the mode's own terms. */
function limitsFor(mode: WindowMode, size: number): Limits {
  const { tokens, requests, largest } = plannedTotals(size);
  if (mode === "fixed" || mode === "sliding") {
    // n windows, the bound the start of the last: (n − 1) × window = BOUND_S. As many windows
    // as hold twice the largest call each, but no shorter than a second, and at least
    // MIN_WINDOWS (a tiny BENCH_STEPS can make those two disagree: twice the call wins).
    const n = Math.max(
      MIN_WINDOWS,
      Math.min(Math.floor(tokens / (2 * largest) + 0.5), Math.floor(BOUND_S) + 1),
    );
    // Half a window to spare, so tokens a little off the plan still need n windows.
    return {
      mode,
      windowMs: Math.round((BOUND_S * 1_000) / (n - 1)),
      tpm: Math.max(2 * largest, Math.ceil(tokens / (n - 0.5))),
      rpm: Math.max(2, Math.ceil(requests / (0.8 * (n - 1) + 0.5))),
    };
  }
  // The fleet's tokens take BOUND_S at the refill rate, its requests 80% of that; the window
  // holds twice the largest call.
  const perMs = tokens / (BOUND_S * 1_000);
  const windowMs = Math.max(1_000, Math.ceil((2 * largest) / perMs));
  return {
    mode,
    tpm: Math.ceil(perMs * windowMs),
    rpm: Math.max(2, Math.ceil((requests / (BOUND_S * 800)) * windowMs)),
    windowMs,
  };
}

/** The least time the tokens (and requests) the provider admitted could have taken, in the cell's mode. */
function boundOf(limits: Limits, outcome: Outcome, size: number): { ms: number; detail: string } {
  const { mode, tpm, rpm, windowMs } = limits;
  if (mode === "fixed" || mode === "sliding") {
    const windows = Math.max(Math.ceil(outcome.chargedTokens / tpm), Math.ceil(outcome.admitted / rpm));
    const windowsMs = Math.max(0, windows - 1) * windowMs;
    // Every agent makes the same calls: one of each size is one agent's conversation.
    const oneAgent = [...outcome.calls].sort((a, b) => a - b).filter((_, i) => i % size === 0);
    const aloneMs = earliestMs(limits, oneAgent);
    // Not the bound: what a fleet that keeps no agent back needs (see fairWindows).
    const fair = fairWindows(limits, oneAgent, size);
    return aloneMs > windowsMs
      ? { ms: aloneMs, detail: `${windows} windows; alone` }
      : { ms: windowsMs, detail: `${windows} windows; fair ${fair}` };
  }
  // The bucket starts full (tpm) and refills tpm a window.
  const ms = (outcome.chargedTokens / tpm) * windowMs;
  const afterFullMs = (Math.max(0, outcome.chargedTokens - tpm) / tpm) * windowMs;
  return { ms, detail: seconds(afterFullMs) };
}

/**
 * When the last of one agent's calls could be admitted with the cell's windows to itself, each
 * call sent the moment the windows let it in. No schedule admits a sequence of calls sooner
 * (what an earlier admission holds of a window it gives back no later), so no agent of a fleet
 * can finish before this. A window's tokens can outlast what the fleet needs of it: a call
 * does not fit the part of a window the one before left.
 */
function earliestMs(limits: Limits, calls: readonly number[]): number {
  let now = 0;
  const clock = () => now;
  // The cell started at a period's start (fixed) or on an empty log (sliding): both at 0 here.
  const tokens = windowOf(limits.mode, limits.tpm, clock, limits.windowMs);
  const requests = windowOf(limits.mode, limits.rpm, clock, limits.windowMs);
  for (const cost of calls) {
    for (;;) {
      const waitMs = Math.max(tokens.waitMs(cost), requests.waitMs(1));
      if (waitMs === 0) break;
      if (!Number.isFinite(waitMs)) return 0;
      now += waitMs;
    }
    tokens.take(cost);
    requests.take(1);
  }
  return now;
}

/**
 * How many whole windows the fleet's calls take when no agent is kept back while its call
 * fits: each window filled, least advanced agent first, with answers taking no time at all.
 * Not a lower bound (a schedule that lets some agents run ahead puts their larger calls into
 * the early windows that the requests limit leaves short of tokens), but what a scheduler
 * that is fair to equal agents cannot beat.
 */
function fairWindows(limits: Limits, steps: readonly number[], size: number): number {
  const next = new Array<number>(size).fill(0);
  let windows = 0;
  while (Math.min(...next) < steps.length) {
    windows += 1;
    let tokens = 0;
    let requests = 0;
    for (;;) {
      const agent = next.indexOf(Math.min(...next));
      const cost = steps[next[agent]!];
      if (cost === undefined || requests >= limits.rpm || tokens + cost > limits.tpm) break;
      tokens += cost;
      requests += 1;
      next[agent]! += 1;
    }
    // A call no window holds: the cell cannot finish, and its bound says so elsewhere.
    if (requests === 0) return Number.POSITIVE_INFINITY;
  }
  return windows;
}

/** What Holdfast did for the cell's runs, from their events. */
async function countHoldfast(bus: Bus, outcome: Outcome, prefix: string, size: number): Promise<void> {
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

function keyOf(mode: WindowMode, size: number, arm: Arm): string {
  return `sk-bench-${mode}-${arm.replace(" ", "")}-${size}-0000000000000000000`;
}

/** A comma-separated list from the environment, each item one of `allowed` (spaces ignored). */
function listOf<T extends string>(name: string, fallback: string, allowed: readonly T[]): T[] {
  const squash = (text: string) => text.replaceAll(" ", "");
  return (process.env[name] ?? fallback).split(",").map((item) => {
    const found = allowed.find((candidate) => squash(candidate) === squash(item));
    if (found === undefined) throw new Error(`${name}: '${item}' is not one of ${allowed.join(", ")}`);
    return found;
  });
}

const seconds = (ms: number) => `${(ms / 1_000).toFixed(1)} s`;

/**
 * What a fleet's calls will take of the window: each call's prompt as the provider counts it,
 * plus max_tokens, on the conversation the agents build. The fake answers by quoting the first
 * 200 characters of the last user message; the bound printed is from what it admitted.
 */
function plannedTotals(size: number): { tokens: number; requests: number; largest: number } {
  let tokens = 0;
  let largest = 0;
  const messages: ChatMessage[] = [{ role: "system", content: SYSTEM }];
  for (let step = 1; step <= STEPS; step++) {
    const question = `Step ${step}. ${QUESTION}`;
    messages.push({ role: "user", content: question });
    const call = promptTokens(messages) + MAX_TOKENS;
    messages.push({ role: "assistant", content: `Fake reply to: ${question.slice(0, 200)}` });
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
  // Every agent to its end, even when one fails: none is left calling into the next cell.
  const settled = await Promise.allSettled(
    Array.from({ length: size }, (_, a) => agent(bases[a % bases.length]!, apiKey, `${prefix}-agent-${a}`)),
  );
  const wallMs = Date.now() - started;
  const results = settled.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failure = settled.find((r) => r.status === "rejected");
  const mine = provider.requests.filter((r) => r.apiKey === apiKey);
  const refusals = mine.filter((r) => r.status === 429);
  const answered = mine.filter((r) => r.status === 200);
  const calls = answered.map((r) => answeredInput(r.responseBody) + MAX_TOKENS);
  return {
    wallMs,
    sent429: refusals.length,
    seen429: results.reduce((sum, r) => sum + r.seen, 0),
    redone: results.reduce((sum, r) => sum + r.redone, 0),
    wastedTokens: refusals.reduce((sum, r) => sum + inputOf(r.body), 0),
    chargedTokens: calls.reduce((sum, call) => sum + call, 0),
    admitted: answered.length,
    calls,
    waits: 0,
    checkpoints: 0,
    gatewayRetries: 0,
    ...(failure === undefined ? {} : { error: String(failure.reason).split("\n", 1)[0] }),
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

// Exit once the table is out: a socket the SDK keeps alive must not hold the process open.
main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
