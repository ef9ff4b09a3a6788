export {
  Api,
  Cost,
  Envelope,
  FailureReason,
  RunIdentity,
  RunSource,
  StepCompleted,
  StepFailed,
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
  makeEnvelope,
  type NewEvent,
  type PayloadCase,
  SCHEMA_VERSION,
} from "./envelope.js";
export { EventDecodeError, EventsError, InvalidRunIdError } from "./errors.js";
export { createIdGenerator, timestampOfId } from "./ids.js";
export { apiFromName, apiName, failureReasonName, runSourceName } from "./names.js";
export {
  evolve,
  foldRun,
  initialState,
  type RunState,
  type StepState,
  type StepStatus,
} from "./run/state.js";
export {
  assertRunId,
  CONTROL_CHARACTER,
  MAX_RUN_ID_LENGTH,
  runIdFromToken,
  runToken,
  type Subjects,
  subjects,
} from "./subjects.js";
