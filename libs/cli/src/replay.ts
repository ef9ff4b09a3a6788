import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { connectBus } from "@holdfast/bus";
import { describeRun, MAX_RUN_ID_LENGTH, type StepView } from "@holdfast/events";
import { type AssembledAnswer, assembleAnswer } from "@holdfast/snapshots";
import { COMMON_OPTIONS, reachable, stackConfig } from "./common.js";
import { localTokens } from "./credentials.js";
import { lineDiff, renderDiff, type SideOfStep, type StepDiff, sameCalls } from "./diff.js";
import { CliError } from "./errors.js";
import { terminalSafe } from "./format.js";
import { readerConnection } from "./stack.js";
import { readStep, stepNumber } from "./step.js";

const SENDING = `The call goes through the gateway under the tag eval, with its origin on the step,
authorized by the control token; it is never held, gated or budgeted. The provider's key
is --api-key, else HOLDFAST_REPLAY_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY (the
snapshot never holds one). It is sent without streaming.`;

export const REPLAY_USAGE = `holdfast replay <run> <step> [--model M] [--api-key KEY] [--json]

Sends a step's request again, as stored (on another model with --model), and prints the
answer beside the recorded one. ${SENDING}`;

export const COMPARE_USAGE = `holdfast compare <run> <step> --model M [--api-key KEY] [--json]

Replays a step on another model and diffs the answers, as holdfast diff does. ${SENDING}`;

export const FORK_USAGE = `holdfast fork <run> <step> (--set path=value ... | --edit FILE) [--as NAME] [--api-key KEY] [--json]

Starts a new run whose first call is that step's request, edited: --set sets one field by
its dotted path (messages.0.content="…", model=gpt-4o; a value that is JSON is taken as
JSON), --edit FILE sends the request in FILE instead. --as names the new run. ${SENDING}`;

const OPTIONS = {
  ...COMMON_OPTIONS,
  model: { type: "string" },
  "api-key": { type: "string" },
  set: { type: "string", multiple: true },
  edit: { type: "string" },
  as: { type: "string" },
} as const;

type Kind = "replay" | "compare" | "fork";

/** Where each API shape's calls go under the gateway's /v1. */
const PATHS: Readonly<Record<string, string>> = {
  openai_chat_completions: "/chat/completions",
  openai_responses: "/responses",
  anthropic_messages: "/messages",
};

export const replay = (argv: string[]) => send("replay", argv);
export const compare = (argv: string[]) => send("compare", argv);
export const fork = (argv: string[]) => send("fork", argv);

async function send(kind: Kind, argv: string[]): Promise<void> {
  const usage = kind === "replay" ? REPLAY_USAGE : kind === "compare" ? COMPARE_USAGE : FORK_USAGE;
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: OPTIONS });
  if (values.help) return void console.log(usage);
  const [runId, stepText] = positionals;
  if (runId === undefined || stepText === undefined || positionals.length > 2)
    throw new CliError(`give a run and a step\n\n${usage}`, 2);
  const n = stepNumber(stepText);
  if (kind === "compare" && values.model === undefined)
    throw new CliError(`compare needs --model\n\n${usage}`, 2);
  if (kind === "fork" && values.set === undefined && values.edit === undefined)
    throw new CliError(`fork needs --set or --edit\n\n${usage}`, 2);
  if (kind !== "fork" && (values.set !== undefined || values.edit !== undefined || values.as !== undefined))
    throw new CliError(`--set, --edit and --as are fork's\n\n${usage}`, 2);

  const { config, stack } = stackConfig(values);
  const bus = await connectBus({ ...readerConnection(config), name: "holdfast-cli" });
  let view: StepView;
  let forwarded: string;
  let recorded: AssembledAnswer | undefined;
  try {
    const history = await bus.readRun(runId);
    if (history.events.length === 0) throw new CliError(`no run named ${JSON.stringify(runId)}`);
    const shown = await readStep(bus, describeRun(runId, history), n);
    view = shown.view;
    const { request, answer } = shown.snapshot;
    if (request === undefined)
      throw new CliError(
        `step ${n}'s request is not stored (${shown.snapshot.missing.join("; ")}): nothing to send`,
      );
    forwarded = request.forwardedText;
    recorded =
      answer === undefined ? undefined : assembleAnswer(view.api, answer.text, answer.events !== undefined);
  } finally {
    await bus.close();
  }
  const path = PATHS[view.api];
  if (path === undefined) throw new CliError(`step ${n} was a call Holdfast cannot send again (${view.api})`);
  let body: Record<string, unknown>;
  if (values.edit !== undefined) body = readEdited(values.edit);
  else {
    try {
      body = JSON.parse(forwarded) as Record<string, unknown>;
    } catch {
      throw new CliError(
        `step ${n}'s stored request is not JSON (redaction may have made it so): it cannot be sent`,
      );
    }
  }
  for (const assignment of values.set ?? []) setPath(body, assignment);
  if (values.model !== undefined) body.model = values.model;
  // Sent whole, not streamed: the answer is compared, not relayed.
  delete body.stream;
  delete body.stream_options;
  const newRun =
    values.as ?? `${`${kind}-${n}-of-${runId}`.slice(0, MAX_RUN_ID_LENGTH - 9)}-${Date.now().toString(36)}`;
  const apiKey =
    values["api-key"] ??
    process.env.HOLDFAST_REPLAY_API_KEY ??
    (view.api === "anthropic_messages" ? process.env.ANTHROPIC_API_KEY : process.env.OPENAI_API_KEY);
  if (apiKey === undefined)
    throw new CliError(
      "give the provider's key: --api-key, or HOLDFAST_REPLAY_API_KEY (a snapshot never holds one)",
      2,
    );
  const token = localTokens(config).control;
  const gateway = stack?.gatewayUrl ?? `http://${reachable(config.gateway.host)}:${config.gateway.port}/v1`;
  const response = await fetch(`${gateway}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${apiKey}`,
      ...(view.api === "anthropic_messages"
        ? { "x-api-key": apiKey, "anthropic-version": "2023-06-01" }
        : {}),
      "x-holdfast-run": newRun,
      "x-holdfast-tag": "eval",
      "x-holdfast-origin": kind,
      "x-holdfast-origin-run": encodeURIComponent(runId),
      "x-holdfast-origin-step": String(n),
      ...(token === undefined ? {} : { "x-holdfast-control-token": token }),
    },
    body: JSON.stringify(body),
  }).catch((error: unknown) => {
    throw new CliError(`cannot reach the gateway at ${gateway}: ${(error as Error).message}`);
  });
  const text = await response.text();
  if (!response.ok) throw new CliError(`the gateway answered ${response.status}: ${text.slice(0, 2_000)}`);
  const replayed = assembleAnswer(view.api, text, false);
  const diff = stepDiff(n, view, recorded, replayed);
  if (values.json) {
    return void console.log(
      JSON.stringify(
        { run: runId, step: n, kind, newRun, recorded: recorded ?? null, replayed, diff },
        null,
        2,
      ),
    );
  }
  const head = `${kind === "fork" ? "forked" : "replayed"} step ${n} of ${runId} as run ${newRun}`;
  console.log(terminalSafe(`${head}\n\n${renderDiff(`${runId} (recorded)`, `${newRun} (${kind})`, [diff])}`));
}

function stepDiff(
  n: number,
  view: StepView,
  recorded: AssembledAnswer | undefined,
  replayed: AssembledAnswer,
): StepDiff {
  const side = (answer: AssembledAnswer, status: string, cost: number | null): SideOfStep => ({
    model: answer.model,
    status,
    inputTokens: answer.inputTokens,
    outputTokens: answer.outputTokens,
    costNanoUsd: cost,
    toolCalls: answer.toolCalls,
    finishReason: answer.finishReason,
    text: answer.text,
    missing: [],
  });
  const a = recorded === undefined ? null : side(recorded, view.status, view.costNanoUsd);
  const b = side(replayed, "completed", null);
  return {
    step: n,
    a,
    b,
    text: lineDiff(recorded?.text ?? "", replayed.text),
    toolCallsEqual: sameCalls(recorded?.toolCalls ?? [], replayed.toolCalls),
  };
}

function readEdited(file: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new CliError(`--edit ${file}: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new CliError(`--edit ${file} holds no JSON object (a request body)`);
  return value as Record<string, unknown>;
}

/** Sets `path=value` in `body`: a dotted path (array indexes as numbers), a JSON value or else a string. */
export function setPath(body: Record<string, unknown>, assignment: string): void {
  const at = assignment.indexOf("=");
  if (at <= 0) throw new CliError(`--set takes path=value (got ${JSON.stringify(assignment)})`, 2);
  const path = assignment.slice(0, at).split(".");
  const raw = assignment.slice(at + 1);
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    value = raw;
  }
  let node: unknown = body;
  for (const [i, key] of path.entries()) {
    if (key === "__proto__" || key === "constructor" || key === "prototype")
      throw new CliError(`--set cannot set ${JSON.stringify(key)}`, 2);
    const last = i === path.length - 1;
    if (Array.isArray(node)) {
      const index = Number(key);
      if (!Number.isInteger(index) || index < 0 || index > node.length)
        throw new CliError(`--set ${path.join(".")}: ${key} is no index of a list of ${node.length}`, 2);
      if (last) node[index] = value;
      else node = node[index] ??= {};
    } else if (typeof node === "object" && node !== null) {
      const object = node as Record<string, unknown>;
      if (last) object[key] = value;
      else node = object[key] ??= {};
    } else
      throw new CliError(
        `--set ${path.join(".")}: ${path.slice(0, i).join(".")} is not an object or a list`,
        2,
      );
  }
}
