import { existsSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const CHECKOUT = fileURLToPath(new URL("../../../", import.meta.url));

/**
 * How a person runs this CLI from where they are, for the commands Holdfast prints: the
 * checkout's `holdfast` launcher (which needs neither pnpm nor a build first), written
 * `./holdfast` from the checkout and by its path elsewhere; plain `holdfast` when this
 * CLI was installed without a checkout around it.
 */
export function holdfastCommand(cwd = process.cwd()): string {
  const launcher = join(CHECKOUT, "holdfast");
  if (!existsSync(launcher)) return "holdfast";
  const rel = relative(cwd, launcher);
  return rel === "holdfast" ? "./holdfast" : launcher;
}
