import { createHash } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";
import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { type RunningControl, startControl } from "@holdfast/control";
import { createLogger } from "@holdfast/log";
import { type RunningScheduler, startScheduler } from "@holdfast/scheduler";
import { agent, DurableStatus, type HoldfastWorker, RunsApi, worker } from "@holdfast/sdk";
import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "../stack.js";

// Runs are scoped by tenant: two tenants never share a run, whatever ids they send. Run ids
// were the id as sent, so two tenants naming one run id shared one run, and one tenant's
// hold (a trip, a stop) fell on the other's calls; and a call's tenant was a header any
// client could set. With `tenants` configured, a call's tenant is the one whose gateway key
// it carries (X-Holdfast-Key), and a call without a known key is refused before anything
// is forwarded or recorded.

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

describe("with tenants configured, a call's tenant is its gateway key's", () => {
  const ACME_KEY = "hfk_acme-Qx9Zr2Lw4Mv8Nt6Kp3Hy5abcdefghijklmn";
  // Keys need not look like Holdfast's own: the operator chooses what it hashes.
  const GLOBEX_KEY = "globex-gateway-key-7d1e0c9b8a7f6e5d4c3b2a19";
  const sha256 = (key: string) => createHash("sha256").update(key).digest("hex");
  let t: TenantStack;
  beforeAll(async () => {
    t = await startTenantStack({
      tenants: { acme: { keys_sha256: [sha256(ACME_KEY)] }, globex: { keys_sha256: [sha256(GLOBEX_KEY)] } },
      tool_gate: { deny: [{ name: "lookup" }] },
    });
  });
  afterAll(async () => {
    await t?.close();
  });
  const keyed = (key: string | undefined, headers: Record<string, string> = {}) =>
    t.stack.client({ headers: { ...(key === undefined ? {} : { "X-Holdfast-Key": key }), ...headers } });

  it("refuses a call without a key, or with a key no tenant has, 401 in each API's shape, before anything is forwarded or recorded", async () => {
    const sent = t.stack.provider.requests.length;
    const logged = (await t.stack.bus.streamState()).lastSeq;
    const headers = { "X-Holdfast-Run": "no-key", "X-Holdfast-Tenant": "acme" };

    const chat = await ask(keyed(undefined, headers), "hi").catch((error: unknown) => error);
    expect(chat).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(chat).toMatchObject({ status: 401, code: "holdfast_key_required" });
    const responses = await keyed(undefined, headers)
      .responses.create({ model: "gpt-4o-mini", input: "hi" })
      .catch((error: unknown) => error);
    expect(responses).toBeInstanceOf(OpenAI.AuthenticationError);
    const messages = await t.stack
      .anthropic({ headers })
      .messages.create({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 10,
        messages: [{ role: "user", content: "hi" }],
      })
      .catch((error: unknown) => error);
    expect(messages).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((messages as Error).message).toMatch(/X-Holdfast-Key/);
    // Passed-through paths too.
    const models = await keyed(undefined)
      .models.list()
      .catch((error: unknown) => error);
    expect(models).toBeInstanceOf(OpenAI.AuthenticationError);

    const unknownKey = "hfk_nobody-was-given-this-key-0123456789abcdef";
    const unknown = await ask(keyed(unknownKey, headers), "hi").catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(unknown).toMatchObject({ status: 401, code: "holdfast_key_unknown" });
    expect((unknown as Error).message).not.toContain(unknownKey);
    const unknownAnthropic = await t.stack
      .anthropic({ headers: { "X-Holdfast-Key": `${ACME_KEY}-not` } })
      .messages.create({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 10,
        messages: [{ role: "user", content: "hi" }],
      })
      .catch((error: unknown) => error);
    expect(unknownAnthropic).toBeInstanceOf(Anthropic.AuthenticationError);

    expect(t.stack.provider.requests.length).toBe(sent);
    expect((await t.stack.bus.streamState()).lastSeq).toBe(logged);
  });

  it("meters a tenant's call on <tenant>/<run>, whatever X-Holdfast-Tenant says, and forwards neither header", async () => {
    const answer = await ask(
      keyed(ACME_KEY, { "X-Holdfast-Run": "run-1", "X-Holdfast-Tenant": "globex" }),
      "hi",
    );
    expect(answer.choices[0]?.message.content).toBe("Fake reply to: hi");
    const run = await t.stack.settled("acme/run-1", 1);
    expect(run.tenant).toBe("acme");
    expect((await t.stack.run("globex/run-1")).steps).toHaveLength(0);
    // A run id naming another tenant's run stays within the key's tenant.
    await ask(keyed(GLOBEX_KEY, { "X-Holdfast-Run": "acme/run-1" }), "globex reaching");
    expect((await t.stack.settled("globex/acme/run-1", 1)).tenant).toBe("globex");
    expect((await t.stack.run("acme/run-1")).steps).toHaveLength(1);

    const forwarded = t.stack.provider.requests.at(-1)!;
    expect(forwarded.headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(Object.keys(forwarded.headers).filter((name) => name.startsWith("x-holdfast-"))).toEqual([]);
  });

  it("does not join another tenant's run by continuing its response (previous_response_id)", async () => {
    const first = await keyed(ACME_KEY, { "X-Holdfast-Run": "chain" }).responses.create({
      model: "gpt-4o-mini",
      input: "Remember the word lighthouse",
    });
    // Its own tenant's follow-up joins the run; another tenant's is a run of its own.
    await keyed(ACME_KEY).responses.create({
      model: "gpt-4o-mini",
      previous_response_id: first.id,
      input: "And?",
    });
    const before = await runsWithSteps(t.stack);
    await keyed(GLOBEX_KEY).responses.create({
      model: "gpt-4o-mini",
      previous_response_id: first.id,
      input: "What was the word?",
    });
    const chain = await t.stack.settled("acme/chain", 2);
    expect(chain.steps).toHaveLength(2);
    const fresh = [...(await runsWithSteps(t.stack))].filter((run) => !before.has(run));
    expect(fresh).toHaveLength(1);
    expect(fresh[0]).toMatch(/^globex\//);
    const globex = await t.stack.settled(fresh[0]!, 1);
    expect(globex.tenant).toBe("globex");
    expect(globex.identifiedBy?.source).not.toBe("previous_response");
  });

  it("never records or logs the key, even where the call's content carries it", async () => {
    const runId = "keyed-gate";
    // The model asks for a gated tool with the key in its arguments: the gate records them.
    // globex's key has no shape a credential pattern knows: only the call's own secrets redact it.
    const call = keyed(GLOBEX_KEY, { "X-Holdfast-Run": runId })
      .chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: `[[call:lookup {"note":"my key is ${GLOBEX_KEY}"}]]` }],
        tools: [
          { type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } },
        ],
      })
      .catch((error: unknown) => error);
    const gate = await waitFor(
      async () => (await t.stack.run(`globex/${runId}`)).gates.find((g) => g.status === "pending"),
      { timeoutMs: 15_000, message: "the gate held no answer" },
    );
    expect(JSON.stringify(gate)).toContain("[redacted]");
    expect(await operate(t.control, "deny", `globex/${runId}`)).toBe(200);
    expect(await call).toBeInstanceOf(OpenAI.PermissionDeniedError);
    await ask(keyed(ACME_KEY, { "X-Holdfast-Run": "acme-call" }), `my key is ${ACME_KEY}`);
    await t.stack.settled("acme/acme-call", 1);

    const log: string[] = [];
    for await (const message of t.stack.bus.allMessages()) {
      log.push(Buffer.from(message.data).toString("latin1"), message.headers, message.subject);
    }
    const everything = { log: log.join("\n"), logs: t.stack.logs() };
    expect(everything.log).toContain("keyed-gate");
    for (const [where, text] of Object.entries(everything)) {
      for (const secret of [ACME_KEY, ACME_KEY.slice(8, 30), GLOBEX_KEY, GLOBEX_KEY.slice(8, 30)]) {
        expect(text.includes(secret), `${secret} found in ${where}`).toBe(false);
      }
    }
  });

  it("runs a tenant's durable run as its run, its model calls carrying the tenant's key", async () => {
    await t.api.deploy(caller);
    t.workers.push(
      await worker({
        agents: [caller],
        scheduler: t.scheduler.grpcAddress,
        name: "keyed",
        tenantKeys: { acme: ACME_KEY },
      }),
    );
    const { run } = await t.api.submit("tenant-caller", {}, { tenant: "acme" });
    expect(run.runId).toMatch(/^acme\/tenant-caller-/);
    const done = await t.api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    const view = await t.stack.settled(run.runId, 1);
    expect(view.tenant).toBe("acme");
    expect(view.steps.map((s) => s.status)).toEqual(["completed"]);
  });
});
