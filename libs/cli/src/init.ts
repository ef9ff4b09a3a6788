import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { CONFIG_FILE, dataDirOf } from "./common.js";
import { ensureCredentials } from "./credentials.js";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";
import { pointYourAgent } from "./pointing.js";

export const INIT_USAGE = `holdfast init [--data-dir DIR] [--config FILE] [--force]

Makes the credentials a stack on this data dir runs with (DIR/credentials/, readable by you
alone: a NATS credential per service, the control API's tokens, the budget service's and
workers' tokens; see SECURITY.md), and writes a configuration file with the settings most
people change (limits, budgets, what a crossed limit does, how held calls wait) commented
with their defaults. The file goes to DIR/holdfast.yaml (~/.holdfast/holdfast.yaml unless
--data-dir), where every command reads it, out of any checkout; --config writes it
elsewhere. It holds no secret. An existing file is left alone unless --force. Then prints
where everything is and the one line to change in an agent.`;

/** The file `holdfast init` writes. Pure; it holds no secret (the tokens are in credentials/). */
export function initialConfig(): string {
  return `# Holdfast configuration (written by \`holdfast init\`). Every key and its environment
# variable (HOLDFAST_<SECTION>__<KEY>) is listed in the README's "Configuration" table.
# Commented lines show the defaults. The tokens are not here: \`holdfast up\` keeps them in
# <data_dir>/credentials/ (see SECURITY.md); set control.token here only to choose your own.

# data_dir: ~/.holdfast            # NATS store, embedded ClickHouse, credentials, logs

gateway:
  port: 4141                       # agents send their model calls here
  # upstream: auto                 # auto: Anthropic Messages to api.anthropic.com, the rest to api.openai.com

# The control API (REST on control.port, gRPC on control.grpc_port): holdfast hold,
# resume, stop, rules, lift. Its tokens are in <data_dir>/credentials/control.token (may
# change runs) and read.token (may only list and show them).
# control:
#   host: 127.0.0.1                # off loopback too, every call needs a token
#   port: 4142
#   grpc_port: 4143

# Per-run limits, checked before each call; 0 is no limit. A run that would cross one is
# held (its calls wait) until someone resumes it, or stopped, as on_trip says.
# limits:
#   max_cost_usd: 0                # most a run may spend in one window, in USD
#   max_steps: 0                   # most model calls in one window
#   max_minutes: 0                 # longest a window may last
#   max_tokens_per_minute: 0

# limits_by_tag:                   # per tag, over \`limits\` key by key
#   nightly: { max_cost_usd: 5, max_steps: 200 }

# Spend across runs per UTC day and month, per tag ("*": every run); a spent budget trips its runs.
# budgets:
#   "*": { daily_usd: 50, monthly_usd: 1000 }

# on_trip: hold                    # hold (calls wait for a resume) or stop (calls get a 409)

# How held calls wait:
# hold:
#   keepalive_ms: 15000            # how often a held call gets a keepalive
#   keepalive_1xx: true            # 1xx interim responses for clients known to tolerate them
`;
}

export async function init(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      "data-dir": { type: "string" },
      config: { type: "string" },
      force: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(INIT_USAGE);
  if (positionals.length > 0) throw new CliError(`init takes no arguments\n\n${INIT_USAGE}`, 2);
  const dataDir = dataDirOf(values);
  const file = values.config === undefined ? join(dataDir, CONFIG_FILE) : resolve(values.config);
  if (existsSync(file) && !values.force) {
    throw new CliError(`${file} exists; pass --force to replace it`);
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  chmodSync(dataDir, 0o700);
  const credentials = ensureCredentials(dataDir);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, initialConfig(), { mode: 0o600 });
  const hf = holdfastCommand();
  const inDataDir = file === join(dataDir, CONFIG_FILE);
  const dirFlag = values["data-dir"] === undefined ? "" : ` --data-dir ${values["data-dir"]}`;
  const start = inDataDir ? `${hf} up${dirFlag}` : `${hf} up${dirFlag} --config ${file}`;
  console.log(`Wrote ${file}${inDataDir ? " (every command reads it from there)" : ""}.
Made the stack's credentials in ${credentials.dir} (readable by you alone):
  control token    ${credentials.tokenFiles.control}   (may hold, resume and stop runs)
  read-only token  ${credentials.tokenFiles.read}
  worker token     ${credentials.tokenFiles.worker}   (for holdfast worker)

Start Holdfast:

  ${start}

The other commands find the tokens themselves, e.g.:

  ${hf} ls --status held
  ${hf} hold <run> --reason "looks stuck"
  ${hf} hold --tag prod          (every prod run, and those that start later)
  ${hf} resume <run> --steps 20

and curl with: -H "Authorization: Bearer $(cat ${credentials.tokenFiles.control})"

Point your agent at Holdfast by changing one line:

${pointYourAgent("http://127.0.0.1:4141/v1")}`);
}
