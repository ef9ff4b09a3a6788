import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import { delimiter, join } from "node:path";

export interface ExecResult {
  readonly stdout: string;
  readonly stderr: string;
}

export interface ExecOptions {
  readonly cwd?: string;
  readonly timeoutMs?: number;
}

/**
 * Runs a program to completion. Rejects with an Error carrying Node's `code`: an errno
 * string ("ENOENT", "EACCES") when it could not start, the exit status otherwise, plus
 * `stdout`/`stderr` when there were any.
 */
export type Exec = (file: string, args: readonly string[], options?: ExecOptions) => Promise<ExecResult>;

/** Absolute path of `command` on PATH, or undefined. */
export type Which = (command: string) => Promise<string | undefined>;

/** The few process-level effects the search and installer depend on, so tests can replace them. */
export interface System {
  readonly exec: Exec;
  readonly which: Which;
  readonly env: Readonly<Record<string, string | undefined>>;
}

export const execProgram: Exec = (file, args, options = {}) =>
  new Promise((resolve, reject) => {
    execFile(
      file,
      [...args],
      {
        cwd: options.cwd,
        timeout: options.timeoutMs ?? 0,
        encoding: "utf8",
        // apt-get update is chatty; the default 1 MiB would cut it off mid-run.
        maxBuffer: 64 * 1024 * 1024,
      },
      (error, stdout, stderr) => {
        if (error) reject(Object.assign(error, { stdout, stderr }));
        else resolve({ stdout, stderr });
      },
    );
  });

export function whichOnPath(pathVariable: string | undefined): Which {
  return async (command) => {
    for (const dir of (pathVariable ?? "").split(delimiter)) {
      if (dir === "") continue;
      const candidate = join(dir, command);
      try {
        await access(candidate, constants.X_OK);
        if ((await stat(candidate)).isFile()) return candidate;
      } catch {
        // Not in this PATH entry; keep looking.
      }
    }
    return undefined;
  };
}

export function resolveSystem(overrides: Partial<System> = {}): System {
  const env = overrides.env ?? process.env;
  return {
    env,
    exec: overrides.exec ?? execProgram,
    which: overrides.which ?? whichOnPath(env.PATH),
  };
}

/** Last `maxChars` of some output, trimmed, for error messages that should stay readable. */
export function tail(text: string, maxChars = 4000): string {
  const trimmed = text.trim();
  return trimmed.length <= maxChars ? trimmed : `…${trimmed.slice(-maxChars)}`;
}
