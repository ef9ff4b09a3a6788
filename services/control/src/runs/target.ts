import { createHash } from "node:crypto";
import {
  CONTROL_CHARACTER,
  CompactionMode,
  emptySelector,
  runIdDefect,
  SELECTOR_STATUSES,
  type Selector,
  selectorProblem,
  tagDefect,
  type WindowLimits,
} from "@holdfast/events";
import { InvalidArgumentError } from "../errors.js";

/** What an action is about: one run by id, or the runs a selector matches. */
export type Target = { readonly runId: string } | { readonly selector: Selector };

/** An operator's hold, resume or stop, checked: the target, why, and (resume) new limits. */
export interface ActionRequest {
  readonly target: Target;
  readonly reason: string;
  /** Resume only: limits of the new window; undefined for the configured ones. */
  readonly limits?: WindowLimits | undefined;
  /** Resume by id only: compact the run's conversation before its next call goes on. */
  readonly compact?: CompactionMode | undefined;
}

export const MAX_REASON_LENGTH = 1_000;
export const MAX_LIST = 10_000;
const SELECTOR_FIELDS = ["run", "tag", "model", "prompt", "status", "all"] as const;
const LIMIT_FIELDS = ["steps", "cost", "minutes"] as const;

/** The run id as given, or InvalidArgumentError saying what is wrong with it. */
export function checkRunId(runId: string): string {
  const defect = runIdDefect(runId);
  if (defect !== undefined) throw new InvalidArgumentError(`The run id ${defect}.`);
  return runId;
}

/**
 * The selector, or InvalidArgumentError naming what cannot be used: nothing set without
 * `all`, an unknown status, a prompt that is not a hex prefix, or text no run could carry.
 */
export function checkSelector(selector: Selector): Selector {
  const problem = selectorProblem(selector);
  if (problem !== undefined) throw new InvalidArgumentError(problem);
  const texts: [string, string, (text: string) => string | undefined][] = [
    ["run", selector.runGlob, runIdDefect],
    ["tag", selector.tag, tagDefect],
    ["model", selector.modelPrefix, tagDefect],
  ];
  for (const [field, value, defect] of texts) {
    const wrong = value === "" ? undefined : defect(value);
    if (wrong !== undefined) throw new InvalidArgumentError(`The selector's ${field} ${wrong}.`);
  }
  return selector;
}

export function checkReason(reason: string): string {
  if ([...reason].length > MAX_REASON_LENGTH) {
    throw new InvalidArgumentError(`reason is longer than ${MAX_REASON_LENGTH} characters`);
  }
  if (CONTROL_CHARACTER.test(reason)) throw new InvalidArgumentError("reason contains a control character");
  return reason;
}

/** A resume's limits in the log's units, or undefined when none is set. */
export function limitsFrom(fields: {
  steps?: number;
  costUsd?: number;
  minutes?: number;
}): WindowLimits | undefined {
  const { steps, costUsd, minutes } = fields;
  if (steps === undefined && costUsd === undefined && minutes === undefined) return undefined;
  if (steps !== undefined && !(Number.isInteger(steps) && steps > 0 && steps <= 0xffff_ffff)) {
    throw new InvalidArgumentError(`steps must be a positive integer, got ${steps}`);
  }
  if (costUsd !== undefined && !(Number.isFinite(costUsd) && costUsd > 0 && costUsd <= 9_000_000)) {
    throw new InvalidArgumentError(`cost must be a positive number of USD, got ${costUsd}`);
  }
  if (minutes !== undefined && !(Number.isInteger(minutes) && minutes > 0 && minutes <= 0xffff_ffff)) {
    throw new InvalidArgumentError(`minutes must be a positive integer, got ${minutes}`);
  }
  return {
    maxSteps: steps ?? 0,
    maxCostNanoUsd: costUsd === undefined ? 0 : Math.round(costUsd * 1e9),
    maxMinutes: minutes ?? 0,
    maxTokensPerMinute: 0,
  };
}

/**
 * A standing rule's id, derived from its selector: holding by the same selector twice
 * names the same rule, so the second adds none (the fleet's decider is idempotent by id),
 * even from two control services at once.
 */
export function ruleIdFor(selector: Selector): string {
  const canonical = JSON.stringify([
    selector.all,
    selector.runGlob,
    selector.tag,
    selector.modelPrefix,
    selector.promptHash,
    selector.status,
  ]);
  return `rule-${createHash("sha256").update(canonical).digest("hex").slice(0, 12)}`;
}

// REST bodies: `{run, tag, model, prompt, status, all, reason, steps, cost, minutes}`.

type Body = Record<string, unknown>;

/** `POST runs/:id/<action>`: the run from the path, the reason (and limits) from the body. */
export function runAction(runId: string, body: unknown, withLimits: boolean): ActionRequest {
  const fields = bodyFields(body, ["reason", ...(withLimits ? [...LIMIT_FIELDS, "compact"] : [])]);
  return {
    target: { runId: checkRunId(runId) },
    reason: checkReason(text(fields, "reason")),
    limits: withLimits ? limitsOf(fields) : undefined,
    compact: withLimits ? compactOf(text(fields, "compact")) : undefined,
  };
}

/** A resume's `compact`: "summarize", "truncate", or nothing. */
export function compactOf(value: string): CompactionMode | undefined {
  if (value === "") return undefined;
  if (value === "summarize") return CompactionMode.COMPACTION_MODE_SUMMARIZE;
  if (value === "truncate") return CompactionMode.COMPACTION_MODE_TRUNCATE;
  throw new InvalidArgumentError(
    `compact must be summarize or truncate, not ${JSON.stringify(value.slice(0, 40))}.`,
  );
}

/** `POST runs/:id/approve|deny`: the run from the path, the gate and the reason from the body. */
export function gateAction(
  runId: string,
  body: unknown,
): { runId: string; gateId: string | undefined; reason: string } {
  const fields = bodyFields(body, ["reason", "gate_id"]);
  const gateId = text(fields, "gate_id");
  return {
    runId: checkRunId(runId),
    gateId: gateId === "" ? undefined : gateId,
    reason: checkReason(text(fields, "reason")),
  };
}

/** `POST <action>`: a selector, the reason (and limits) from the body. */
export function selectorAction(body: unknown, withLimits: boolean): ActionRequest {
  const fields = bodyFields(body, [...SELECTOR_FIELDS, "reason", ...(withLimits ? LIMIT_FIELDS : [])]);
  const selector: Selector = {
    ...emptySelector(),
    runGlob: text(fields, "run"),
    tag: text(fields, "tag"),
    modelPrefix: text(fields, "model"),
    promptHash: text(fields, "prompt"),
    status: text(fields, "status"),
    all: flag(fields, "all"),
  };
  return {
    target: { selector: checkSelector(selector) },
    reason: checkReason(text(fields, "reason")),
    limits: withLimits ? limitsOf(fields) : undefined,
  };
}

/** `GET runs?status=&limit=`. */
export function listQuery(query: unknown): {
  status: (typeof SELECTOR_STATUSES)[number] | undefined;
  limit: number;
} {
  const fields = bodyFields(query, ["status", "limit"], "query parameter");
  const status = text(fields, "status");
  if (status !== "" && !(SELECTOR_STATUSES as readonly string[]).includes(status)) {
    throw new InvalidArgumentError(`status must be one of ${SELECTOR_STATUSES.join(", ")}, got "${status}"`);
  }
  const limitText = text(fields, "limit");
  const limit = limitText === "" ? 100 : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST) {
    throw new InvalidArgumentError(`limit must be an integer from 1 to ${MAX_LIST}, got "${limitText}"`);
  }
  return { status: status === "" ? undefined : (status as (typeof SELECTOR_STATUSES)[number]), limit };
}

function bodyFields(body: unknown, allowed: readonly string[], what = "field"): Body {
  if (body === undefined || body === null) return {};
  if (typeof body !== "object" || Array.isArray(body)) {
    throw new InvalidArgumentError(`the body must be a JSON object with ${allowed.join(", ")}`);
  }
  for (const key of Object.keys(body)) {
    if (!allowed.includes(key)) {
      throw new InvalidArgumentError(`unknown ${what} "${key}"; expected ${allowed.join(", ")}`);
    }
  }
  return body as Body;
}

function text(fields: Body, key: string): string {
  const value = fields[key];
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") throw new InvalidArgumentError(`${key} must be a string`);
  return value;
}

function flag(fields: Body, key: string): boolean {
  const value = fields[key];
  if (value === undefined || value === null) return false;
  if (typeof value !== "boolean") throw new InvalidArgumentError(`${key} must be true or false`);
  return value;
}

function limitsOf(fields: Body): WindowLimits | undefined {
  const number = (key: string): number | undefined => {
    const value = fields[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "number") throw new InvalidArgumentError(`${key} must be a number`);
    return value;
  };
  return limitsFrom({ steps: number("steps"), costUsd: number("cost"), minutes: number("minutes") });
}
