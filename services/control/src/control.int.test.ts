import { type Bus, connectBus } from "@holdfast/bus";
import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import {
  ActorKind,
  createIdGenerator,
  type Envelope,
  type EventPayload,
  evolve,
  FLEET,
  initialState,
  makeEnvelope,
  RunHeld,
  type RunState,
  StepCompleted,
  StepStarted,
  type StoredEnvelope,
} from "@holdfast/events";
import { checkHealth, connect, GrpcStatus, listServices, type ServiceError } from "@holdfast/grpc";
import { createLogger } from "@holdfast/log";
import { startProjector } from "@holdfast/projector";
import { ControlClient, ControlService, RateLimitObserved, RunAction } from "@holdfast/proto";
import { Ledger } from "@holdfast/runs";
import { makeTempDir, natsUrl, publishRaw, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InsecureBindError } from "./errors.js";
import { type RunningControl, startControl } from "./service.js";

// The control service as deployed: its REST and gRPC APIs on real sockets, over the
// harness's nats-server, with an embedded-ClickHouse projector for the runs a selector
// matches. The test writes calls into the log as a gateway would, then asks for holds,
// resumes and stops, and reads back the events every gateway would act on.

const CONTROL = "control-secret-0123456789";
const READ = "read-secret-0123456789";
const log = createLogger({ name: "control-test", level: "silent" });
const prefix = uniqueNamespace("control");
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let bus: Bus;
let control: RunningControl;
let closeProjector: () => Promise<void>;
let gateway: Ledger<RunState, EventPayload[]>;

function configWith(overrides: DeepPartial<Config>): Config {
  return loadConfig({
    env: {},
    overrides: {
      data_dir: dir.path,
      nats: { url: natsUrl(), prefix },
      ...overrides,
      control: { port: 0, grpc_port: 0, ...overrides.control },
    },
  });
}

beforeAll(async () => {
  dir = await makeTempDir("control");
  bus = await connectBus({ servers: natsUrl(), prefix, name: "control-test" });
  await bus.provision();
  const newId = createIdGenerator();
  // Appends events as they are given: the log as gateways write it.
  gateway = new Ledger<RunState, EventPayload[]>({
    aggregate: {
      initial: initialState,
      evolve,
      decide: (events) => events,
      lastSequence: (state) => state.lastSequence,
    },
    bus,
    log,
    clock: Date.now,
    newId,
  });
  const projector = await startProjector(
    configWith({ projector: { port: 0, linger_ms: 50, batch_size: 100, ack_wait_ms: 2_000 } }),
    log,
  );
  closeProjector = projector.close;
  control = await startControl(
    configWith({ control: { token: CONTROL, read_token: READ, analytics_url: projector.url } }),
    log,
  );
}, 120_000);

afterAll(async () => {
  await control?.close();
  await closeProjector?.();
  await bus?.close();
  await dir?.[Symbol.asyncDispose]();
});

let steps = 0;
/** One model call of the run, answered (or still in flight), as a gateway records it. */
async function call(
  runId: string,
  options: { tag?: string; model?: string; prompt?: string; inFlight?: boolean } = {},
): Promise<void> {
  steps += 1;
  const stepId = `step-${steps}`;
  const model = options.model ?? "gpt-4o-mini";
  const state = await gateway.current(runId);
  const events: EventPayload[] = [
    {
      $case: "stepStarted",
      value: StepStarted.fromPartial({
        stepId,
        step: state.started + 1,
        model,
        promptHash: options.prompt ?? "abcdef0123456789",
      }),
    },
  ];
  if (!options.inFlight) {
    events.push({
      $case: "stepCompleted",
      value: StepCompleted.fromPartial({
        outcome: {
          stepId,
          step: state.started + 1,
          model,
          upstreamStatus: 200,
          cost: { known: true, nanoUsd: 1_000 },
        },
      }),
    });
  }
  await gateway.execute(runId, { tag: options.tag ?? "", tenant: "" }, events);
}

async function events(runId: string): Promise<StoredEnvelope[]> {
  return (await bus.readRun(runId)).events.map((e) => e.envelope);
}

async function payloads(runId: string, $case: EventPayload["$case"]) {
  return (await events(runId)).flatMap((e) =>
    e.payload !== undefined && e.payload.$case === $case ? [e.payload.value] : [],
  );
}

/** Waits until the projection has every run named. */
async function projected(...runIds: string[]): Promise<void> {
  await waitFor(
    async () => {
      const body = (await rest("GET", "/runs?limit=10000")).body as { runs: { run_id: string }[] };
      const ids = new Set(body.runs.map((r) => r.run_id));
      return runIds.every((id) => ids.has(id)) ? true : undefined;
    },
    { timeoutMs: 20_000, message: `the projection did not show ${runIds.join(", ")}` },
  );
}

async function rest(
  method: string,
  path: string,
  body?: unknown,
  // null: no Authorization header at all.
  token: string | null = CONTROL,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${control.url}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

const OPERATOR = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };

describe("holding, resuming and stopping by run id", () => {
  it("appends RunHeld with the operator and the reason, once", async () => {
    await call("solo-1");
    const first = await rest("POST", "/runs/solo-1/hold", { reason: "looks stuck" });
    expect(first.status).toBe(200);
    expect(first.body.runs).toEqual([{ run_id: "solo-1", changed: true, status: "held" }]);
    expect(await payloads("solo-1", "runHeld")).toEqual([
      expect.objectContaining({ actor: OPERATOR, reason: "looks stuck", ruleId: "" }),
    ]);

    const again = await rest("POST", "/runs/solo-1/hold", { reason: "still stuck" });
    expect(again.body.runs).toEqual([{ run_id: "solo-1", changed: false, status: "held" }]);
    expect(await payloads("solo-1", "runHeld")).toHaveLength(1);
  });

  it("resumes with the window's own limits, cost in nano-USD", async () => {
    const resumed = await rest("POST", "/runs/solo-1/resume", {
      reason: "fixed",
      steps: 5,
      cost: 0.5,
      minutes: 10,
    });
    expect(resumed.body.runs).toEqual([{ run_id: "solo-1", changed: true, status: "idle" }]);
    expect(await payloads("solo-1", "runResumed")).toEqual([
      expect.objectContaining({
        actor: OPERATOR,
        reason: "fixed",
        overrides: true,
        checkpoint: false,
        limits: { maxSteps: 5, maxCostNanoUsd: 500_000_000, maxMinutes: 10, maxTokensPerMinute: 0 },
      }),
    ]);
  });

  it("stops a run once, and shows it as the CLI does", async () => {
    expect((await rest("POST", "/runs/solo-1/stop", { reason: "enough" })).body.runs).toEqual([
      { run_id: "solo-1", changed: true, status: "stopped" },
    ]);
    expect((await rest("POST", "/runs/solo-1/stop", {})).body.runs).toEqual([
      { run_id: "solo-1", changed: false, status: "stopped" },
    ]);
    expect(await payloads("solo-1", "runStopped")).toHaveLength(1);
    const shown = (await rest("GET", "/runs/solo-1")).body.run as {
      status: string;
      hold: { action: string; reason: string };
      control: { what: string; actor: string }[];
    };
    expect(shown.status).toBe("stopped");
    expect(shown.hold).toMatchObject({ action: "stop", reason: "enough" });
    expect(shown.control.map((c) => c.what)).toEqual(["held", "resumed", "stopped"]);
    expect(shown.control[0]?.actor).toBe("operator (control token)");
  });

  it("holds a run that has not called yet, so its first call is parked", async () => {
    const held = await rest("POST", "/runs/not-yet/hold", { reason: "before it starts" });
    expect(held.body.runs).toEqual([{ run_id: "not-yet", changed: true, status: "held" }]);
    expect(await payloads("not-yet", "runHeld")).toHaveLength(1);
  });

  it("answers 404 for a run that never was, and 400 for an id no run can have", async () => {
    expect(await rest("GET", "/runs/never-was")).toMatchObject({
      status: 404,
      body: { error: { code: "not_found" } },
    });
    expect((await rest("POST", "/runs/never-was/resume", {})).status).toBe(404);
    const bad = await rest("POST", `/runs/${encodeURIComponent("a\u0001b")}/hold`, {});
    expect(bad).toMatchObject({ status: 400, body: { error: { code: "invalid_argument" } } });
    expect((await rest("POST", "/runs/x/hold", { reason: "r", steps: 2 })).body).toMatchObject({
      error: { code: "invalid_argument", message: expect.stringMatching(/unknown field "steps"/) },
    });
  });
});

describe("holding, resuming and stopping by selector", () => {
  it("holds every run the selector matches now, adds a standing rule, and leaves the rest", async () => {
    await call("fleet-a1", { tag: "fleet-a" });
    await call("fleet-a2", { tag: "fleet-a", model: "gpt-4o" });
    await call("fleet-b1", { tag: "fleet-b" });
    await projected("fleet-a1", "fleet-a2", "fleet-b1");

    const held = await rest("POST", "/hold", { tag: "fleet-a", reason: "incident 42" });
    expect(held.status).toBe(200);
    expect((held.body.runs as { run_id: string }[]).map((r) => r.run_id).sort()).toEqual([
      "fleet-a1",
      "fleet-a2",
    ]);
    expect(held.body).toMatchObject({
      rule_created: true,
      rule: { description: "--tag fleet-a", reason: "incident 42", actor: "operator (control token)" },
    });
    for (const runId of ["fleet-a1", "fleet-a2"]) {
      expect(await payloads(runId, "runHeld")).toEqual([
        expect.objectContaining({
          actor: OPERATOR,
          reason: "incident 42",
          selector: expect.objectContaining({ tag: "fleet-a" }),
        }),
      ]);
    }
    expect(await payloads("fleet-b1", "runHeld")).toEqual([]);
    const rule = held.body.rule as { rule_id: string };
    expect(await payloads(FLEET, "holdRuleAdded")).toContainEqual(
      expect.objectContaining({ ruleId: rule.rule_id, actor: OPERATOR, reason: "incident 42" }),
    );
    expect((await rest("GET", "/rules")).body.rules).toContainEqual(
      expect.objectContaining({
        rule_id: rule.rule_id,
        selector: expect.objectContaining({ tag: "fleet-a" }),
      }),
    );
  });

  it("adds no second rule and no second hold when asked again", async () => {
    const rulesBefore = (await payloads(FLEET, "holdRuleAdded")).length;
    const again = await rest("POST", "/hold", { tag: "fleet-a", reason: "again" });
    expect(again.body).toMatchObject({ rule_created: false });
    expect((again.body.runs as { changed: boolean }[]).every((r) => !r.changed)).toBe(true);
    expect(await payloads(FLEET, "holdRuleAdded")).toHaveLength(rulesBefore);
    expect(await payloads("fleet-a1", "runHeld")).toHaveLength(1);
  });

  it("resumes the held runs it matches, and lifts the rule with exactly that selector", async () => {
    // A run of that tag that is not held: a resume by selector leaves it alone.
    await call("fleet-a3", { tag: "fleet-a" });
    const rule = (
      (await rest("GET", "/rules")).body.rules as { rule_id: string; description: string }[]
    ).find((r) => r.description === "--tag fleet-a")!;
    const resumed = await rest("POST", "/resume", { tag: "fleet-a", reason: "resolved" });
    expect(resumed.status).toBe(200);
    expect((resumed.body.runs as { run_id: string }[]).map((r) => r.run_id).sort()).toEqual([
      "fleet-a1",
      "fleet-a2",
    ]);
    expect(resumed.body.lifted_rules).toEqual([expect.objectContaining({ rule_id: rule.rule_id })]);
    expect(await payloads("fleet-a3", "runResumed")).toEqual([]);
    expect(await payloads("fleet-a1", "runResumed")).toEqual([
      expect.objectContaining({ reason: "resolved", selector: expect.objectContaining({ tag: "fleet-a" }) }),
    ]);
    expect(await payloads(FLEET, "holdRuleLifted")).toContainEqual(
      expect.objectContaining({ ruleId: rule.rule_id, actor: OPERATOR, reason: "resolved" }),
    );
    expect((await rest("GET", "/rules")).body.rules).not.toContainEqual(
      expect.objectContaining({ rule_id: rule.rule_id }),
    );
    // Resuming again finds nothing held.
    expect((await rest("POST", "/resume", { tag: "fleet-a" })).body).toEqual({ runs: [], lifted_rules: [] });
  });

  it("with a status, acts on the runs in that state now and leaves no standing rule", async () => {
    await call("busy-1", { tag: "busy", inFlight: true });
    await call("busy-2", { tag: "busy" });
    await projected("busy-1", "busy-2");
    const held = await rest("POST", "/hold", { tag: "busy", status: "running" });
    expect(held.body).toEqual({
      runs: [{ run_id: "busy-1", changed: true, status: "held" }],
      rule: null,
      rule_created: false,
    });
  });

  it("stops every run it matches by model and prompt, without a rule", async () => {
    await call("model-1", { model: "claude-sonnet-4", prompt: "feedbeef00" });
    await call("model-2", { model: "claude-sonnet-4", prompt: "0000aaaa" });
    await projected("model-1", "model-2");
    const rulesBefore = (await rest("GET", "/rules")).body.rules;
    const stopped = await rest("POST", "/stop", { model: "claude-", prompt: "feed", reason: "loop" });
    expect(stopped.body).toEqual({ runs: [{ run_id: "model-1", changed: true, status: "stopped" }] });
    expect(await payloads("model-1", "runStopped")).toEqual([
      expect.objectContaining({ reason: "loop", selector: expect.objectContaining({ promptHash: "feed" }) }),
    ]);
    expect((await rest("GET", "/rules")).body.rules).toEqual(rulesBefore);
  });

  it("lifts one rule by id, and answers 404 for a rule not in force", async () => {
    const held = await rest("POST", "/hold", { run: "lift-me-*", reason: "x" });
    const ruleId = (held.body.rule as { rule_id: string }).rule_id;
    const lifted = await rest("DELETE", `/rules/${ruleId}?reason=done`);
    expect(lifted).toMatchObject({ status: 200, body: { rule: { rule_id: ruleId } } });
    expect(await payloads(FLEET, "holdRuleLifted")).toContainEqual(
      expect.objectContaining({ ruleId, reason: "done" }),
    );
    expect(await rest("DELETE", `/rules/${ruleId}`)).toMatchObject({
      status: 404,
      body: { error: { code: "not_found" } },
    });
  });

  it("refuses an empty selector, naming the fields", async () => {
    expect(await rest("POST", "/hold", { reason: "everything?" })).toMatchObject({
      status: 400,
      body: {
        error: { code: "invalid_argument", message: expect.stringMatching(/at least one of run, tag/) },
      },
    });
  });

  it("lists runs, held ones by status, with why they are held", async () => {
    await rest("POST", "/runs/fleet-b1/hold", { reason: "why not" });
    await waitFor(
      async () => {
        const { runs } = (await rest("GET", "/runs?status=held")).body as {
          runs: { run_id: string; hold_reason: string }[];
        };
        return runs.find((r) => r.run_id === "fleet-b1");
      },
      { timeoutMs: 20_000, message: "fleet-b1 is not listed as held" },
    ).then((row) => expect(row.hold_reason).toBe("operator: why not"));
  });
});

/** Every key of a JSON value, all the way down, with where it is. */
function keysOf(value: unknown, at = "$"): string[] {
  if (Array.isArray(value)) return value.flatMap((item, i) => keysOf(item, `${at}[${i}]`));
  if (value === null || typeof value !== "object") return [];
  return Object.entries(value).flatMap(([key, inner]) => [`${at}.${key}`, ...keysOf(inner, `${at}.${key}`)]);
}

describe("resuming a fleet by selector", () => {
  it("resumes every held run it matches, each recorded once as the operator's, however many", async () => {
    // More runs than one batched read takes; one in ten held after two calls of its own (a
    // history the batched read cannot vouch for, so read alone), the rest held before any.
    const runIds = Array.from({ length: 1_200 }, (_, i) => `herd-${i}`);
    await Promise.all(
      runIds.map(async (runId, i) => {
        if (i % 10 === 0) {
          await call(runId, { tag: "herd" });
          await call(runId, { tag: "herd" });
        }
        await gateway.execute(runId, { tag: "herd", tenant: "" }, [
          { $case: "runHeld", value: RunHeld.fromPartial({ actor: OPERATOR, reason: "freeze" }) },
        ]);
      }),
    );
    await call("herd-free", { tag: "herd" });

    const resumed = await rest("POST", "/resume", { tag: "herd", reason: "thaw" });
    expect(resumed.status).toBe(200);
    const runs = resumed.body.runs as { run_id: string; changed: boolean; status: string }[];
    expect(runs.map((r) => r.run_id).sort()).toEqual([...runIds].sort());
    expect(runs.every((r) => r.changed && r.status === "idle")).toBe(true);
    for (let i = 0; i < runIds.length; i += 100) {
      const chunk = runIds.slice(i, i + 100);
      const found = await Promise.all(chunk.map((runId) => payloads(runId, "runResumed")));
      for (const [j, resumes] of found.entries()) {
        expect(resumes, chunk[j]).toEqual([
          expect.objectContaining({
            actor: OPERATOR,
            reason: "thaw",
            selector: expect.objectContaining({ tag: "herd" }),
          }),
        ]);
      }
    }
    expect(await payloads("herd-free", "runResumed")).toEqual([]);
    // Asked again (a retry): nothing is held, nothing more is appended.
    expect((await rest("POST", "/resume", { tag: "herd", reason: "thaw" })).body).toEqual({
      runs: [],
      lifted_rules: [],
    });
    expect(await payloads("herd-7", "runResumed")).toHaveLength(1);
  });
});

describe("REST answers", () => {
  it("are snake_case throughout, the run folded from the log (GET runs/:id) as much as the listed rows", async () => {
    await gatedCall("case-1", "gate-case-1", "send_email");
    await call("case-2", { tag: "case" });
    await rest("POST", "/runs/case-2/hold", { reason: "look" });
    await rest("POST", "/runs/case-2/resume", { reason: "go on", steps: 5 });
    await projected("case-1", "case-2");
    const answers = {
      run: (await rest("GET", "/runs/case-1")).body,
      resumed: (await rest("GET", "/runs/case-2")).body,
      runs: (await rest("GET", "/runs?limit=10000")).body,
      rules: (await rest("GET", "/rules")).body,
      windows: (await rest("GET", "/windows")).body,
      hold: (await rest("POST", "/hold", { tag: "case", reason: "one case" })).body,
      resume: (await rest("POST", "/resume", { tag: "case" })).body,
    };
    const camel = Object.entries(answers).flatMap(([name, body]) =>
      keysOf(body, name).filter((path) => /[A-Z]/.test(path.split(".").at(-1)!)),
    );
    expect(camel).toEqual([]);
    const run = answers.run.run as Record<string, unknown> & {
      steps: Record<string, unknown>[];
      gates: Record<string, unknown>[];
    };
    expect(run).toMatchObject({ run_id: "case-1", in_flight: 0, totals: { cost_nano_usd: 1_000 } });
    expect(run.first_seen_ms).toEqual(expect.any(Number));
    expect(run.steps[0]).toMatchObject({ step_id: expect.any(String), upstream_status: 200, tool_calls: [] });
    expect(run.gates[0]).toMatchObject({ gate_id: "gate-case-1", tool: "send_email", rule_text: "send_*" });
    expect(answers.resumed.run).toMatchObject({
      window: { limits: { max_steps: 5 } },
      control: [{ what: "held", rule_id: "" }, { what: "resumed" }],
    });
  });
});

// Every route, and what it needs.
const ROUTES: { method: string; path: string; body?: unknown; needs: "read" | "change" }[] = [
  { method: "GET", path: "/runs", needs: "read" },
  { method: "GET", path: "/runs/solo-1", needs: "read" },
  { method: "GET", path: "/runs/solo-1/steps/1", needs: "read" },
  { method: "GET", path: "/rules", needs: "read" },
  { method: "GET", path: "/windows", needs: "read" },
  { method: "POST", path: "/runs/matrix-1/hold", body: {}, needs: "change" },
  { method: "POST", path: "/runs/matrix-1/resume", body: {}, needs: "change" },
  { method: "POST", path: "/runs/matrix-1/stop", body: {}, needs: "change" },
  { method: "POST", path: "/hold", body: { run: "matrix-*" }, needs: "change" },
  { method: "POST", path: "/resume", body: { run: "matrix-*" }, needs: "change" },
  { method: "POST", path: "/stop", body: { run: "matrix-*" }, needs: "change" },
  { method: "DELETE", path: "/rules/rule-000000000000", needs: "change" },
  { method: "POST", path: "/runs/matrix-1/approve", body: {}, needs: "change" },
  { method: "POST", path: "/runs/matrix-1/deny", body: {}, needs: "change" },
];

/** An answer of the run held by the tool-call gate, as a gateway records it after the step. */
async function gatedCall(runId: string, gateId: string, tool: string): Promise<void> {
  await call(runId);
  const state = await gateway.current(runId);
  const toolCall = { id: "call_1", name: tool, arguments: '{"to":"x@rival.io"}', argumentsTruncated: false };
  await gateway.execute(runId, { tag: "", tenant: "" }, [
    {
      $case: "toolCallGated",
      value: {
        gateId,
        stepId: `step-${steps}`,
        step: state.started,
        api: 1,
        model: "gpt-4o-mini",
        stream: false,
        toolCall,
        toolCalls: [toolCall],
        rule: "tool_gate.deny[0]",
        ruleText: "send_*",
        actor: { kind: ActorKind.ACTOR_KIND_GATE, name: "tool_gate.deny[0]" },
        action: RunAction.RUN_ACTION_HOLD,
        requestHash: "r",
        answerHash: "a",
        promptHash: "p",
        gateway: "gw#1",
        runStopped: false,
        toolCallsOmitted: 0,
      },
    },
  ]);
}

describe("approving and denying answers the tool-call gate holds", () => {
  const client = () =>
    connect(ControlClient, {
      address: control.grpcAddress,
      metadata: { authorization: `Bearer ${CONTROL}` },
      deadlineMs: 10_000,
    });
  const unary = <T>(run: (c: ControlClient, cb: (error: ServiceError | null, value: T) => void) => unknown) =>
    new Promise<T>((resolve, reject) => {
      const c = client();
      run(c, (error, value) => {
        c.close();
        if (error === null) resolve(value);
        else reject(error);
      });
    });

  it("approves over gRPC, denies one by gate id over REST, and says what each decided", async () => {
    await gatedCall("gate-a", "g-1", "send_email");
    const approved = await unary<unknown>((c, cb) =>
      c.approve({ runId: "gate-a", gateId: "", reason: "ok" }, cb),
    );
    expect(approved).toMatchObject({
      run: { runId: "gate-a", changed: true, status: "idle" },
      gates: [
        { gateId: "g-1", tool: "send_email", rule: "tool_gate.deny[0]", decision: "approved", kind: "gate" },
      ],
    });
    expect(await payloads("gate-a", "toolCallApproved")).toEqual([
      expect.objectContaining({ gateId: "g-1", reason: "ok", actor: OPERATOR }),
    ]);

    await gatedCall("gate-a", "g-2", "send_sms");
    await gatedCall("gate-a", "g-3", "send_fax");
    const denied = await rest("POST", "/runs/gate-a/deny", { gate_id: "g-3", reason: "no faxes" });
    expect(denied).toMatchObject({
      status: 200,
      body: { run: { status: "held" }, gates: [{ gate_id: "g-3", tool: "send_fax", decision: "denied" }] },
    });
    const view = await unary<{ run?: { gates: { gateId: string; status: string }[] } }>((c, cb) =>
      c.getRun({ runId: "gate-a" }, cb),
    );
    expect(view.run?.gates.map((g) => [g.gateId, g.status])).toEqual([
      ["g-1", "approved"],
      ["g-2", "pending"],
      ["g-3", "denied"],
    ]);
  });

  it("refuses a decision with nothing held (FAILED_PRECONDITION, 409), and an unknown run (NOT_FOUND, 404)", async () => {
    await call("gate-none");
    await expect(
      unary((c, cb) => c.deny({ runId: "gate-none", gateId: "", reason: "" }, cb)),
    ).rejects.toMatchObject({ code: GrpcStatus.FAILED_PRECONDITION });
    expect(await rest("POST", "/runs/gate-none/approve", {})).toMatchObject({
      status: 409,
      body: { error: { code: "failed_precondition" } },
    });
    expect((await rest("POST", "/runs/gate-never/approve", {})).status).toBe(404);
    expect((await rest("POST", "/runs/gate-none/approve", { gate: "x" })).status).toBe(400);
  });
});

describe("tokens on REST", () => {
  it("answers health's liveness without a token, and its details (pid, NATS) only with one", async () => {
    for (const token of [null, "not-a-token"]) {
      expect(await rest("GET", "/health", undefined, token)).toEqual({ status: 200, body: { status: "ok" } });
    }
    for (const token of [READ, CONTROL]) {
      expect(await rest("GET", "/health", undefined, token)).toMatchObject({
        status: 200,
        body: { status: "ok", nats: "connected", pid: process.pid, quarantined: { total: 0 } },
      });
    }
  });

  it.each(ROUTES)(
    "$method $path: 401 without a token or with a wrong one",
    async ({ method, path, body }) => {
      for (const token of [null, "not-a-token"]) {
        const answer = await rest(method, path, body, token);
        expect(answer.status).toBe(401);
        expect(answer.body).toMatchObject({ error: { code: "unauthenticated" } });
      }
    },
  );

  it.each(ROUTES)("$method $path with the read-only token: $needs", async ({ method, path, body, needs }) => {
    const answer = await rest(method, path, body, READ);
    if (needs === "change") {
      expect(answer).toMatchObject({
        status: 403,
        body: { error: { code: "permission_denied", message: expect.stringMatching(/read-only/) } },
      });
    } else {
      expect(answer.status).toBe(200);
    }
  });

  it.each(ROUTES)("$method $path with the control token: allowed", async ({ method, path, body }) => {
    const answer = await rest(method, path, body, CONTROL);
    expect([401, 403]).not.toContain(answer.status);
    expect(answer.status).toBeLessThan(500);
  });
});

describe("the gRPC API", () => {
  const client = (token?: string) =>
    connect(ControlClient, {
      address: control.grpcAddress,
      metadata: token === undefined ? undefined : { authorization: `Bearer ${token}` },
      deadlineMs: 10_000,
    });
  type Call = (c: ControlClient, callback: (error: ServiceError | null) => void) => unknown;
  const GRPC: { name: string; needs: "read" | "change"; call: Call }[] = [
    { name: "ListRuns", needs: "read", call: (c, cb) => c.listRuns({ status: "", limit: 5 }, cb) },
    { name: "GetRun", needs: "read", call: (c, cb) => c.getRun({ runId: "solo-1" }, cb) },
    { name: "GetStep", needs: "read", call: (c, cb) => c.getStep({ runId: "solo-1", step: 1 }, cb) },
    { name: "ListRules", needs: "read", call: (c, cb) => c.listRules({}, cb) },
    {
      name: "Hold",
      needs: "change",
      call: (c, cb) => c.hold({ target: { target: { $case: "runId", value: "grpc-1" }, reason: "g" } }, cb),
    },
    {
      name: "Resume",
      needs: "change",
      call: (c, cb) =>
        c.resume(
          {
            target: { target: { $case: "runId", value: "grpc-1" }, reason: "g" },
            limits: undefined,
            compact: 0,
          },
          cb,
        ),
    },
    {
      name: "Stop",
      needs: "change",
      call: (c, cb) => c.stop({ target: { target: { $case: "runId", value: "grpc-1" }, reason: "g" } }, cb),
    },
    {
      name: "LiftRule",
      needs: "change",
      call: (c, cb) => c.liftRule({ ruleId: "rule-none", reason: "" }, cb),
    },
    {
      name: "ListWindows",
      needs: "read",
      call: (c, cb) => c.listWindows({}, cb),
    },
    {
      name: "Approve",
      needs: "change",
      call: (c, cb) => c.approve({ runId: "grpc-1", gateId: "", reason: "" }, cb),
    },
    {
      name: "Deny",
      needs: "change",
      call: (c, cb) => c.deny({ runId: "grpc-1", gateId: "", reason: "" }, cb),
    },
  ];

  it("checks every method of the service", () => {
    expect(GRPC.map((m) => m.name).sort()).toEqual(
      Object.values(ControlService)
        .map((method) => method.path.split("/").at(-1))
        .sort(),
    );
  });
  const outcome = (token: string | undefined, call: Call) =>
    new Promise<GrpcStatus>((resolve) => {
      const c = client(token);
      call(c, (error) => {
        c.close();
        resolve(error === null ? GrpcStatus.OK : error.code);
      });
    });

  it.each(GRPC)(
    "$name: UNAUTHENTICATED without a token, $needs for the read-only one",
    async ({ call, needs }) => {
      expect(await outcome(undefined, call)).toBe(GrpcStatus.UNAUTHENTICATED);
      expect(await outcome("nope", call)).toBe(GrpcStatus.UNAUTHENTICATED);
      const read = await outcome(READ, call);
      if (needs === "change") expect(read).toBe(GrpcStatus.PERMISSION_DENIED);
      else expect(read).toBe(GrpcStatus.OK);
      expect([GrpcStatus.UNAUTHENTICATED, GrpcStatus.PERMISSION_DENIED]).not.toContain(
        await outcome(CONTROL, call),
      );
    },
  );

  it("holds by selector and says which runs and which rule", async () => {
    await call("grpc-sel-1", { tag: "grpc-sel" });
    await projected("grpc-sel-1");
    const c = client(CONTROL);
    const response = await new Promise<unknown>((resolve, reject) =>
      c.hold(
        {
          target: {
            target: {
              $case: "selector",
              value: {
                runGlob: "",
                tag: "grpc-sel",
                modelPrefix: "",
                promptHash: "",
                status: "",
                all: false,
              },
            },
            reason: "from grpc",
          },
        },
        (error, answer) => (error ? reject(error) : resolve(answer)),
      ),
    );
    c.close();
    expect(response).toMatchObject({
      runs: [{ runId: "grpc-sel-1", changed: true, status: "held" }],
      rule: { description: "--tag grpc-sel", reason: "from grpc" },
      ruleCreated: true,
    });
  });

  it("answers health and lists its services by reflection", async () => {
    expect(await checkHealth(control.grpcAddress)).toBe("SERVING");
    expect(await checkHealth(control.grpcAddress, "holdfast.v1.Control")).toBe("SERVING");
    expect(await listServices(control.grpcAddress)).toEqual(["grpc.health.v1.Health", "holdfast.v1.Control"]);
  });
});

describe("where it will listen", () => {
  it("refuses to start on 0.0.0.0 without a token, saying why", async () => {
    await expect(startControl(configWith({ control: { host: "0.0.0.0" } }), log)).rejects.toThrow(
      InsecureBindError,
    );
    await expect(startControl(configWith({ control: { host: "0.0.0.0" } }), log)).rejects.toThrow(
      /without a token/,
    );
  });

  it("starts there when told it is insecure", async () => {
    const open = await startControl(configWith({ control: { host: "0.0.0.0", insecure: true } }), log);
    try {
      const response = await fetch(`${open.url}/rules`);
      expect(response.status).toBe(200);
    } finally {
      await open.close();
    }
  });
});

describe("without a projector", () => {
  it("finds the runs a selector matches in the log itself, at once; listing runs is unavailable", async () => {
    const local = await startControl(configWith({}), log);
    try {
      await call("logonly-1", { tag: "logonly" });
      await call("logonly-2", { tag: "other" });
      const held = await fetch(`${local.url}/hold`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ tag: "logonly", status: "idle" }),
      });
      expect(await held.json()).toEqual({
        runs: [{ run_id: "logonly-1", changed: true, status: "held" }],
        rule: null,
        rule_created: false,
      });
      expect(await payloads("logonly-1", "runHeld")).toEqual([
        expect.objectContaining({
          actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "loopback, no token" },
        }),
      ]);
      const listed = await fetch(`${local.url}/runs`);
      expect(listed.status).toBe(503);
      expect(await listed.json()).toMatchObject({ error: { code: "analytics_unavailable" } });
    } finally {
      await local.close();
    }
  });
});

describe("on a log holding what no reader can use", () => {
  it("shows a run with an event it cannot decode, listing that event, and counts it in its health", async () => {
    await call("poisoned-run");
    const garbage = new Uint8Array([0xff, 0xff, 0xff, 0x00]);
    const seq = await publishRaw(natsUrl(), bus.subjects.runEvent("poisoned-run", "StepCompleted"), garbage);
    await call("poisoned-run");
    const shown = await rest("GET", "/runs/poisoned-run");
    expect(shown.status).toBe(200);
    expect(shown.body.run).toMatchObject({
      completed: 2,
      quarantined: [{ stream_sequence: seq, reason: "undecodable", bytes: 4, preview: "ffffff00" }],
    });
    const health = await rest("GET", "/health", undefined, READ);
    expect(health.body.quarantined).toMatchObject({ by_reason: { undecodable: 1 } });
  });

  it("lists every key's window though one reading holds a time no date can hold", async () => {
    const reading = (keyId: string, resetAtMs: number): Envelope =>
      makeEnvelope({
        id: createIdGenerator()(),
        runId: "",
        sequence: 0,
        timestampMs: Date.now(),
        tag: "",
        payload: {
          $case: "rateLimitObserved",
          value: RateLimitObserved.fromPartial({
            keyId,
            upstream: "https://api.example.com",
            gateway: "gw#1",
            requests: { reported: true, limit: 100, remaining: 50, resetAtMs },
            retryAfterMs: 2 ** 53 - 1,
          }),
        },
      });
    await bus.appendKeyEvent("00000000000000aa", reading("00000000000000aa", 2 ** 53 - 1));
    await bus.appendKeyEvent("00000000000000bb", reading("00000000000000bb", Date.now() + 60_000));
    const listed = await rest("GET", "/windows");
    expect(listed.status).toBe(200);
    const windows = listed.body.windows as {
      key_id: string;
      cooldown_until: string | null;
      dimensions: { reset_at: string | null }[];
    }[];
    expect(windows.map((w) => [w.key_id, w.dimensions[0]?.reset_at === null])).toEqual([
      ["00000000000000aa", true],
      ["00000000000000bb", false],
    ]);
    expect(windows[0]?.cooldown_until).toBeNull();
  });
});
