import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { agentViewJson, durableRunJson, envelopeToJson } from "@holdfast/events";
import {
  type Agent,
  type DurableRun,
  DurableStatus,
  durableStatusToJSON,
  isAgent,
  RunsApi,
  worker,
} from "@holdfast/sdk";
import { COMMON_OPTIONS, reachable, stackConfig } from "./common.js";
import { TOKEN_SOURCES } from "./control.js";
import { localTokens } from "./credentials.js";
import { CliError } from "./errors.js";
import { ago, nanoUsd, table } from "./format.js";
import { NOT_SUBMITTED, progressLine, stageAfter, waitingLine } from "./progress.js";

/** The gRPC status codes the CLI tells apart (grpc.status). */
const GrpcStatus = {
  INVALID_ARGUMENT: 3,
  PERMISSION_DENIED: 7,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

const SCHEDULER_OPTIONS = { ...COMMON_OPTIONS, scheduler: { type: "string" } } as const;

export const DEPLOY_USAGE = `holdfast deploy <module> [--scheduler HOST:PORT] [--json] [--data-dir DIR] [--config FILE]

Registers every agent the module exports (made with @holdfast/sdk's agent()) at its
version, with its caps (max duration, concurrency per key, start rate), and prints what
changed. Runs submitted from now on run on that version with those caps; runs already
queued keep theirs. An agent whose version and caps did not change is left as it is.`;

export const WORKER_USAGE = `holdfast worker <module> [--slots N] [--name NAME] [--gateway URL] [--scheduler HOST:PORT] [--data-dir DIR] [--config FILE]

Serves every agent the module exports: connects to the scheduler, runs what it is handed
(--slots at once, default 1), records each step before going on, and prints each run it
takes and ends. Ctrl-C lets go of its runs (another worker resumes them from their
recorded steps) and stops.`;

export const RUNS_USAGE = `holdfast runs <ls|show|submit|watch|redrive|replay|cancel> ...

  holdfast runs ls [--agent A] [--status queued|running|held|finished|failed] [--limit N] [--json]
  holdfast runs show <run> [--json]
  holdfast runs submit <agent> [--input JSON] [--partition-key K] [--timeout SECONDS]
                       [--idempotency-key K] [--tenant T] [--tag T] [--wait] [--json]
                                            --wait: until it ends, saying on stderr what happens
                                            (leased, steps recorded, …) and what a queued run waits for
  holdfast runs watch <run>                 each event of the run as it is appended, until it ends
  holdfast runs redrive <run> [--reason R]  a failed run again, reusing its recorded steps
  holdfast runs replay <run> [--reason R]   again on the agent's latest version, reusing nothing
  holdfast runs cancel <run> [--reason R]   fail it (cancelled); its worker lets go

Durable runs (holdfast.v1.Runs on the scheduler; every command also takes --scheduler
HOST:PORT, --data-dir DIR and --config FILE).`;

/** Where a refused worker's token came from, for the operator to check. */
const WORKER_TOKEN_SOURCES =
  "A worker's token comes from scheduler.worker_token in the config file (--config FILE, HOLDFAST_CONFIG, or the file `holdfast up` was started with), HOLDFAST_SCHEDULER__WORKER_TOKEN, or else the one `holdfast up` made in <data_dir>/credentials/worker.token.";

/** Where the scheduler's gRPC API is and the tokens to call it with. */
export interface SchedulerEndpoint {
  /** host:port. */
  address: string;
  /** The control token (else the read-only one); undefined when the stack has none. */
  token: string | undefined;
  /** What a worker presents: the worker token (else, a stack without one, the control token). */
  workerToken: string | undefined;
}

/**
 * The scheduler as this command should reach it: --scheduler, `scheduler.url`, the running
 * stack's (holdfast.json), else `<scheduler.host>:<scheduler.grpc_port>`; the token from the
 * configuration as `stackConfig` finds it (the running stack's file when none is named).
 */
export function schedulerEndpoint(values: {
  "data-dir"?: string | undefined;
  config?: string | undefined;
  scheduler?: string | undefined;
}): SchedulerEndpoint {
  const { config, stack } = stackConfig(values);
  const address =
    values.scheduler ??
    config.scheduler.url ??
    stack?.schedulerGrpc ??
    `${reachable(config.scheduler.host)}:${config.scheduler.grpc_port}`;
  const tokens = localTokens(config);
  return { address, token: tokens.control ?? tokens.read, workerToken: tokens.worker ?? tokens.control };
}

/** holdfast.v1.Runs as this command should reach it (see schedulerEndpoint). */
export function runsApi(values: { "data-dir"?: string; config?: string; scheduler?: string }): RunsApi {
  const { address, token } = schedulerEndpoint(values);
  return new RunsApi({ scheduler: address, ...(token === undefined ? {} : { token }) });
}

/** The agents a module exports. */
async function agentsOf(module: string): Promise<Agent<never, unknown>[]> {
  let loaded: Record<string, unknown>;
  try {
    loaded = (await import(pathToFileURL(resolve(module)).href)) as Record<string, unknown>;
  } catch (error) {
    throw new CliError(`cannot load ${module}: ${(error as Error).message}`, 2);
  }
  const agents = Object.values(loaded).filter(isAgent) as Agent<never, unknown>[];
  if (agents.length === 0) {
    throw new CliError(`${module} exports no agent: export what @holdfast/sdk's agent() returns`, 2);
  }
  return agents;
}

export async function deploy(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: SCHEDULER_OPTIONS,
  });
  if (values.help) return void console.log(DEPLOY_USAGE);
  if (positionals.length !== 1)
    throw new CliError(`give the module that exports the agents\n\n${DEPLOY_USAGE}`, 2);
  const agents = await agentsOf(positionals[0]!);
  const api = runsApi(values);
  try {
    const results = [];
    for (const a of agents) results.push(await call(() => api.deploy(a)));
    // As the runs REST API answers a deployment.
    if (values.json) {
      const json = results.map((r) => ({
        agent: r.agent === undefined ? null : agentViewJson(r.agent),
        changes: r.changes,
        previous_version: r.previousVersion,
      }));
      return void console.log(JSON.stringify(json, null, 2));
    }
    for (const result of results) {
      const name = result.agent?.agent ?? "?";
      if (result.changes.length === 0) {
        console.log(`${name}: unchanged (version ${result.agent?.version})`);
        continue;
      }
      console.log(`${name}: deployed version ${result.agent?.version}`);
      for (const change of result.changes) console.log(`  ${change}`);
      const workers = result.agent?.workersOnVersion ?? 0;
      if (workers === 0)
        console.log(`  no worker serves this version yet: holdfast worker ${positionals[0]}`);
    }
  } finally {
    api.close();
  }
}

export async function workerCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...SCHEDULER_OPTIONS,
      slots: { type: "string", default: "1" },
      name: { type: "string" },
      gateway: { type: "string" },
    },
  });
  if (values.help) return void console.log(WORKER_USAGE);
  if (positionals.length !== 1)
    throw new CliError(`give the module that exports the agents\n\n${WORKER_USAGE}`, 2);
  const slots = Number(values.slots);
  if (!Number.isInteger(slots) || slots < 1)
    throw new CliError("--slots must be a whole number, 1 or more", 2);
  const agents = await agentsOf(positionals[0]!);
  const { address: scheduler, workerToken: token } = schedulerEndpoint(values);
  let served: Awaited<ReturnType<typeof worker>>;
  try {
    served = await worker({
      agents,
      scheduler,
      slots,
      ...(token === undefined ? {} : { token }),
      ...(values.name === undefined ? {} : { name: values.name }),
      ...(values.gateway === undefined ? {} : { gatewayUrl: values.gateway }),
      onEvent: (event) => {
        const at = new Date().toISOString();
        switch (event.type) {
          case "started":
            console.log(
              `${at} started ${event.runId} (${event.agent}, lease ${event.lease}${event.reusable > 0 ? `, ${event.reusable} steps recorded` : ""})`,
            );
            return;
          case "finished":
            console.log(
              `${at} ${event.ok ? "finished" : "failed"} ${event.runId}: ${event.ran} steps run, ${event.reused} reused${event.error ? ` — ${event.error}` : ""}`,
            );
            return;
          case "revoked":
            console.log(`${at} let go of ${event.runId} (${event.reason})`);
            return;
          case "disconnected":
            console.log(`${at} lost the scheduler (${event.error}); reconnecting`);
            return;
          case "connected":
            return;
        }
      },
    });
  } catch (error) {
    const code = (error as { code?: number }).code;
    if (code === GrpcStatus.UNAUTHENTICATED || code === GrpcStatus.PERMISSION_DENIED) {
      throw new CliError(`${(error as Error).message}\n${WORKER_TOKEN_SOURCES}`);
    }
    throw new CliError(`${(error as Error).message}. Is Holdfast up (holdfast up), or --scheduler set?`);
  }
  console.log(
    `worker ${served.name} serves ${agents.map((a) => `${a.name}@${a.version}`).join(", ")} from ${scheduler} (${slots} slot${slots === 1 ? "" : "s"}); Ctrl-C stops it`,
  );
  await new Promise<void>((resolveStop) => {
    const stop = () => {
      void served.stop().then(resolveStop);
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
}

export async function runs(argv: string[]): Promise<void> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case "ls":
      return runsLs(rest);
    case "show":
      return runsShow(rest);
    case "submit":
      return runsSubmit(rest);
    case "watch":
      return runsWatch(rest);
    case "redrive":
    case "replay":
    case "cancel":
      return runsAct(sub, rest);
    case undefined:
    case "--help":
    case "-h":
    case "help":
      return void console.log(RUNS_USAGE);
    default:
      throw new CliError(`unknown runs command "${sub}"\n\n${RUNS_USAGE}`, 2);
  }
}

async function runsLs(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      ...SCHEDULER_OPTIONS,
      agent: { type: "string", default: "" },
      status: { type: "string" },
      limit: { type: "string", default: "100" },
    },
  });
  if (values.help) return void console.log(RUNS_USAGE);
  const status = statusOf(values.status);
  const api = runsApi(values);
  try {
    const list = await call(() =>
      api.list({ agent: values.agent, status, limit: Number(values.limit) || 100 }),
    );
    if (values.json) return void console.log(JSON.stringify(list.map(runJson), null, 2));
    if (list.length === 0) return void console.log("No durable runs.");
    const now = Date.now();
    console.log(
      table(
        ["RUN", "AGENT", "VERSION", "STATUS", "STEPS", "CALLS", "LEASES", "RAN", "SUBMITTED", "DETAIL"],
        list.map((r) => [
          r.runId,
          r.agent,
          r.version,
          statusName(r.status),
          r.stepsRecorded,
          r.modelCalls,
          r.leases,
          `${(r.ranMs / 1_000).toFixed(1)}s`,
          ago(r.submittedMs, now),
          r.error
            ? r.error.slice(0, 60)
            : r.degraded
              ? `degraded: ${r.degraded}`
              : r.worker
                ? `on ${r.worker}`
                : "",
        ]),
      ),
    );
  } finally {
    api.close();
  }
}

async function runsShow(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: SCHEDULER_OPTIONS,
  });
  if (values.help) return void console.log(RUNS_USAGE);
  if (positionals.length !== 1) throw new CliError(`give one run id\n\n${RUNS_USAGE}`, 2);
  const api = runsApi(values);
  try {
    const run = await call(() => api.get(positionals[0]!));
    if (values.json) return void console.log(JSON.stringify(runJson(run), null, 2));
    console.log(renderDurable(run));
  } finally {
    api.close();
  }
}

async function runsSubmit(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...SCHEDULER_OPTIONS,
      input: { type: "string", default: "null" },
      "partition-key": { type: "string", default: "" },
      timeout: { type: "string", default: "0" },
      "idempotency-key": { type: "string", default: "" },
      tenant: { type: "string", default: "" },
      tag: { type: "string", default: "" },
      wait: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(RUNS_USAGE);
  if (positionals.length !== 1) throw new CliError(`give the agent to run\n\n${RUNS_USAGE}`, 2);
  let input: unknown;
  try {
    input = JSON.parse(values.input);
  } catch (error) {
    throw new CliError(`--input is not JSON: ${(error as Error).message}`, 2);
  }
  const timeout = Number(values.timeout);
  if (!Number.isInteger(timeout) || timeout < 0) throw new CliError("--timeout must be whole seconds", 2);
  const api = runsApi(values);
  try {
    const { run, created } = await call(() =>
      api.submit(positionals[0]!, input, {
        partitionKey: values["partition-key"],
        timeoutSeconds: timeout,
        idempotencyKey: values["idempotency-key"],
        tenant: values.tenant,
        tag: values.tag,
      }),
    );
    if (!values.json)
      console.log(`${created ? "submitted" : "already submitted (same idempotency key)"}: ${run.runId}`);
    const ended = values.wait ? await call(() => followRun(api, run, (line) => console.error(line))) : run;
    if (values.json) return void console.log(JSON.stringify({ ...runJson(ended), created }, null, 2));
    if (values.wait) console.log(renderDurable(ended));
    if (values.wait && ended.status === DurableStatus.DURABLE_STATUS_FAILED) process.exitCode = 1;
  } finally {
    api.close();
  }
}

/** How long a run may sit queued before `--wait` says what it waits for, and how often again. */
const QUEUED_LOOK_MS = 1_000;
const QUEUED_AGAIN_MS = 5_000;

/**
 * Watches a run until it ends, telling `say` what happens as it happens (each event
 * worth a line, with the seconds since the command began) and, while the run sits queued,
 * what it waits for: a worker for its agent at its version, or none at all. Returns the
 * run as it ended.
 */
async function followRun(api: RunsApi, run: DurableRun, say: (line: string) => void): Promise<DurableRun> {
  const began = Date.now();
  const tell = (line: string) => say(`${((Date.now() - began) / 1_000).toFixed(1).padStart(6)}s  ${line}`);
  let stage = NOT_SUBMITTED;
  let said = "";
  let look: NodeJS.Timeout | undefined;
  const lookAtWorkers = async () => {
    look = undefined;
    if (!stage.queued) return;
    try {
      const line = waitingLine(run.agent, run.version, await api.agents());
      if (stage.queued && line !== said) tell(line);
      said = line;
    } catch {
      // The next look, or the run's own events, say more.
    }
    if (stage.queued) look = setTimeout(lookAtWorkers, QUEUED_AGAIN_MS);
  };
  try {
    for await (const event of api.watch(run.runId)) {
      const line = progressLine(event);
      if (line !== undefined) tell(line);
      if (event.payload?.$case === "runRedriven") run = { ...run, version: event.payload.value.version };
      const before = stage;
      stage = stageAfter(stage, event);
      if (stage.queued && !before.queued) {
        // Only a run still queued a moment later: the watch replays what already happened first.
        said = "";
        look = setTimeout(lookAtWorkers, QUEUED_LOOK_MS);
      }
      if (!stage.queued && look !== undefined) {
        clearTimeout(look);
        look = undefined;
      }
    }
  } finally {
    if (look !== undefined) clearTimeout(look);
    stage = { ...stage, queued: false };
  }
  return api.get(run.runId);
}

async function runsWatch(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: SCHEDULER_OPTIONS,
  });
  if (values.help) return void console.log(RUNS_USAGE);
  if (positionals.length !== 1) throw new CliError(`give one run id\n\n${RUNS_USAGE}`, 2);
  const api = runsApi(values);
  const abort = new AbortController();
  process.once("SIGINT", () => abort.abort());
  try {
    await call(async () => {
      for await (const event of api.watch(positionals[0]!, abort.signal)) {
        if (values.json) {
          console.log(JSON.stringify({ ...envelopeToJson(event as never) }));
          continue;
        }
        const payload = (event.payload ?? {}) as { $case?: string; value?: Record<string, unknown> };
        const detail = describeEvent(payload.$case ?? "", payload.value ?? {});
        console.log(
          `${new Date(Number(event.timestampMs)).toISOString()}  #${event.sequence}  ${event.type}${detail ? `  ${detail}` : ""}`,
        );
      }
    });
  } finally {
    api.close();
  }
}

async function runsAct(action: "redrive" | "replay" | "cancel", argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...SCHEDULER_OPTIONS, reason: { type: "string", default: "" } },
  });
  if (values.help) return void console.log(RUNS_USAGE);
  if (positionals.length !== 1) throw new CliError(`give one run id\n\n${RUNS_USAGE}`, 2);
  const api = runsApi(values);
  try {
    const run = await call(() => api[action](positionals[0]!, values.reason));
    if (values.json) return void console.log(JSON.stringify(runJson(run), null, 2));
    const done =
      action === "cancel" ? "cancelled" : action === "replay" ? `replaying on ${run.version}` : "re-driven";
    console.log(`${run.runId}: ${done} (now ${statusName(run.status)})`);
  } finally {
    api.close();
  }
}

/** A durable run as `holdfast runs show` prints it. */
export function renderDurable(run: DurableRun, now = Date.now()): string {
  const head = [
    `run         ${run.runId}`,
    `agent       ${run.agent} (version ${run.version})`,
    `status      ${statusName(run.status)}${run.worker ? ` on ${run.worker}` : ""}`,
    ...(run.error ? [`error       ${run.error}${run.failedStep ? ` (in step ${run.failedStep})` : ""}`] : []),
    ...(run.degraded ? [`degraded    ${run.degraded}`] : []),
    `submitted   ${new Date(run.submittedMs).toISOString()} (${ago(run.submittedMs, now)})${run.partitionKey ? `, key ${run.partitionKey}` : ""}${run.tenant ? `, tenant ${run.tenant}` : ""}`,
    `ran         ${(run.ranMs / 1_000).toFixed(1)} s of ${Math.round(run.ceilingMs / 1_000)} s, ${run.leases} lease${run.leases === 1 ? "" : "s"}, ${run.redrives} re-drive${run.redrives === 1 ? "" : "s"} (${run.replays} replay${run.replays === 1 ? "" : "s"})`,
    `model       ${run.modelCalls} call${run.modelCalls === 1 ? "" : "s"} through the gateway, ${nanoUsd(run.costNanoUsd)}`,
    ...(run.outputJson
      ? [`output      ${run.outputJson.length > 200 ? `${run.outputJson.slice(0, 200)}…` : run.outputJson}`]
      : []),
  ];
  const steps = table(
    ["STEP", "ATTEMPTS", "OK", "DURATION", "LEASE", "ERROR"],
    run.steps.map((s) => [
      `${s.label}#${s.ordinal}${s.superseded ? " (before a replay)" : ""}`,
      s.attempts,
      s.ok ? "yes" : "no",
      `${s.durationMs}ms`,
      s.lease,
      s.error.slice(0, 70),
    ]),
  );
  return `${head.join("\n")}\n\n${run.steps.length === 0 ? "No steps recorded yet." : steps}`;
}

function describeEvent(kind: string, value: Record<string, unknown>): string {
  switch (kind) {
    case "runLeased":
      return `worker ${value.worker}, lease ${value.lease}${Number(value.reusableSteps) > 0 ? `, ${value.reusableSteps} steps to reuse` : ""}`;
    case "stepRecorded":
      return `${value.label}#${value.ordinal} attempt ${value.attempt} ${value.ok ? "ok" : `failed: ${String(value.error).slice(0, 80)}`} (${value.durationMs}ms)`;
    case "runFinished":
      return `output ${String(value.outputJson).slice(0, 120)}`;
    case "runFailed":
      return String(value.error ?? "");
    case "stepStarted":
      return `model call ${value.step}: ${value.model}`;
    default:
      return "";
  }
}

function statusOf(text: string | undefined): DurableStatus {
  if (text === undefined || text === "") return DurableStatus.DURABLE_STATUS_UNSPECIFIED;
  const names = ["queued", "running", "held", "finished", "failed"];
  if (!names.includes(text)) throw new CliError(`--status must be one of ${names.join(", ")}`, 2);
  return {
    queued: DurableStatus.DURABLE_STATUS_QUEUED,
    running: DurableStatus.DURABLE_STATUS_RUNNING,
    held: DurableStatus.DURABLE_STATUS_HELD,
    finished: DurableStatus.DURABLE_STATUS_FINISHED,
    failed: DurableStatus.DURABLE_STATUS_FAILED,
  }[text as "queued"];
}

function statusName(status: DurableStatus): string {
  return durableStatusToJSON(status)
    .replace(/^DURABLE_STATUS_/, "")
    .toLowerCase();
}

/** A durable run as the runs REST API answers it (GET /v1/runs/{id}). */
function runJson(run: DurableRun): Record<string, unknown> {
  return durableRunJson(run);
}

/** A gRPC call, its failure said as the scheduler said it. */
async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    const e = error as { code?: number; details?: string; message?: string };
    if (e.code === GrpcStatus.UNAVAILABLE) {
      throw new CliError(
        `cannot reach the scheduler: ${e.details ?? e.message}. Is Holdfast up (holdfast up)?`,
      );
    }
    if (e.code === GrpcStatus.UNAUTHENTICATED || e.code === GrpcStatus.PERMISSION_DENIED) {
      throw new CliError(`${e.details ?? e.message}\n${TOKEN_SOURCES}`);
    }
    throw new CliError(
      e.details ?? e.message ?? String(error),
      e.code === GrpcStatus.INVALID_ARGUMENT ? 2 : 1,
    );
  }
}
