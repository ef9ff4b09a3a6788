import { execProgram, whichOnPath } from "./system.js";

let launcher: Promise<string | undefined> | undefined;

/**
 * The setpriv (util-linux 2.33 or newer) that can run a program with a parent-death signal,
 * or undefined: not Linux, no setpriv on PATH, or one too old for `--pdeathsig`. Node has no
 * prctl of its own, and setpriv execs the program in place, so the pid stays the program's.
 * Looked up once per process.
 */
export function parentDeathLauncher(): Promise<string | undefined> {
  launcher ??= findLauncher();
  return launcher;
}

/** Whether a nats-server started here is sent SIGTERM when the process that started it dies. */
export async function supportsParentDeathSignal(): Promise<boolean> {
  return (await parentDeathLauncher()) !== undefined;
}

async function findLauncher(): Promise<string | undefined> {
  if (process.platform !== "linux") return undefined;
  const setpriv = await whichOnPath(process.env.PATH)("setpriv");
  if (setpriv === undefined) return undefined;
  try {
    const { stdout } = await execProgram(setpriv, ["--help"], { timeoutMs: 5_000 });
    return stdout.includes("--pdeathsig") ? setpriv : undefined;
  } catch {
    return undefined;
  }
}
