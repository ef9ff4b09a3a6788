import { BusError } from "@holdfast/bus";
import type { CompleteStep, FailStep, RunCommand, RunState } from "@holdfast/events";
import type { Ledger, RunLabels } from "@holdfast/runs";

/**
 * Records a call's outcome, for as long as the log is away (executeDurably). An outcome
 * the log refuses for good (too large for it, or any refusal no retry can change) is
 * recorded again abridged, in a form that fits, rather than retried for ever or dropped:
 * a step left in flight is never charged, and its run waits on it. `onError` hears each
 * failure: the refusal (the outcome went in abridged), and anything that kept it out.
 */
export function recordOutcome(
  ledger: Pick<Ledger<RunState, RunCommand>, "executeDurably">,
  runId: string,
  labels: RunLabels,
  command: CompleteStep | FailStep,
  onError: (error: unknown) => void,
): void {
  ledger.executeDurably(runId, labels, command).catch((error: unknown) => {
    if (!(error instanceof BusError) || error.retryable || command.outcome.abridged === true) {
      return onError(error);
    }
    onError(new OutcomeRefusedError(error));
    ledger.executeDurably(runId, labels, abridged(command)).catch(onError);
  });
}

/** The log refused a call's outcome for good (`cause` says why): it is recorded again, abridged. */
export class OutcomeRefusedError extends Error {
  override readonly name = "OutcomeRefusedError";
  readonly code = "holdfast_outcome_refused";
  readonly retryable = false;
  constructor(cause: Error) {
    super(`The event log refused this call's outcome (${cause.message}); it is recorded again, abridged.`, {
      cause,
    });
  }
}

/**
 * The outcome without what the provider said in words (its response id, finish reason,
 * tool call names, error texts), marked abridged: the model it was charged for, its usage,
 * cost, status, timings and reason stand, and how many tool calls it asked for.
 */
export function abridged(command: CompleteStep | FailStep): CompleteStep | FailStep {
  const outcome = { ...command.outcome, responseId: "", usageProblem: "", abridged: true };
  if (command.type === "CompleteStep") {
    return {
      ...command,
      outcome,
      finishReason: "",
      toolCalls: [],
      toolCallsOmitted: command.toolCalls.length + (command.toolCallsOmitted ?? 0),
    };
  }
  return { ...command, outcome, errorType: "", errorCode: "", errorMessage: "" };
}
