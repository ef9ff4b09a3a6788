export {
  Api,
  Cost,
  Envelope,
  FailureReason,
  RunIdentity,
  RunSource,
  StepCompleted,
  StepFailed,
  StepOutcome,
  StepStarted,
  Usage,
} from "@holdfast/proto";
export {
  type DecodedEnvelope,
  decodeEnvelope,
  EVENT_TYPES,
  type EventPayload,
  type EventType,
  encodeEnvelope,
  envelopeToJson,
  eventTypeOf,
  isKnown,
  makeEnvelope,
  type NewEvent,
  type PayloadCase,
  SCHEMA_VERSIONS,
  type StoredEnvelope,
  type UnknownEvent,
} from "./envelope.js";
export { EventDecodeError, EventsError, InvalidRunIdError } from "./errors.js";
export { createIdGenerator, timestampOfId } from "./ids.js";
export { apiFromName, apiName, failureReasonName, runSourceName } from "./names.js";
export {
  type CompleteStep,
  decide,
  type FailStep,
  type ObservedOutcome,
  type RunCommand,
  type StartStep,
} from "./run/decide.js";
export {
  evolve,
  foldRun,
  initialState,
  type OpenStep,
  type RunState,
  RunStatus,
  type RunTotals,
} from "./run/state.js";
export { describeRun, type RunView, type StepStatus, type StepView } from "./run/view.js";
export {
  assertRunId,
  assertTag,
  CONTROL_CHARACTER,
  MAX_RUN_ID_LENGTH,
  MAX_TAG_LENGTH,
  runIdDefect,
  runIdFromToken,
  runToken,
  type Subjects,
  subjects,
  tagDefect,
} from "./subjects.js";
