export { fleetAggregate, runAggregate } from "./aggregates.js";
export { LogFollower, type LogSink } from "./follower.js";
export { CONTROL_TYPES, HeldRuns, type HeldStatus } from "./held.js";
export {
  type Aggregate,
  type Executed,
  Ledger,
  type LedgerOptions,
  type RunLabels,
} from "./ledger.js";
