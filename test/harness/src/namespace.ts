import { randomBytes } from "node:crypto";

let issued = 0;
const MAX_LABEL = 24;

/**
 * A token unique to this call, `[a-z][a-z0-9_]*`, that fits a JetStream stream name, a
 * subject token and a ClickHouse database name alike. The pid and a counter make it unique
 * within a run; the random tail keeps it unique against data left by earlier runs.
 */
export function uniqueNamespace(label: string): string {
  let slug = label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .replace(/^_+|_+$/g, "")
    .slice(0, MAX_LABEL)
    .replace(/_+$/, "");
  if (!/^[a-z]/.test(slug)) slug = `t${slug === "" ? "" : `_${slug}`}`;
  issued += 1;
  return `${slug}_${process.pid.toString(36)}_${issued.toString(36)}_${randomBytes(3).toString("hex")}`;
}
