import type { EventType } from "./envelope.js";
import { InvalidRunIdError } from "./errors.js";

/**
 * Longest run id Holdfast accepts, in characters: Unicode code points, so an emoji or a
 * CJK character counts once, as Python's `len` counts it (not JavaScript's `length`).
 */
export const MAX_RUN_ID_LENGTH = 256;

/** Longest tag (and tenant) Holdfast accepts, in characters, counted as run ids are. */
export const MAX_TAG_LENGTH = 128;

// Ids made only of these characters, not starting with "_", are used as they are, so an
// operator can read them in a subject; anything else is base64url-encoded behind "_".
// The "_" prefix keeps the two forms from ever colliding.
const PLAIN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;
/**
 * C0 and C1 control characters and DEL: never part of a run id or a tag, since they
 * corrupt every terminal, log and table they reach.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this rejects
export const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;
/**
 * A UTF-16 surrogate without its pair (what a JSON `"\ud800"` escape gives). It has no
 * UTF-8 form: encoding turns every one into U+FFFD, so two distinct ids would become one
 * subject token and one stored id.
 */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Why `runId` cannot name a run, as the end of a sentence ("is empty", "contains a
 * control character"), or undefined when it can. What `assertRunId` checks; callers
 * that answer in their own words (the gateway, naming the header) use it directly.
 */
export function runIdDefect(runId: string): string | undefined {
  return textDefect(runId, MAX_RUN_ID_LENGTH);
}

/** Why `tag` cannot label a run (as its tag or tenant), like `runIdDefect`. */
export function tagDefect(tag: string): string | undefined {
  return textDefect(tag, MAX_TAG_LENGTH);
}

/**
 * Why `tenant` cannot own runs, like `tagDefect`; and a tenant may not contain "/", which
 * separates it from its runs' own ids (`scopedRunId`).
 */
export function tenantDefect(tenant: string): string | undefined {
  return (
    textDefect(tenant, MAX_TAG_LENGTH) ??
    (tenant.includes("/") ? 'contains "/", which separates a tenant from its run ids' : undefined)
  );
}

/**
 * The id a run has in the log, from its tenant and the id its caller sent, so that two
 * tenants never share a run whatever ids they send: tenant T's runs are `T/<id>` (an id
 * already under `T/` stays, so a durable run's worker sending back its run's id lands on
 * it, and a tenant never reaches outside `T/`); an untenanted id containing "/" gets a
 * leading "/" (`a/b` → `/a/b`), so no untenanted call can name a tenant's run. Pure: the
 * tenant is one `tenantDefect` accepts, and the result is checked with `runIdDefect` (the
 * prefix counts toward the length).
 */
export function scopedRunId(tenant: string, runId: string): string {
  if (tenant === "") return runId.includes("/") && !runId.startsWith("/") ? `/${runId}` : runId;
  const prefix = `${tenant}/`;
  return runId.startsWith(prefix) ? runId : `${prefix}${runId}`;
}

/** Whether the run `runId` (as the log names it) is one of `tenant`'s: scoping leaves it as it is. */
export function isTenantsRun(tenant: string, runId: string): boolean {
  return scopedRunId(tenant, runId) === runId;
}

function textDefect(text: string, limit: number): string | undefined {
  if (text.length === 0) return "is empty";
  if (LONE_SURROGATE.test(text)) {
    return "is not well-formed Unicode: it holds an unpaired UTF-16 surrogate, which has no UTF-8 form";
  }
  const length = characterCount(text);
  if (length > limit) return `is ${length} characters long; the limit is ${limit}`;
  if (CONTROL_CHARACTER.test(text)) return "contains a control character";
  return undefined;
}

/** Unicode code points in well-formed text. */
function characterCount(text: string): number {
  let count = text.length;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    // A high surrogate here is always paired (textDefect refused lone ones first).
    if (unit >= 0xd800 && unit <= 0xdbff) count -= 1;
  }
  return count;
}

/** Throws InvalidRunIdError unless `runId` can name a run. */
export function assertRunId(runId: string): void {
  const defect = runIdDefect(runId);
  if (defect !== undefined) throw new InvalidRunIdError(`The run id ${defect}.`);
}

/** Throws InvalidRunIdError unless `tag` can label a run (as its tag or tenant). */
export function assertTag(tag: string): void {
  const defect = tagDefect(tag);
  if (defect !== undefined) throw new InvalidRunIdError(`The tag ${defect}.`);
}

/**
 * The NATS subject token for a run id. Distinct ids always give distinct tokens, and a
 * token never contains ".", "*", ">", whitespace or non-ASCII, whatever the id holds.
 */
export function runToken(runId: string): string {
  if (runId !== "") assertRunId(runId);
  return tokenOf(runId);
}

/**
 * The token an id is stored under, without asking whether the id may name a run today:
 * for checking where an event was stored (it may predate a rule on ids).
 */
export function tokenOf(runId: string): string {
  // The fleet's own aggregate (standing rules) has the empty id, which no run may have:
  // its token "_" is one no run id encodes to (a base64 form always follows the "_").
  if (runId === "") return "_";
  if (PLAIN.test(runId)) return runId;
  return `_${Buffer.from(runId, "utf8").toString("base64url")}`;
}

/** Inverse of runToken. */
export function runIdFromToken(token: string): string {
  return token.startsWith("_") ? Buffer.from(token.slice(1), "base64url").toString("utf8") : token;
}

/** Subjects and stream names under one prefix (one Holdfast deployment, or one test). */
export interface Subjects {
  readonly prefix: string;
  /** The JetStream stream holding every run's events. */
  readonly eventsStream: string;
  /** Matches every run event. */
  readonly allRuns: string;
  /** Matches every event of one type, across runs (what an alert consumer subscribes to). */
  ofType(type: EventType): string;
  /** The subject one event of a run is appended on. */
  runEvent(runId: string, type: EventType): string;
  /** Matches every event of one run; also the expected-last-sequence scope for appends. */
  run(runId: string): string;
  /** The run id an event subject belongs to. */
  runIdOf(subject: string): string;
  /** Where the stream republishes every run event once stored (core NATS, no consumer). */
  readonly republishedRuns: string;
  /** Matches the republished events of one run: to hear them as they are stored. */
  republishedRun(runId: string): string;
  /** Matches every provider key event (a key's rate-limit window as read, …). */
  readonly allKeys: string;
  /** The subject one event of a provider key is appended on; `keyId` is Holdfast's hash of the key, never the key. */
  keyEvent(keyId: string, type: EventType): string;
  /** Matches every key's events of one type. */
  ofKeyType(type: EventType): string;
  /** Matches every agent event (its deployments). */
  readonly allAgents: string;
  /** The subject one event of an agent is appended on (its name made a safe token, as a run id is). */
  agentEvent(agent: string, type: EventType): string;
  /** Matches every agent's events of one type. */
  ofAgentType(type: EventType): string;
  /** What an event's subject names (undefined for a subject of no event under this prefix). */
  placeOf(subject: string): SubjectPlace | undefined;
}

/** Where an event was stored, as its subject says: whose event it is, and its type. */
export interface SubjectPlace {
  /** A run's (or the fleet's, token "_"), a provider key's, or an agent's. */
  readonly kind: "run" | "key" | "agent";
  /** The subject's token for it: a run token, a key id, an agent's token. */
  readonly token: string;
  readonly type: string;
}

// A key id is Holdfast's own hex hash of an upstream and an API key: never user text.
const KEY_ID = /^[0-9a-f]{8,64}$/;

const PREFIX = /^[a-z][a-z0-9_]{0,31}$/;

export function subjects(prefix: string): Subjects {
  if (!PREFIX.test(prefix)) throw new Error(`subject prefix "${prefix}" must match ${PREFIX}`);
  const base = `${prefix}.run.`;
  return {
    prefix,
    eventsStream: `${prefix.toUpperCase()}_EVENTS`,
    allRuns: `${base}>`,
    ofType: (type) => `${base}*.${type}`,
    runEvent: (runId, type) => `${base}${runToken(runId)}.${type}`,
    run: (runId) => `${base}${runToken(runId)}.*`,
    runIdOf: (subject) => {
      const token = subject.slice(base.length, subject.lastIndexOf("."));
      return runIdFromToken(token);
    },
    republishedRuns: `${prefix}.stored.run.>`,
    republishedRun: (runId) => `${prefix}.stored.run.${runToken(runId)}.*`,
    allKeys: `${prefix}.key.>`,
    keyEvent: (keyId, type) => {
      if (!KEY_ID.test(keyId)) throw new Error(`"${keyId}" is not a key id (a hex hash)`);
      return `${prefix}.key.${keyId}.${type}`;
    },
    ofKeyType: (type) => `${prefix}.key.*.${type}`,
    allAgents: `${prefix}.agent.>`,
    agentEvent: (agent, type) => `${prefix}.agent.${runToken(agent)}.${type}`,
    ofAgentType: (type) => `${prefix}.agent.*.${type}`,
    placeOf: (subject) => {
      // <prefix>.<run|key|agent>.<token>.<Type>: no token holds a ".".
      const parts = subject.split(".");
      if (parts.length !== 4 || parts[0] !== prefix) return undefined;
      const [, kind, token, type] = parts as [string, string, string, string];
      if ((kind !== "run" && kind !== "key" && kind !== "agent") || token === "" || type === "")
        return undefined;
      return { kind, token, type };
    },
  };
}
