import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startBudget } from "@holdfast/budget";
import { loadConfig } from "@holdfast/config";
import { startControl } from "@holdfast/control";
import {
  encodeEnvelope,
  makeEnvelope,
  type QuarantineReason,
  type RunView,
  StepCompleted,
} from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { startScheduler } from "@holdfast/scheduler";
import { agent, DurableStatus, RunsApi } from "@holdfast/sdk";
import { makeTempDir, publishRaw, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An attack run found that one event nobody can read stopped the projector for good, made
// its run unreadable (show failed, its calls got 503) and kept `up` from starting with
// budgets configured; and that a run sequence that jumped was applied. Each poison here is
// written straight into the stream on a run's subject with a plain NATS connection, as a
// buggy or stolen service credential, another version or a damaged disk could write it.
// After it: the run's calls go on and are metered, the projector goes on, `show` reads the
// run and lists the event set aside, the count is visible, and services started on the
// log start.

const BIN = fileURLToPath(new URL("../../../../libs/cli/dist/bin.js", import.meta.url));
const run = promisify(execFile);
const silent = createLogger({ name: "restarted", level: "silent" });

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ config: { budgets: { "*": { monthly_usd: 1_000 } } } });
});
afterAll(async () => {
  await stack?.close();
});

const ask = (runId: string, content: string) =>
  stack
    .client({ headers: { "X-Holdfast-Run": runId } })
    .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content }] });

/** What each poison is, written on `runId`'s subject when the run is at `sequence`. */
interface Poison {
  name: string;
  type: string;
  reason: QuarantineReason;
  bytes(runId: string, sequence: number): Uint8Array;
}

const envelope = (runId: string, sequence: number, payload: Parameters<typeof makeEnvelope>[0]["payload"]) =>
  makeEnvelope({ id: `forged-${runId}`, runId, sequence, timestampMs: Date.now(), tag: "", payload });

const completed = (inputTokens: number) =>
  ({
    $case: "stepCompleted",
    value: StepCompleted.fromPartial({
      outcome: { stepId: "forged", step: 1, upstreamStatus: 200, usage: { reported: true, inputTokens } },
    }),
  }) as const;

const POISONS: Poison[] = [
  {
    name: "garbage bytes",
    type: "StepCompleted",
    reason: "undecodable",
    bytes: () => new Uint8Array([0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef]),
  },
  {
    name: "an envelope whose type disagrees with its payload",
    type: "StepCompleted",
    reason: "type_mismatch",
    bytes: (runId, sequence) =>
      encodeEnvelope({ ...envelope(runId, sequence + 1, completed(1)), type: "StepFailed" }),
  },
  {
    name: "an int64 beyond 2^53 in a StepCompleted",
    type: "StepCompleted",
    reason: "out_of_range",
    bytes: (runId, sequence) => encodeEnvelope(envelope(runId, sequence + 1, completed(2 ** 60))),
  },
  {
    // A stop, which the gateway acts on the moment it is stored: were it applied, the
    // run's calls would be refused.
    name: "an event whose run sequence jumps to 1,000",
    type: "RunStopped",
    reason: "out_of_sequence",
    bytes: (runId) =>
      encodeEnvelope(
        envelope(runId, 1_000, {
          $case: "runStopped",
          value: { actor: undefined, reason: "forged", selector: undefined },
        }),
      ),
  },
];

const health = async (url: string) => (await fetch(url)).json() as Promise<Record<string, unknown>>;
const quarantinedIn = (body: Record<string, unknown>) =>
  body.quarantined as { total: number; by_reason: Record<QuarantineReason, number> };

const placed: { runId: string; seq: number; reason: QuarantineReason }[] = [];

describe.each(POISONS.map((poison, i) => ({ ...poison, runId: `poisoned-${i}` })))(
  "a run with $name in its log",
  (poison) => {
    it("goes on: its next calls are answered and metered, the projector projects them, show lists the poison", async () => {
      await ask(poison.runId, "before");
      const before = await stack.settled(poison.runId, 1);
      const subject = stack.bus.subjects.runEvent(poison.runId, poison.type as "StepCompleted");
      const seq = await publishRaw(
        stack.config.nats.url!,
        subject,
        poison.bytes(poison.runId, before.lastSequence),
        {
          credentials: stack.credentials?.files.admin,
        },
      );
      placed.push({ runId: poison.runId, seq, reason: poison.reason });

      for (const content of ["after", "and after"]) {
        const answer = await ask(poison.runId, content);
        expect(answer.choices[0]?.message.content).toBe(`Fake reply to: ${content}`);
      }
      const view: RunView = await stack.settled(poison.runId, 3);
      expect(view).toMatchObject({ status: "idle", completed: 3, failed: 0, lastSequence: 6 });
      expect(view.steps.map((step) => [step.step, step.status])).toEqual([
        [1, "completed"],
        [2, "completed"],
        [3, "completed"],
      ]);
      // Metered: each call's usage and cost are recorded.
      expect(view.steps.every((step) => step.inputTokens > 0 && step.costNanoUsd !== null)).toBe(true);
      expect(view.quarantined).toEqual([
        expect.objectContaining({ streamSequence: seq, reason: poison.reason }),
      ]);

      // The projector went past it: the calls after it are in `steps`.
      await waitFor(
        async () => {
          const [row] = await stack.sql<{ n: string }>(
            `SELECT count() AS n FROM steps WHERE run_id = '${poison.runId}'`,
          );
          return Number(row?.n) === 3 || undefined;
        },
        { timeoutMs: 15_000, message: `the calls of ${poison.runId} after the poison were not projected` },
      );
    });
  },
);

describe("the log after every poison", () => {
  it("counts each set-aside event where the services show their health, and in quarantined_events", async () => {
    const origin = new URL(stack.gatewayUrl).origin;
    const gateway = quarantinedIn(await health(`${origin}/holdfast/health`));
    expect(gateway.total).toBeGreaterThanOrEqual(POISONS.length);
    for (const poison of POISONS) expect(gateway.by_reason[poison.reason]).toBeGreaterThanOrEqual(1);

    const projector = quarantinedIn(await health(`${stack.analyticsUrl}/health`));
    expect(projector.total).toBe(POISONS.length);
    const rows = await stack.sql<{ stream_seq: number; run_id: string; reason: string }>(
      "SELECT stream_seq, run_id, reason FROM quarantined_events ORDER BY stream_seq",
    );
    expect(rows).toEqual(
      placed.map(({ runId, seq, reason }) => ({ stream_seq: seq, run_id: runId, reason })),
    );
    // One warning line per event and process, however often it was read.
    const lines = stack
      .logs()
      .split("\n")
      .filter((line) => line.includes("quarantined (it stays in the log"));
    expect(lines.length).toBeGreaterThanOrEqual(POISONS.length);
  });

  it("starts every service on the poisoned log: budget (budgets configured), control, scheduler, another gateway", async () => {
    const budget = await startBudget(stack.configFor("budget"), silent);
    const control = await startControl(
      { ...stack.configFor("control"), control: { ...stack.config.control, port: 0, grpc_port: 0 } },
      silent,
    );
    const scheduler = await startScheduler(
      loadConfig({
        env: {},
        overrides: {
          ...stack.configFor("scheduler"),
          scheduler: { ...stack.config.scheduler, port: 0, grpc_port: 0 },
        },
      }),
      silent,
    );
    const gateway = await stack.extraGateway({});
    try {
      // Control reads a poisoned run as show does, and counts what it set aside.
      const runId = "poisoned-0";
      const response = await fetch(`${control.url}/runs/${runId}`);
      expect(response.status).toBe(200);
      const { run: view } = (await response.json()) as { run: RunView };
      expect(view.quarantined).toEqual([expect.objectContaining({ reason: "undecodable" })]);
      expect(quarantinedIn(await health(`${control.url}/health`)).total).toBeGreaterThanOrEqual(1);
      expect(quarantinedIn(await health(`${scheduler.url}/holdfast/health`))).toMatchObject({
        total: expect.any(Number),
      });
      // A gateway started now serves a poisoned run's next call.
      const answer = await gateway.client({ "X-Holdfast-Run": "poisoned-3" }).chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "still here" }],
      });
      expect(answer.choices[0]?.message.content).toBe("Fake reply to: still here");
    } finally {
      await gateway.close();
      await scheduler.close();
      await control.close();
      await budget.close();
    }
  });

  it("keeps a durable run's forged end out of its fold and out of what a watch of it is sent", async () => {
    const scheduler = await startScheduler(
      loadConfig({
        env: {},
        overrides: {
          ...stack.configFor("scheduler"),
          scheduler: { ...stack.config.scheduler, port: 0, grpc_port: 0 },
        },
      }),
      silent,
    );
    try {
      const api = new RunsApi({ scheduler: scheduler.grpcAddress });
      await api.deploy(agent({ name: "poisoned-agent", version: "v1" }, async () => "done"));
      const { run: submitted } = await api.submit("poisoned-agent", {});
      const runId = submitted.runId;
      // No worker serves the agent: the run stays queued, unless a forged end is believed.
      const forged = envelope(runId, 1_000, {
        $case: "runFinished",
        value: { lease: 1, outputJson: '"forged"', degraded: "", ranMs: 1 },
      });
      await publishRaw(
        stack.config.nats.url!,
        stack.bus.subjects.runEvent(runId, "RunFinished"),
        encodeEnvelope(forged),
        {
          credentials: stack.credentials?.files.admin,
        },
      );
      expect((await api.get(runId)).status).toBe(DurableStatus.DURABLE_STATUS_QUEUED);
      const cancelled = await api.cancel(runId, "enough");
      expect(cancelled.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
      // The watch sends the run's own events in order, and ends with its real end.
      const seen: { type: string; sequence: number; id: string }[] = [];
      for await (const event of api.watch(runId))
        seen.push({ type: event.type, sequence: event.sequence, id: event.id });
      expect(seen.map((e) => [e.type, e.sequence])).toEqual([
        ["RunSubmitted", 1],
        ["RunFailed", 2],
      ]);
      expect(quarantinedIn(await health(`${scheduler.url}/holdfast/health`)).by_reason.out_of_sequence).toBe(
        1,
      );
    } finally {
      await scheduler.close();
    }
  });

  it("`holdfast show` prints the run with the event it set aside: where it is, why, its first bytes", async () => {
    const dir = await makeTempDir("show");
    try {
      const { stdout } = await run(process.execPath, [BIN, "show", "poisoned-0", "--data-dir", dir.path], {
        env: {
          PATH: process.env.PATH,
          HOLDFAST_NATS__URL: stack.config.nats.url,
          HOLDFAST_NATS__PREFIX: stack.config.nats.prefix,
          HOLDFAST_NATS__CREDENTIALS: stack.credentials?.files.reader,
        },
        timeout: 30_000,
      });
      const [{ seq }] = placed as [(typeof placed)[number]];
      expect(stdout).toMatch(/^steps {7}3 \(3 completed, 0 failed\)$/m);
      expect(stdout).toMatch(/^quarantined 1 event set aside, not folded \(listed below\)$/m);
      expect(stdout).toMatch(
        new RegExp(
          `^ *${seq}\\s+-\\s+StepCompleted\\s+undecodable\\s+7\\s+event is not a valid protobuf Envelope`,
          "m",
        ),
      );
      expect(stdout).toContain(`  ${seq}: ffffffdeadbeef`);
    } finally {
      await dir[Symbol.asyncDispose]();
    }
  });
});
