export {
  type AgentView,
  type DeployAgentResponse,
  type DurableRun,
  DurableStatus,
  type DurableStep,
  durableStatusToJSON,
  type Envelope,
} from "@holdfast/proto";
export { type Agent, type AgentFunction, type AgentOptions, agent, isAgent } from "./agent.js";
export { RunsApi, type RunsApiOptions, type SubmitOptions } from "./client.js";
export { NonRetriable, RunRevokedError, StepFailedError, UnrecordableResultError } from "./errors.js";
export {
  DEFAULT_RETRY_DELAYS_MS,
  MAX_RESULT_BYTES,
  type ParallelStep,
  Run,
  type StepAttempt,
  type StepOptions,
} from "./run.js";
export { type HoldfastWorker, type WorkerEvent, type WorkerOptions, worker } from "./worker.js";
