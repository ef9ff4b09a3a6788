import {
  type Actor,
  ActorKind,
  createIdGenerator,
  type FleetCommand,
  type FleetState,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { fleetAggregate, Ledger, runAggregate } from "@holdfast/runs";
import type { Stack } from "./stack.js";

/** An operator's hands on a stack's log, as the control service's credential: runs and the fleet's rules. */
export interface Operator {
  readonly runs: Ledger<RunState, RunCommand>;
  readonly fleet: Ledger<FleetState, FleetCommand>;
  /** Who the operator's commands name. */
  readonly actor: Actor;
  close(): Promise<void>;
}

/** Runs no labels name (the run's own are kept). */
export const NO_LABELS = { tag: "", tenant: "" };

export async function operatorOf(stack: Pick<Stack, "connect">): Promise<Operator> {
  const bus = await stack.connect("control");
  const common = {
    bus,
    log: createLogger({ name: "operator", level: "silent" }),
    clock: Date.now,
    newId: createIdGenerator(),
  };
  return {
    runs: new Ledger({ aggregate: runAggregate, ...common }),
    fleet: new Ledger({ aggregate: fleetAggregate, ...common }),
    actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" },
    close: () => bus.close(),
  };
}
