#!/usr/bin/env node
import { ConfigError } from "@holdfast/config";
import { actionCommand, HOLD_USAGE, RESUME_USAGE, STOP_USAGE } from "./act.js";
import { EXPORT_USAGE, exportRun } from "./bundle.js";
import { DIFF_USAGE, diff } from "./diff.js";
import { DEPLOY_USAGE, deploy, RUNS_USAGE, runs, WORKER_USAGE, workerCommand } from "./durable.js";
import { CliError } from "./errors.js";
import { APPROVE_USAGE, DENY_USAGE, gateCommand } from "./gate.js";
import { INIT_USAGE, init } from "./init.js";
import { LS_USAGE, ls } from "./ls.js";
import { QUERY_USAGE, query } from "./query.js";
import { COMPARE_USAGE, compare, FORK_USAGE, fork, REPLAY_USAGE, replay } from "./replay.js";
import { LIFT_USAGE, lift, RULES_USAGE, rules } from "./rules.js";
import { CREDENTIALS_USAGE, credentials, PROVISION_USAGE, provision } from "./secrets.js";
import { SHOW_USAGE, show } from "./show.js";
import { TENANTS_USAGE, tenants } from "./tenants.js";
import { UP_USAGE, up } from "./up.js";
import { WINDOWS_USAGE, windows } from "./windows.js";

const COMMANDS: Record<string, { run: (argv: string[]) => Promise<void>; usage: string }> = {
  init: { run: init, usage: INIT_USAGE },
  up: { run: up, usage: UP_USAGE },
  ls: { run: ls, usage: LS_USAGE },
  show: { run: show, usage: SHOW_USAGE },
  export: { run: exportRun, usage: EXPORT_USAGE },
  diff: { run: diff, usage: DIFF_USAGE },
  replay: { run: replay, usage: REPLAY_USAGE },
  fork: { run: fork, usage: FORK_USAGE },
  compare: { run: compare, usage: COMPARE_USAGE },
  query: { run: query, usage: QUERY_USAGE },
  hold: { run: actionCommand("hold"), usage: HOLD_USAGE },
  resume: { run: actionCommand("resume"), usage: RESUME_USAGE },
  stop: { run: actionCommand("stop"), usage: STOP_USAGE },
  approve: { run: gateCommand("approve"), usage: APPROVE_USAGE },
  deny: { run: gateCommand("deny"), usage: DENY_USAGE },
  rules: { run: rules, usage: RULES_USAGE },
  lift: { run: lift, usage: LIFT_USAGE },
  windows: { run: windows, usage: WINDOWS_USAGE },
  deploy: { run: deploy, usage: DEPLOY_USAGE },
  worker: { run: workerCommand, usage: WORKER_USAGE },
  runs: { run: runs, usage: RUNS_USAGE },
  credentials: { run: credentials, usage: CREDENTIALS_USAGE },
  provision: { run: provision, usage: PROVISION_USAGE },
  tenants: { run: tenants, usage: TENANTS_USAGE },
};

const HELP = `holdfast — the control plane between LLM agents and their model providers

Commands:
${Object.values(COMMANDS)
  .map((c) => `  ${c.usage.split("\n")[0]}`)
  .join("\n")}

Run \`holdfast <command> --help\` for details. Configuration: a YAML file (--config or
HOLDFAST_CONFIG) and HOLDFAST_* environment variables; see the README.`;

const [name, ...argv] = process.argv.slice(2);
const command = name === undefined ? undefined : COMMANDS[name];
if (name === undefined || name === "--help" || name === "-h" || name === "help") {
  console.log(HELP);
} else if (command === undefined) {
  console.error(`holdfast: unknown command "${name}"\n\n${HELP}`);
  process.exitCode = 2;
} else {
  try {
    await command.run(argv);
  } catch (error) {
    if (error instanceof CliError) {
      console.error(`holdfast ${name}: ${error.message}`);
      process.exitCode = error.exitCode;
    } else if (error instanceof ConfigError) {
      console.error(`holdfast ${name}: configuration error\n${error.message}`);
      process.exitCode = 2;
    } else if (
      error instanceof TypeError &&
      (error as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")
    ) {
      console.error(`holdfast ${name}: ${error.message}\n\n${command.usage}`);
      process.exitCode = 2;
    } else {
      console.error(`holdfast ${name}: ${(error as Error).stack ?? error}`);
      process.exitCode = 1;
    }
  }
}
