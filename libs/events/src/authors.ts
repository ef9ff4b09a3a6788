import type { EventType } from "./envelope.js";

/**
 * The parts of Holdfast that write events. Each has its own NATS credential, which may
 * publish only the event types it authors (the subject names the type), so what an event
 * says of who acted is what its author's credential allows.
 */
export type Author = "gateway" | "control" | "scheduler";

/**
 * Who writes each event type: one author per type. A gateway decides what happens to the
 * calls it serves (steps, limits' trips, parking, the gate's holds, a standing rule found
 * at a call, a checkpoint's end); the control service writes what operators do (holds,
 * resumes, stops, rules, decisions on held answers); the scheduler writes durable runs'
 * lives and agents' deployments.
 */
export const AUTHOR_OF: Readonly<Record<EventType, Author>> = {
  StepStarted: "gateway",
  StepCompleted: "gateway",
  StepFailed: "gateway",
  StepRetried: "gateway",
  RunTripped: "gateway",
  RunHeldByRule: "gateway",
  CheckpointCleared: "gateway",
  CallParked: "gateway",
  CallUnparked: "gateway",
  ToolCallGated: "gateway",
  LoopDetected: "gateway",
  ToolCallAbandoned: "gateway",
  RunCompacted: "gateway",
  RateLimitObserved: "gateway",
  RunHeld: "control",
  RunResumed: "control",
  RunStopped: "control",
  HoldRuleAdded: "control",
  HoldRuleLifted: "control",
  ToolCallApproved: "control",
  ToolCallDenied: "control",
  RunSubmitted: "scheduler",
  RunLeased: "scheduler",
  StepRecorded: "scheduler",
  RunReleased: "scheduler",
  RunFinished: "scheduler",
  RunFailed: "scheduler",
  RunRedriven: "scheduler",
  AgentDeployed: "scheduler",
};

/** The event types `author` writes. */
export function typesAuthoredBy(author: Author): EventType[] {
  return (Object.keys(AUTHOR_OF) as EventType[]).filter((type) => AUTHOR_OF[type] === author);
}
