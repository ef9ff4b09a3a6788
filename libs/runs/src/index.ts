export { fleetAggregate, runAggregate } from "./aggregates.js";
export { type FollowOptions, LogFollower, type LogSink, URGENT_TYPES } from "./follower.js";
export { CONTROL_TYPES, HeldRuns, type HeldStatus } from "./held.js";
export {
  type Aggregate,
  type Executed,
  Ledger,
  type LedgerOptions,
  type RunLabels,
} from "./ledger.js";
