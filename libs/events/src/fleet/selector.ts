import type { Selector } from "@holdfast/proto";
import picomatch from "picomatch";

/** What a selector can see of a run. */
export interface RunAttributes {
  readonly runId: string;
  readonly tag: string;
  readonly model: string;
  readonly promptHash: string;
  /** "new", "running", "idle", "held" or "stopped". */
  readonly status: string;
}

export const SELECTOR_STATUSES = ["running", "idle", "held", "stopped"] as const;

/** Why a selector cannot be used, or undefined when it can. */
export function selectorProblem(selector: Selector): string | undefined {
  const any =
    selector.runGlob !== "" ||
    selector.tag !== "" ||
    selector.modelPrefix !== "" ||
    selector.promptHash !== "" ||
    selector.status !== "";
  if (!any && !selector.all)
    return "a selector needs at least one of run, tag, model, prompt, status, or all";
  if (selector.status !== "" && !(SELECTOR_STATUSES as readonly string[]).includes(selector.status)) {
    return `status must be one of ${SELECTOR_STATUSES.join(", ")}, got "${selector.status}"`;
  }
  if (selector.promptHash !== "" && !/^[0-9a-f]{4,64}$/.test(selector.promptHash)) {
    return `prompt must be a hex prefix of a conversation hash (4 to 64 characters), got "${selector.promptHash}"`;
  }
  return undefined;
}

// Compiled globs, bounded: selectors repeat (standing rules are checked on every call).
const globs = new Map<string, (value: string) => boolean>();
// A run id is one name, not a path: "/" is an ordinary character to its glob, so `*`
// matches across it (picomatch treats "/" as a separator; it is swapped out first).
const SLASH = /\//g;
const NOT_A_SEPARATOR = "\u0000";

function glob(pattern: string): (value: string) => boolean {
  let matcher = globs.get(pattern);
  if (matcher === undefined) {
    const compiled = picomatch(pattern.replace(SLASH, NOT_A_SEPARATOR), { dot: true });
    matcher = (value: string) => compiled(value.replace(SLASH, NOT_A_SEPARATOR));
    if (globs.size >= 1_000) globs.clear();
    globs.set(pattern, matcher);
  }
  return matcher;
}

/** Whether the selector picks the run: every field it sets must match (AND). */
export function matches(selector: Selector, run: RunAttributes): boolean {
  if (selector.runGlob !== "" && !glob(selector.runGlob)(run.runId)) return false;
  if (selector.tag !== "" && run.tag !== selector.tag) return false;
  if (selector.modelPrefix !== "" && !run.model.startsWith(selector.modelPrefix)) return false;
  if (selector.promptHash !== "" && !run.promptHash.startsWith(selector.promptHash)) return false;
  if (selector.status !== "" && run.status !== selector.status) return false;
  return true;
}

/** The selector as an operator would type it: `--tag prod --model gpt-4o`. */
export function describeSelector(selector: Selector): string {
  const parts: string[] = [];
  if (selector.all) parts.push("--all");
  if (selector.runGlob !== "") parts.push(`--run ${selector.runGlob}`);
  if (selector.tag !== "") parts.push(`--tag ${selector.tag}`);
  if (selector.modelPrefix !== "") parts.push(`--model ${selector.modelPrefix}`);
  if (selector.promptHash !== "") parts.push(`--prompt ${selector.promptHash}`);
  if (selector.status !== "") parts.push(`--status ${selector.status}`);
  return parts.join(" ");
}

/** Two selectors pick the same runs by the same fields. */
export function sameSelector(a: Selector, b: Selector): boolean {
  return (
    a.all === b.all &&
    a.runGlob === b.runGlob &&
    a.tag === b.tag &&
    a.modelPrefix === b.modelPrefix &&
    a.promptHash === b.promptHash &&
    a.status === b.status
  );
}
