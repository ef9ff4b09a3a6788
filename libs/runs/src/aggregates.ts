import {
  decide,
  decideFleet,
  evolve,
  evolveFleet,
  type FleetCommand,
  type FleetState,
  initialFleet,
  initialState,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import type { Aggregate } from "./ledger.js";

/** A run: its steps, limits, holds; decided by the run's decider. */
export const runAggregate: Aggregate<RunState, RunCommand> = {
  initial: initialState,
  evolve,
  decide,
  lastSequence: (state) => state.lastSequence,
};

/** The fleet: its standing hold rules. */
export const fleetAggregate: Aggregate<FleetState, FleetCommand> = {
  initial: () => initialFleet(),
  evolve: evolveFleet,
  decide: (command, state) => decideFleet(command, state),
  lastSequence: (state) => state.lastSequence,
};
