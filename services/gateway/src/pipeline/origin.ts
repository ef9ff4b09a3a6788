import { AccessPolicy, bindingProblem, type ControlAccessConfig } from "@holdfast/access";
import { runIdDefect } from "@holdfast/events";
import { InvalidRequestError, OriginNotAuthorizedError } from "../errors.js";
import { DuplicateHeaderError, type RequestHeaders, UndecodableHeaderError } from "../http/headers.js";

/** Where an operator's call was sent again from: a recorded step of a run. */
export interface CallOrigin {
  readonly kind: "replay" | "fork" | "compare";
  readonly runId: string;
  readonly step: number;
}

/** The tag every call sent from a recorded step is metered under. */
export const EVAL_TAG = "eval";

const KINDS: ReadonlySet<string> = new Set(["replay", "fork", "compare"]);

/**
 * Reads a call's origin headers: none (an agent's call), or an operator's call sent again
 * from a recorded step, which must carry the control token (X-Holdfast-Control-Token),
 * name the step it came from (X-Holdfast-Origin-Run, percent-encoded, and
 * X-Holdfast-Origin-Step) and run under the tag `eval`. Such a call is never held, gated
 * or budgeted: anything short of all that is refused, never taken for an agent's call.
 */
export function originReader(
  control: ControlAccessConfig,
): (headers: RequestHeaders, tag: string) => CallOrigin | undefined {
  const policy = new AccessPolicy(control, { name: "the gateway's calls from recorded steps", readOnly: "" });
  // With no control token, the control API is open only on loopback: so is this.
  const open = !policy.required && bindingProblem(control) === undefined;
  return (raw, tag) => {
    // A header sent twice with different values, or bytes that are no text: the client's error.
    const headers = {
      get: (name: string) => {
        try {
          return raw.get(name);
        } catch (error) {
          if (error instanceof DuplicateHeaderError || error instanceof UndecodableHeaderError)
            throw new InvalidRequestError(error.message, { cause: error });
          throw error;
        }
      },
    };
    const kind = headers.get("x-holdfast-origin");
    if (kind === undefined) return undefined;
    if (!KINDS.has(kind))
      throw new InvalidRequestError(
        `X-Holdfast-Origin is one of replay, fork, compare (got ${JSON.stringify(kind)}).`,
      );
    const token = headers.get("x-holdfast-control-token");
    if (!open) {
      if (token === undefined) throw new OriginNotAuthorizedError("it carries none");
      try {
        policy.authorize(`Bearer ${token}`, "change");
      } catch {
        throw new OriginNotAuthorizedError("the one it carries is not the control token");
      }
    }
    let runId: string;
    try {
      runId = decodeURIComponent(headers.get("x-holdfast-origin-run") ?? "");
    } catch {
      throw new InvalidRequestError("X-Holdfast-Origin-Run is not percent-encoded text.");
    }
    const defect = runId === "" ? "is missing" : runIdDefect(runId);
    if (defect !== undefined) throw new InvalidRequestError(`X-Holdfast-Origin-Run ${defect}.`);
    const stepText = headers.get("x-holdfast-origin-step") ?? "";
    if (!/^[1-9][0-9]{0,8}$/.test(stepText))
      throw new InvalidRequestError("X-Holdfast-Origin-Step is the recorded step's number (from 1).");
    if (tag !== EVAL_TAG)
      throw new InvalidRequestError(
        `A call sent again from a recorded step runs under the tag ${EVAL_TAG}: send X-Holdfast-Tag: ${EVAL_TAG}.`,
      );
    return { kind: kind as CallOrigin["kind"], runId, step: Number(stepText) };
  };
}
