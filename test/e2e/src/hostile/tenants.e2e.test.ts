import Anthropic from "@anthropic-ai/sdk";
import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { type RunningControl, startControl } from "@holdfast/control";
import { createLogger } from "@holdfast/log";
import { type RunningScheduler, startScheduler } from "@holdfast/scheduler";
import { agent, DurableStatus, type HoldfastWorker, RunsApi, worker } from "@holdfast/sdk";
import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// Runs are scoped by tenant: two tenants never share a run, whatever ids they send. Run ids
// were the id as sent, so two tenants naming one run id shared one run, and one tenant's
// hold (a trip, a stop) fell on the other's calls.

const CONTROL_TOKEN = "control-token-for-tenant-tests-0123456789";

/** A stack with the control API (operators' holds and gate decisions) and the scheduler (durable runs). */
interface TenantStack {
  stack: Stack;
  control: RunningControl;
  scheduler: RunningScheduler;
  api: RunsApi;
  workers: HoldfastWorker[];
  close(): Promise<void>;
}

async function startTenantStack(config: DeepPartial<Config>): Promise<TenantStack> {
  const stack = await startStack({ config: { hold: { keepalive_ms: 1_000 }, ...config } });
  const control = await startControl(
    {
      ...stack.configFor("control"),
      control: { ...stack.config.control, port: 0, grpc_port: 0, token: CONTROL_TOKEN },
    },
    createLogger({ name: "control", level: "silent" }),
  );
  const scheduler = await startScheduler(
    loadConfig({
      env: {},
      overrides: {
        ...stack.configFor("scheduler"),
        scheduler: {
          host: "127.0.0.1",
          grpc_port: 0,
          port: 0,
          gateway_url: new URL(stack.gatewayUrl).origin,
        },
      },
    }),
    createLogger({ name: "scheduler", level: "warn" }),
  );
  const api = new RunsApi({ scheduler: scheduler.grpcAddress });
  const workers: HoldfastWorker[] = [];
  return {
    stack,
    control,
    scheduler,
    api,
    workers,
    async close() {
      for (const w of workers) await w.stop();
      api.close();
      await scheduler.close();
      await control.close();
      await stack.close();
    },
  };
}

/** An operator's action on a run through the control REST API, as `holdfast hold|resume|deny <run>` sends it. */
async function operate(
  control: RunningControl,
  action: "hold" | "resume" | "deny",
  runId: string,
): Promise<number> {
  const response = await fetch(`${control.url}/runs/${encodeURIComponent(runId)}/${action}`, {
    method: "POST",
    headers: { authorization: `Bearer ${CONTROL_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ reason: "tenant test" }),
  });
  await response.text();
  return response.status;
}

const ask = (client: OpenAI, content: string) =>
  client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content }] });

/** Every run id the log holds a step of, as its subjects name them. */
async function runsWithSteps(stack: Stack): Promise<Set<string>> {
  const runs = new Set<string>();
  for await (const stored of stack.bus.allMessages()) {
    if (stored.subject.endsWith(".StepStarted")) runs.add(stack.bus.subjects.runIdOf(stored.subject));
  }
  return runs;
}

/** An agent whose one step is one model call through the gateway, under its run. */
const caller = agent({ name: "tenant-caller", version: "v1" }, async (run) => {
  const openai = await run.openai({ apiKey: "sk-test-durable-tenant" });
  return run.step("model", async () => {
    const completion = await ask(openai, `Durable call of ${run.id}`);
    return completion.choices[0]?.message.content ?? "";
  });
});

describe("runs scoped by tenant (tenant from X-Holdfast-Tenant, no tenants configured)", () => {
  let t: TenantStack;
  beforeAll(async () => {
    t = await startTenantStack({});
  });
  afterAll(async () => {
    await t?.close();
  });
  const tenantClient = (tenant: string | undefined, runId?: string) =>
    t.stack.client({
      headers: {
        ...(tenant === undefined ? {} : { "X-Holdfast-Tenant": tenant }),
        ...(runId === undefined ? {} : { "X-Holdfast-Run": runId }),
      },
    });

  it("gives two tenants sending the same run id two runs, and a hold of one does not hold the other", async () => {
    await ask(tenantClient("acme", "shared-run"), "acme's first");
    await ask(tenantClient("globex", "shared-run"), "globex's first");
    const acme = await t.stack.settled("acme/shared-run", 1);
    const globex = await t.stack.settled("globex/shared-run", 1);
    expect(acme.tenant).toBe("acme");
    expect(globex.tenant).toBe("globex");
    expect((await t.stack.run("shared-run")).steps).toHaveLength(0);

    expect(await operate(t.control, "hold", "acme/shared-run")).toBe(200);
    let acmeAnswered = false;
    const acmeCall = ask(tenantClient("acme", "shared-run"), "acme's second").then((answer) => {
      acmeAnswered = true;
      return answer;
    });
    await waitFor(async () => ((await t.stack.run("acme/shared-run")).parked > 0 ? true : undefined), {
      timeoutMs: 10_000,
      message: "acme's call was not parked on its held run",
    });
    // The other tenant's run of the same id goes on meanwhile.
    const globexAnswer = await ask(tenantClient("globex", "shared-run"), "globex's second");
    expect(globexAnswer.choices[0]?.message.content).toBe("Fake reply to: globex's second");
    expect((await t.stack.settled("globex/shared-run", 2)).status).not.toBe("held");
    expect(acmeAnswered).toBe(false);

    expect(await operate(t.control, "resume", "acme/shared-run")).toBe(200);
    expect((await acmeCall).choices[0]?.message.content).toBe("Fake reply to: acme's second");
    expect((await t.stack.settled("acme/shared-run", 2)).steps).toHaveLength(2);
    expect((await t.stack.run("globex/shared-run")).control).toEqual([]);
  });

  it("never lets an untenanted call name a tenant's run: acme/x sent untenanted is the run /acme/x", async () => {
    await ask(tenantClient("acme", "x"), "acme's x");
    await ask(tenantClient(undefined, "acme/x"), "nobody's acme/x");
    const acme = await t.stack.settled("acme/x", 1);
    const untenanted = await t.stack.settled("/acme/x", 1);
    expect(acme.steps).toHaveLength(1);
    expect(acme.tenant).toBe("acme");
    expect(untenanted.tenant).toBe("");
    // Nor can a tenant name another's run, or an untenanted one.
    await ask(tenantClient("globex", "acme/x"), "globex's acme/x");
    expect((await t.stack.settled("globex/acme/x", 1)).tenant).toBe("globex");
    await ask(tenantClient("acme", "/acme/x"), "acme's /acme/x");
    expect((await t.stack.settled("acme//acme/x", 1)).tenant).toBe("acme");
    expect((await t.stack.run("acme/x")).steps).toHaveLength(1);
    expect((await t.stack.run("/acme/x")).steps).toHaveLength(1);
  });

  it("splits two tenants' identical fingerprinted agents into two runs, each with generations of its own", async () => {
    const first = { role: "user" as const, content: "An agent that names no run, run by two tenants alike" };
    const loop = [
      first,
      { role: "assistant" as const, content: "On it." },
      { role: "user" as const, content: "Go on" },
    ];
    const agentCall = (tenant: string, messages: (typeof loop)[number][]) =>
      tenantClient(tenant).chat.completions.create({ model: "gpt-4o-mini", messages });
    const before = await runsWithSteps(t.stack);
    await agentCall("acme", [first]);
    await agentCall("globex", [first]);
    await agentCall("acme", loop);
    // Fewer messages than its last call: acme's agent started again, a new generation.
    await agentCall("acme", [first]);
    // globex's agent goes on with its own loop, in its own run.
    await agentCall("globex", loop);
    const fresh = [...(await runsWithSteps(t.stack))].filter((run) => !before.has(run)).sort();
    expect(fresh).toHaveLength(3);
    const [acme1, acme2, globex1] = fresh as [string, string, string];
    expect(acme1).toMatch(/^acme\/fp-[0-9a-f]{16}-1$/);
    expect(acme2).toBe(acme1.replace(/-1$/, "-2"));
    expect(globex1).toMatch(/^globex\/fp-[0-9a-f]{16}-1$/);
    expect((await t.stack.settled(acme1, 2)).steps).toHaveLength(2);
    expect((await t.stack.settled(acme2, 1)).steps).toHaveLength(1);
    expect((await t.stack.settled(globex1, 2)).steps).toHaveLength(2);
  });

  it('refuses a tenant holding "/", and a run id the tenant\'s prefix takes past 256 characters, with a 400 naming why', async () => {
    const sent = t.stack.provider.requests.length;
    const slash = await ask(tenantClient("acme/eu", "r"), "hi").catch((error: unknown) => error);
    expect(slash).toBeInstanceOf(OpenAI.BadRequestError);
    expect((slash as Error).message).toMatch(/tenant in header X-Holdfast-Tenant contains "\/"/);
    const long = await ask(tenantClient("acme", "r".repeat(254)), "hi").catch((error: unknown) => error);
    expect(long).toBeInstanceOf(OpenAI.BadRequestError);
    expect((long as Error).message).toMatch(
      /run id in header X-Holdfast-Run, with its tenant's prefix "acme\/", is 259 characters long; the limit is 256: the prefix counts/,
    );
    const anthropic = await t.stack
      .anthropic({ headers: { "X-Holdfast-Tenant": "a/b" } })
      .messages.create({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 10,
        messages: [{ role: "user", content: "hi" }],
      })
      .catch((error: unknown) => error);
    expect(anthropic).toBeInstanceOf(Anthropic.BadRequestError);
    expect(t.stack.provider.requests.length).toBe(sent);
  });

  it("runs a durable run submitted with a tenant as the tenant's run, its model calls metered on it", async () => {
    await t.api.deploy(caller);
    t.workers.push(await worker({ agents: [caller], scheduler: t.scheduler.grpcAddress, name: "plain" }));
    const { run } = await t.api.submit("tenant-caller", {}, { tenant: "acme" });
    expect(run.runId).toMatch(/^acme\/tenant-caller-/);
    const done = await t.api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    const view = await t.stack.settled(run.runId, 1);
    expect(view.tenant).toBe("acme");
    expect(view.steps).toHaveLength(1);
    expect(view.steps[0]?.status).toBe("completed");
    expect((await t.api.get(run.runId)).modelCalls).toBe(1);
  });
});
