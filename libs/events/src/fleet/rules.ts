import type { Actor, Selector } from "@holdfast/proto";
import { type EventPayload, isKnown, type StoredEnvelope } from "../envelope.js";
import { matches, type RunAttributes, sameSelector } from "./selector.js";

/**
 * The fleet's own aggregate: standing hold rules. Its events have an empty run id and a
 * subject of their own (`<prefix>.run._.<Type>`, a token no run id can have), so they are
 * ordered and appended with the same sequence check as a run's.
 */
export const FLEET = "";

export interface HoldRule {
  readonly ruleId: string;
  readonly selector: Selector;
  readonly addedMs: number;
  readonly actor: Actor | undefined;
  readonly reason: string;
}

export interface FleetState {
  readonly lastSequence: number;
  /** Standing hold rules in force, by id. */
  readonly rules: ReadonlyMap<string, HoldRule>;
  readonly unknownEvents: number;
}

export function initialFleet(): FleetState {
  return { lastSequence: 0, rules: new Map(), unknownEvents: 0 };
}

/** Folds one event into the fleet, as `evolve` folds a run's: only its next event applies. */
export function evolveFleet(state: FleetState, event: StoredEnvelope): FleetState {
  if (event.sequence !== state.lastSequence + 1) return state;
  const seen = { ...state, lastSequence: event.sequence };
  if (!isKnown(event)) return { ...seen, unknownEvents: state.unknownEvents + 1 };
  const { payload } = event;
  switch (payload.$case) {
    case "holdRuleAdded": {
      const e = payload.value;
      const rules = new Map(state.rules);
      rules.set(e.ruleId, {
        ruleId: e.ruleId,
        selector: e.selector ?? emptySelector(),
        addedMs: event.timestampMs,
        actor: e.actor,
        reason: e.reason,
      });
      return { ...seen, rules };
    }
    case "holdRuleLifted": {
      if (!state.rules.has(payload.value.ruleId)) return seen;
      const rules = new Map(state.rules);
      rules.delete(payload.value.ruleId);
      return { ...seen, rules };
    }
    default:
      return seen;
  }
}

export function foldFleet(events: Iterable<StoredEnvelope>): FleetState {
  let state = initialFleet();
  for (const event of events) state = evolveFleet(state, event);
  return state;
}

/** Add a standing hold rule. */
export interface AddHoldRule {
  readonly type: "AddHoldRule";
  readonly ruleId: string;
  readonly selector: Selector;
  readonly actor: Actor;
  readonly reason: string;
}

/** Lift standing hold rules: one by id, or every rule with exactly this selector. */
export interface LiftHoldRules {
  readonly type: "LiftHoldRules";
  readonly ruleId?: string;
  readonly selector?: Selector;
  readonly actor: Actor;
  readonly reason: string;
}

export type FleetCommand = AddHoldRule | LiftHoldRules;

/** Idempotent: a rule added twice, or one lifted that is not in force, appends nothing. */
export function decideFleet(command: FleetCommand, state: FleetState): EventPayload[] {
  switch (command.type) {
    case "AddHoldRule":
      if (state.rules.has(command.ruleId)) return [];
      return [
        {
          $case: "holdRuleAdded",
          value: {
            ruleId: command.ruleId,
            selector: command.selector,
            actor: command.actor,
            reason: command.reason,
          },
        },
      ];
    case "LiftHoldRules": {
      const lifted = [...state.rules.values()].filter(
        (rule) =>
          (command.ruleId !== undefined && rule.ruleId === command.ruleId) ||
          (command.selector !== undefined && sameSelector(rule.selector, command.selector)),
      );
      return lifted.map((rule) => ({
        $case: "holdRuleLifted" as const,
        value: { ruleId: rule.ruleId, actor: command.actor, reason: command.reason },
      }));
    }
  }
}

/**
 * The rules that hold this run at its next call: those whose selector matches it and that
 * were added after it was last resumed (a run resumed later is exempt: the operator spoke
 * after the rule). The status a standing rule sees is the run's activity, never "held".
 */
export function rulesHolding(
  rules: Iterable<HoldRule>,
  run: RunAttributes,
  lastResumedMs: number | null,
): HoldRule[] {
  const holding: HoldRule[] = [];
  for (const rule of rules) {
    if (lastResumedMs !== null && rule.addedMs <= lastResumedMs) continue;
    if (matches(rule.selector, run)) holding.push(rule);
  }
  return holding;
}

export function emptySelector(): Selector {
  return { runGlob: "", tag: "", modelPrefix: "", promptHash: "", status: "", all: false };
}
