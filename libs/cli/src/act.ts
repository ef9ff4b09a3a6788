import { parseArgs } from "node:util";
import { COMMON_OPTIONS } from "./common.js";
import { controlCall, controlEndpoint, type RuleBody } from "./control.js";
import { CliError } from "./errors.js";
import { table } from "./format.js";
import { holdfastCommand } from "./invocation.js";

export type Action = "hold" | "resume" | "stop";

const SELECTOR_HELP = `Selector (every flag given must match; at least one, or --all):
  --run GLOB      run ids matching a glob ("agent-*")
  --tag T         runs with this tag
  --model PREFIX  runs whose model starts with PREFIX ("gpt-4o" matches gpt-4o-mini)
  --prompt HASH   runs whose conversation prefix hash starts with HASH (holdfast show prints it)
  --status S      runs that are running, idle, held or stopped now
  --all           every run`;

const COMMON_HELP = `  --reason R      why, recorded on every event (holdfast show prints it)
  --json          print the control API's answer as JSON
  --data-dir DIR, --config FILE   where the stack and its control token are`;

export const HOLD_USAGE = `holdfast hold [<run>] [--run GLOB] [--tag T] [--model PREFIX] [--prompt HASH] [--status S] [--all] [--reason R] [--json]

Holds a run: its next calls are parked (the agent waits, nothing is refused) until it is
resumed. By selector, every run it matches now is held, and a standing rule holds the
matching runs that have not called yet at their first call, until it is lifted
(\`holdfast resume\` with the same selector, or \`holdfast lift <rule>\`). With --status
the selector is about runs as they are now: no standing rule.

${SELECTOR_HELP}
${COMMON_HELP}`;

export const RESUME_USAGE = `holdfast resume [<run>] [--run GLOB] [--tag T] [--model PREFIX] [--prompt HASH] [--status S] [--all] [--reason R] [--steps N] [--cost USD] [--minutes M] [--compact summarize|truncate] [--json]

Resumes a run: its parked calls go on, and a new window of limits starts (with --steps,
--cost and --minutes its own limits; unset ones are the configured ones). By selector,
every held or stopped run it matches is resumed, and the standing rule with exactly that
selector is lifted.

${SELECTOR_HELP}
Limits of the new window:
  --steps N       model calls
  --cost USD      spend, in US dollars
  --minutes M     length of the window, in whole minutes
Before its next call goes on (one run, by id; the gateways need predict.compaction on):
  --compact summarize   replace its oldest messages by a summary (predict.summary_model)
  --compact truncate    drop its oldest messages (system prompts and the latest kept)
${COMMON_HELP}`;

export const STOP_USAGE = `holdfast stop [<run>] [--run GLOB] [--tag T] [--model PREFIX] [--prompt HASH] [--status S] [--all] [--reason R] [--json]

Stops a run: its parked calls and every later call are answered 409 (the SDK raises a
conflict error) until it is resumed. By selector, every run it matches now; no standing
rule is left (hold by selector for that).

${SELECTOR_HELP}
${COMMON_HELP}`;

interface AffectedRun {
  run_id: string;
  changed: boolean;
  status: string;
}

export interface ActionAnswer {
  runs: AffectedRun[];
  rule?: RuleBody | null;
  rule_created?: boolean;
  lifted_rules?: RuleBody[];
}

/** The request body and path of an action, from the command line. Pure. */
export function actionRequest(
  action: Action,
  argv: string[],
): {
  path: string;
  body: Record<string, unknown>;
  byRun: boolean;
  json: boolean;
  help: boolean;
  values: { "data-dir"?: string; config?: string };
} {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON_OPTIONS,
      run: { type: "string" },
      tag: { type: "string" },
      model: { type: "string" },
      prompt: { type: "string" },
      status: { type: "string" },
      all: { type: "boolean", default: false },
      reason: { type: "string" },
      steps: { type: "string" },
      cost: { type: "string" },
      minutes: { type: "string" },
      compact: { type: "string" },
    },
  });
  const usage = { hold: HOLD_USAGE, resume: RESUME_USAGE, stop: STOP_USAGE }[action];
  const common = { json: values.json, help: values.help, values };
  if (values.help) return { path: "", body: {}, byRun: false, ...common };
  const body: Record<string, unknown> = {};
  if (values.reason !== undefined) body.reason = values.reason;
  const limits = { steps: values.steps, cost: values.cost, minutes: values.minutes };
  for (const [name, text] of Object.entries(limits)) {
    if (text === undefined) continue;
    if (action !== "resume") throw new CliError(`--${name} is for resume only\n\n${usage}`, 2);
    const value = Number(text);
    if (text.trim() === "" || !Number.isFinite(value))
      throw new CliError(`--${name} must be a number, got "${text}"`, 2);
    body[name] = value;
  }
  if (values.compact !== undefined) {
    if (action !== "resume") throw new CliError(`--compact is for resume only\n\n${usage}`, 2);
    if (values.compact !== "summarize" && values.compact !== "truncate")
      throw new CliError(`--compact must be summarize or truncate, got "${values.compact}"`, 2);
    body.compact = values.compact;
  }
  const selector = {
    run: values.run,
    tag: values.tag,
    model: values.model,
    prompt: values.prompt,
    status: values.status,
  };
  const selecting = Object.values(selector).some((v) => v !== undefined) || values.all;
  if (positionals.length > 1) throw new CliError(`give at most one run id\n\n${usage}`, 2);
  const [runId] = positionals;
  if (runId !== undefined && selecting) {
    throw new CliError(`give a run id or a selector (--run, --tag, …), not both\n\n${usage}`, 2);
  }
  if (runId !== undefined) {
    return { path: `/runs/${encodeURIComponent(runId)}/${action}`, body, byRun: true, ...common };
  }
  if (!selecting)
    throw new CliError(
      `give a run id, or a selector (--run, --tag, --model, --prompt, --status, --all)\n\n${usage}`,
      2,
    );
  for (const [key, value] of Object.entries(selector)) if (value !== undefined) body[key] = value;
  if (values.all) body.all = true;
  return { path: `/${action}`, body, byRun: false, ...common };
}

/** `holdfast hold|resume|stop`. */
export function actionCommand(action: Action): (argv: string[]) => Promise<void> {
  return async (argv) => {
    const request = actionRequest(action, argv);
    if (request.help)
      return void console.log({ hold: HOLD_USAGE, resume: RESUME_USAGE, stop: STOP_USAGE }[action]);
    const answer = await controlCall<ActionAnswer>(
      controlEndpoint(request.values),
      "POST",
      request.path,
      request.body,
    );
    if (request.json) return void console.log(JSON.stringify(answer, null, 2));
    console.log(describeAnswer(action, request, answer));
  };
}

const PAST = { hold: "held", resume: "resumed", stop: "stopped" } as const;

/** What an action did, as one says it. Pure. */
export function describeAnswer(
  action: Action,
  request: { byRun: boolean; body: Record<string, unknown> },
  answer: ActionAnswer,
): string {
  const lines: string[] = [];
  const changed = answer.runs.filter((r) => r.changed);
  const unchanged = answer.runs.filter((r) => !r.changed);
  if (answer.runs.length === 0) {
    lines.push(action === "resume" ? "No held or stopped run matches." : "No run matches now.");
  } else if (request.byRun && answer.runs.length === 1) {
    const run = answer.runs[0]!;
    lines.push(
      run.changed
        ? `${capital(PAST[action])} run ${run.run_id} (now ${run.status}).`
        : `Run ${run.run_id} was already ${run.status}: nothing changed.`,
    );
  } else {
    lines.push(
      `${capital(PAST[action])} ${changed.length} run${changed.length === 1 ? "" : "s"}` +
        (unchanged.length > 0 ? `; ${unchanged.length} already as asked.` : "."),
    );
    lines.push(
      "",
      table(
        ["RUN", "STATUS", "CHANGED"],
        answer.runs.map((r) => [r.run_id, r.status, r.changed ? "yes" : "no"]),
      ),
    );
  }
  const hf = holdfastCommand();
  if (answer.rule) {
    const rule = answer.rule;
    lines.push(
      "",
      `${answer.rule_created ? "Standing rule" : "Standing rule already in force:"} ${rule.rule_id} (${rule.description}): matching runs that have not called yet are held at their first call.`,
      `Lift it with \`${hf} resume ${rule.description}\` (which also resumes the runs) or \`${hf} lift ${rule.rule_id}\`.`,
    );
  } else if (action === "hold" && request.body.status !== undefined) {
    lines.push("", "No standing rule: a selector with --status is about runs as they are now.");
  }
  const lifted = answer.lifted_rules ?? [];
  if (lifted.length > 0) lines.push("");
  for (const rule of lifted) lines.push(`Lifted standing rule ${rule.rule_id} (${rule.description}).`);
  return lines.join("\n");
}

function capital(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
