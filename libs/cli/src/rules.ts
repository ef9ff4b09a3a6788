import { parseArgs } from "node:util";
import { COMMON_OPTIONS } from "./common.js";
import { controlCall, controlEndpoint, type RuleBody } from "./control.js";
import { CliError } from "./errors.js";
import { table } from "./format.js";

export const RULES_USAGE = `holdfast rules [--json] [--data-dir DIR] [--config FILE]

Lists the standing hold rules in force: each holds the runs its selector matches at their
next call (new runs at their first), until lifted. \`holdfast hold\` by selector adds one.`;

export const LIFT_USAGE = `holdfast lift <rule> [--reason R] [--json] [--data-dir DIR] [--config FILE]

Lifts one standing hold rule by id (\`holdfast rules\` lists them). Runs it already held
stay held: resume them with \`holdfast resume\`.`;

export async function rules(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: COMMON_OPTIONS });
  if (values.help) return void console.log(RULES_USAGE);
  if (positionals.length > 0) throw new CliError(`rules takes no arguments\n\n${RULES_USAGE}`, 2);
  const { rules } = await controlCall<{ rules: RuleBody[] }>(controlEndpoint(values), "GET", "/rules");
  if (values.json) return void console.log(JSON.stringify(rules, null, 2));
  if (rules.length === 0) return void console.log("No standing rules.");
  console.log(
    table(
      ["RULE", "SELECTOR", "REASON", "BY", "ADDED"],
      rules.map((r) => [r.rule_id, r.description, r.reason || "-", r.actor, r.added_at]),
    ),
  );
}

export async function lift(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...COMMON_OPTIONS, reason: { type: "string" } },
  });
  if (values.help) return void console.log(LIFT_USAGE);
  const [ruleId] = positionals;
  if (ruleId === undefined || positionals.length > 1)
    throw new CliError(`give one rule id\n\n${LIFT_USAGE}`, 2);
  const query = values.reason === undefined ? "" : `?reason=${encodeURIComponent(values.reason)}`;
  const { rule } = await controlCall<{ rule: RuleBody }>(
    controlEndpoint(values),
    "DELETE",
    `/rules/${encodeURIComponent(ruleId)}${query}`,
  );
  if (values.json) return void console.log(JSON.stringify(rule, null, 2));
  console.log(
    `Lifted standing rule ${rule.rule_id} (${rule.description}). Runs it held stay held until resumed.`,
  );
}
