import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { linkSync, readFileSync, realpathSync, renameSync, unlinkSync, writeFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { NatsStoreInUseError } from "./errors.js";

/** Lives in the store dir itself, so whatever opens the store sees it. */
export const STORE_LOCK_FILE = "holdfast-nats.lock";

/** The lock file's content. */
export interface StoreLockRecord {
  /** Tells this holder's lock from a later one, so a release never removes someone else's. */
  readonly token: string;
  /** The process that started the server and is responsible for stopping it. */
  readonly ownerPid: number;
  /** Missing only between taking the lock and spawning the server. */
  readonly natsPid?: number;
  readonly port?: number;
  readonly storeDir: string;
  readonly startedAt: string;
}

/** What can be seen of other processes; tests replace it to decide locks without any. */
export interface ProcessProbe {
  /** A process with this pid exists and has not exited (a zombie has). */
  running(pid: number): boolean;
  /**
   * The pid is a running nats-server on `storeDir` (canonical), however the server was told
   * its store's path. Where the command line cannot be read this falls back to `running`,
   * so a reused pid is then taken for the server.
   */
  servesStore(pid: number, storeDir: string): boolean;
}

/**
 * `free`: nobody uses the store (no lock, or one whose server is gone). `in-use`: a server
 * runs on it, or is being started, by a process that is still alive. `orphaned`: a server
 * runs on it but the process that started it is gone (it was killed and its child lived on).
 */
export type LockVerdict = "free" | "in-use" | "orphaned";

/**
 * While the starter lives, its lock holds as long as the server's pid runs: only the
 * starter releases it, and it does so the moment its server exits. A server's command
 * line is consulted only once the starter is gone, to tell an orphan from a reused pid.
 */
export function judgeLock(
  record: StoreLockRecord | undefined,
  storeDir: string,
  probe: ProcessProbe,
): LockVerdict {
  // Unreadable: every write is an atomic link or rename, so this is damage, not a write in progress.
  if (record === undefined) return "free";
  if (record.natsPid === undefined) return probe.running(record.ownerPid) ? "in-use" : "free";
  if (probe.running(record.ownerPid)) return probe.running(record.natsPid) ? "in-use" : "free";
  return probe.servesStore(record.natsPid, storeDir) ? "orphaned" : "free";
}

export interface StoreLock {
  readonly path: string;
  /** Adds the server's pid or port. Synchronous, so the pid is on disk before anything else runs. */
  record(fields: { natsPid?: number; port?: number }): void;
  /** Removes the lock if it is still this holder's. Synchronous and safe to call more than once. */
  release(): void;
}

export interface AcquireStoreLockOptions {
  /** Stop a server whose owner is gone and take its place, instead of refusing. */
  readonly takeOverOrphan: boolean;
  /** How long an orphan gets after SIGTERM before it is sent SIGKILL. */
  readonly stopTimeoutMs: number;
  readonly log?: (line: string) => void;
  readonly probe?: ProcessProbe;
}

const ATTEMPTS = 10;

/**
 * Takes the store dir's lock for this process, or throws `NatsStoreInUseError`. The lock
 * appears with a hard link of a fully written file, which fails when one exists: as
 * exclusive as O_EXCL, and nobody ever reads a half-written lock. The store dir must
 * exist; it is judged by its canonical path (`canonicalStoreDir`), as the server is given it.
 */
export async function acquireStoreLock(dir: string, options: AcquireStoreLockOptions): Promise<StoreLock> {
  const storeDir = canonicalStoreDir(dir);
  const path = join(storeDir, STORE_LOCK_FILE);
  const probe = options.probe ?? systemProbe;
  let mine: StoreLockRecord = {
    token: randomUUID(),
    ownerPid: process.pid,
    storeDir,
    startedAt: new Date().toISOString(),
  };
  const isMine = (text: string | undefined) => text !== undefined && parseLock(text)?.token === mine.token;

  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    if (createExclusive(path, mine)) {
      let released = false;
      return {
        path,
        record(fields) {
          if (released) return;
          mine = { ...mine, ...fields };
          if (isMine(readText(path))) writeAtomic(path, mine);
        },
        release() {
          if (released) return;
          released = true;
          removeIf(path, isMine);
        },
      };
    }
    const text = readText(path);
    if (text === undefined) continue;
    const held = parseLock(text);
    const verdict = judgeLock(held, storeDir, probe);
    if (held !== undefined && verdict !== "free") {
      const holder = { storeDir, natsPid: held.natsPid, ownerPid: held.ownerPid };
      if (verdict === "in-use") {
        throw new NatsStoreInUseError(
          held.natsPid === undefined
            ? `Store dir ${storeDir} is locked by pid ${held.ownerPid}, which is starting a nats-server on it.`
            : `Store dir ${storeDir} is in use by nats-server pid ${held.natsPid}, started by pid ` +
                `${held.ownerPid}, which is still running. Stop that first, or use another store dir.`,
          holder,
        );
      }
      if (!options.takeOverOrphan) {
        throw new NatsStoreInUseError(
          `Store dir ${storeDir} is in use by nats-server pid ${held.natsPid}, left running by pid ` +
            `${held.ownerPid}, which is gone. Stop pid ${held.natsPid} to start another server on it.`,
          holder,
        );
      }
      options.log?.(
        `nats-server pid ${held.natsPid} outlived the process that started it (pid ${held.ownerPid}) ` +
          `and still holds ${storeDir}; stopping it to start a fresh one on the same store.`,
      );
      await stopOrphan(held.natsPid!, holder, options.stopTimeoutMs, probe);
    }
    // Only the lock that was judged goes: if another starter replaced it meanwhile, it stays.
    removeIf(path, (current) => current === text);
  }
  throw new NatsStoreInUseError(
    `Store dir ${storeDir}: the lock ${path} kept changing hands over ${ATTEMPTS} attempts; ` +
      "another process is starting servers on this store.",
    { storeDir, natsPid: undefined, ownerPid: process.pid },
  );
}

export function parseLock(text: string): StoreLockRecord | undefined {
  let value: Partial<StoreLockRecord>;
  try {
    value = JSON.parse(text) as Partial<StoreLockRecord>;
  } catch {
    return undefined;
  }
  const pid = (n: unknown) => typeof n === "number" && Number.isInteger(n) && n > 0;
  if (typeof value !== "object" || value === null) return undefined;
  if (typeof value.token !== "string" || !pid(value.ownerPid)) return undefined;
  if (value.natsPid !== undefined && !pid(value.natsPid)) return undefined;
  return value as StoreLockRecord;
}

function createExclusive(path: string, record: StoreLockRecord): boolean {
  const staged = stagingPath(path);
  writeFileSync(staged, `${JSON.stringify(record)}\n`);
  try {
    linkSync(staged, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    unlinkSync(staged);
  }
}

function writeAtomic(path: string, record: StoreLockRecord): void {
  const staged = stagingPath(path);
  writeFileSync(staged, `${JSON.stringify(record)}\n`);
  renameSync(staged, path);
}

/**
 * Moves the lock aside first, so the check and the removal see the same file; a lock that
 * turns out not to be the one meant is put back (unless a newer one already took its place).
 */
function removeIf(path: string, matches: (text: string | undefined) => boolean): void {
  const aside = stagingPath(path);
  try {
    renameSync(path, aside);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  try {
    if (!matches(readText(aside))) linkSync(aside, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  } finally {
    unlinkSync(aside);
  }
}

function stagingPath(path: string): string {
  return `${path}.${process.pid}.${randomUUID()}`;
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

async function stopOrphan(
  pid: number,
  holder: { storeDir: string; natsPid: number | undefined; ownerPid: number },
  stopTimeoutMs: number,
  probe: ProcessProbe,
): Promise<void> {
  for (const [signal, waitMs] of [
    ["SIGTERM", stopTimeoutMs],
    ["SIGKILL", 5_000],
  ] as const) {
    try {
      process.kill(pid, signal);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ESRCH") return;
      throw new NatsStoreInUseError(
        `Store dir ${holder.storeDir} is held by orphaned nats-server pid ${pid}, which this user may not stop (${code}).`,
        holder,
        { cause: error },
      );
    }
    const deadline = Date.now() + waitMs;
    while (Date.now() < deadline) {
      if (!probe.running(pid)) return;
      await sleep(25);
    }
  }
  throw new NatsStoreInUseError(
    `Orphaned nats-server pid ${pid} on ${holder.storeDir} did not exit after SIGKILL.`,
    holder,
  );
}

/**
 * One path per directory, whatever the spelling (symlinks, `..`, a trailing slash): the
 * lock and the server both use it, so two spellings of one store meet the same lock. The
 * native realpath reads `..` as the kernel does, after the symlink before it.
 */
export function canonicalStoreDir(dir: string): string {
  return realpathSync.native(dir);
}

export const systemProbe: ProcessProbe = {
  running: isRunning,
  servesStore(pid, storeDir) {
    if (!isRunning(pid)) return false;
    const args = commandLine(pid);
    if (args === undefined) return true;
    // Started here the store dir is an argument of its own (`-sd <dir>`), which a server
    // started before paths were canonical may spell another way; `ps` joins them all.
    return args.some(
      (arg) =>
        arg === storeDir ||
        (isAbsolute(arg) && canonicalOrSelf(arg) === storeDir) ||
        arg.includes(` ${storeDir} `) ||
        arg.endsWith(` ${storeDir}`),
    );
  },
};

function canonicalOrSelf(path: string): string {
  try {
    return realpathSync.native(path);
  } catch {
    return path;
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
  if (process.platform !== "linux") return true;
  try {
    // The state follows the parenthesised name, which may itself contain spaces or parens.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.charAt(stat.lastIndexOf(")") + 2);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * A running process's arguments, or undefined where they cannot be read. Linux has them
 * exactly in /proc; elsewhere `ps` gives one line with them joined by spaces.
 */
export function commandLine(pid: number, platform: NodeJS.Platform = process.platform): string[] | undefined {
  if (platform === "linux") {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").slice(0, -1);
    } catch {
      // Hidden from this user (hidepid) or gone this instant: cannot tell.
      return undefined;
    }
  }
  if (platform === "win32") return undefined;
  try {
    const line = execFileSync("ps", ["-o", "command=", "-p", String(pid)], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 5_000,
    }).trim();
    return line === "" ? [] : [line];
  } catch (error) {
    // ps exits 1 when there is no such process; not being able to run it at all is different.
    return (error as { status?: number | null }).status === 1 ? [] : undefined;
  }
}
