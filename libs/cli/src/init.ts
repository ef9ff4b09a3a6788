import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";
import { pointYourAgent } from "./pointing.js";

export const INIT_USAGE = `holdfast init [--config FILE] [--force]

Writes a configuration file (./holdfast.yaml unless --config names another) with a fresh
control token and read-only token for the control API, and the settings most people
change (limits, budgets, what a crossed limit does, how held calls wait) commented with
their defaults. An existing file is left alone unless --force. Then prints how to start
Holdfast with it and the one line to change in an agent.`;

/** A token for the control API: 32 random bytes, base64url (43 characters). */
export function newToken(): string {
  return randomBytes(32).toString("base64url");
}

/** The file `holdfast init` writes. Pure: the tokens are given. */
export function initialConfig(tokens: { control: string; read: string }): string {
  return `# Holdfast configuration (written by \`holdfast init\`). Every key and its environment
# variable (HOLDFAST_<SECTION>__<KEY>) is listed in the README's "Configuration" table.
# Commented lines show the defaults.

# data_dir: ~/.holdfast            # NATS store, embedded ClickHouse, logs

gateway:
  port: 4141                       # agents send their model calls here
  # upstream: auto                 # auto: Anthropic Messages to api.anthropic.com, the rest to api.openai.com

# The control API (REST on control.port, gRPC on control.grpc_port): holdfast hold,
# resume, stop, rules, lift. Keep these tokens secret: the control token may change runs,
# the read-only token may only list and show them.
control:
  # host: 127.0.0.1                # off loopback, the tokens are required
  # port: 4142
  # grpc_port: 4143
  token: ${tokens.control}
  read_token: ${tokens.read}

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
      config: { type: "string" },
      force: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(INIT_USAGE);
  if (positionals.length > 0) throw new CliError(`init takes no arguments\n\n${INIT_USAGE}`, 2);
  const file = resolve(values.config ?? "holdfast.yaml");
  if (existsSync(file) && !values.force) {
    throw new CliError(`${file} exists; pass --force to replace it (its tokens are lost)`);
  }
  mkdirSync(dirname(file), { recursive: true });
  // Owner-only: the file holds the tokens.
  writeFileSync(file, initialConfig({ control: newToken(), read: newToken() }), { mode: 0o600 });
  const shown = relative(process.cwd(), file) || file;
  const path = shown.startsWith("..") ? file : shown.startsWith("/") ? shown : `./${shown}`;
  const hf = holdfastCommand();
  console.log(`Wrote ${path} with a new control token and read-only token.

Start Holdfast with it:

  ${hf} up --config ${path}

The other commands find its token through the running stack (or pass --config ${path},
or set HOLDFAST_CONFIG=${path}), e.g.:

  ${hf} ls --status held
  ${hf} hold <run> --reason "looks stuck"
  ${hf} hold --tag prod          (every prod run, and those that start later)
  ${hf} resume <run> --steps 20
  ${hf} rules

Point your agent at Holdfast by changing one line:

${pointYourAgent("http://127.0.0.1:4141/v1")}`);
}
