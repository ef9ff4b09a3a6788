import { parseArgs } from "node:util";
import { COMMON_OPTIONS } from "./common.js";
import { controlCall, controlEndpoint } from "./control.js";
import { CliError } from "./errors.js";

export const APPROVE_USAGE = `holdfast approve <run> [--gate ID] [--reason R] [--json] [--data-dir DIR] [--config FILE]

Lets the answers the tool-call gate holds for a run through: each reaches its agent
exactly as the provider sent it, and the run goes on. \`holdfast show <run>\` lists the held
answers with the tool, its arguments and the rule that matched; --gate picks one.`;

export const DENY_USAGE = `holdfast deny <run> [--gate ID] [--reason R] [--json] [--data-dir DIR] [--config FILE]

Refuses the answers the tool-call gate holds for a run: each agent gets an error in its
API's shape instead (its SDK raises; a stream gets an error event, then ends), with the
reason. The run goes on, or stays stopped when the gate stopped it (on_match: stop).
--gate picks one held answer.`;

export interface GateAnswerBody {
  run: { run_id: string; changed: boolean; status: string };
  gates: { gate_id: string; step: number; kind: string; tool: string; rule: string; decision: string }[];
}

/** `holdfast approve|deny`. */
export function gateCommand(decision: "approve" | "deny"): (argv: string[]) => Promise<void> {
  const usage = decision === "approve" ? APPROVE_USAGE : DENY_USAGE;
  return async (argv) => {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { ...COMMON_OPTIONS, gate: { type: "string" }, reason: { type: "string" } },
    });
    if (values.help) return void console.log(usage);
    const [runId] = positionals;
    if (runId === undefined || positionals.length > 1) throw new CliError(`give one run id\n\n${usage}`, 2);
    const body: Record<string, string> = {};
    if (values.gate !== undefined) body.gate_id = values.gate;
    if (values.reason !== undefined) body.reason = values.reason;
    const answer = await controlCall<GateAnswerBody>(
      controlEndpoint(values),
      "POST",
      `/runs/${encodeURIComponent(runId)}/${decision}`,
      body,
    );
    if (values.json) return void console.log(JSON.stringify(answer, null, 2));
    console.log(describeGateAnswer(answer));
  };
}

/** What an approval or denial did, as one says it. Pure. */
export function describeGateAnswer(answer: GateAnswerBody): string {
  if (answer.gates.length === 0) return `Run ${answer.run.run_id}: those answers were already decided.`;
  if (!answer.run.changed) {
    return answer.gates
      .map((gate) => `Held answer ${gate.gate_id} was already ${gate.decision}: nothing changed.`)
      .join("\n");
  }
  const lines = answer.gates.map((gate) => {
    const what = gate.kind === "loop" ? `a repeated call to ${gate.tool}` : `a call to ${gate.tool}`;
    const verdict = gate.decision === "approved" ? "delivered" : "refused";
    return `${gate.decision === "approved" ? "Approved" : "Denied"} step ${gate.step} (${what}, ${gate.rule}): its answer is ${verdict}.`;
  });
  lines.push(`Run ${answer.run.run_id} is now ${answer.run.status}.`);
  return lines.join("\n");
}
