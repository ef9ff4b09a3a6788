/**
 * How much of what a provider or a client says goes into an event. Every string and list
 * that comes from outside Holdfast is held to these before it becomes one, so that no
 * event can grow past what nats-server takes in one message (max_payload, 1 MiB by
 * default): an event the log refuses for its size is a fact that cannot be recorded.
 */
export const EVENT_BOUNDS = Object.freeze({
  /** A model's name: a client's is refused past it (400), a provider's is cut. */
  modelChars: 256,
  /** A provider's id for its response. */
  responseIdChars: 256,
  /** A provider's finish (stop) reason. */
  finishReasonChars: 128,
  /** A tool call's name, and its id. */
  toolNameChars: 256,
  /** Tool call names a step's outcome lists; past it, only how many more there were. */
  toolCallsListed: 128,
  /** Tool calls a gate's event records, arguments and all (the matched one always among them). */
  toolCallsGated: 16,
  /** A provider's error type or code. */
  errorLabelChars: 100,
  /** An error's message. */
  errorMessageChars: 500,
  /** What was wrong with a provider's usage report. */
  usageProblemChars: 1_000,
});

/**
 * The most bytes a step's outcome event (StepCompleted, StepFailed) takes with every field
 * at its bound, and a gate's event (ToolCallGated, LoopDetected): far under max_payload.
 */
export const MAX_OUTCOME_EVENT_BYTES = 128 * 1024;
export const MAX_GATE_EVENT_BYTES = 256 * 1024;

const ELLIPSIS = "…";

/**
 * `text` if it has at most `max` characters (UTF-16 units), else its first characters and
 * "…", `max` in all: a cut is visible to whoever reads it. Never cuts a surrogate pair in
 * half. Costs one comparison for text within the bound.
 */
export function boundText(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = Math.max(0, max - ELLIPSIS.length);
  if (end > 0 && isHighSurrogate(text.charCodeAt(end - 1))) end -= 1;
  return text.slice(0, end) + ELLIPSIS;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
