import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NatsStoreInUseError } from "./errors.js";
import { readServerInfo } from "./info.js";
import { ensureNatsServer } from "./install.js";
import { commandLine, STORE_LOCK_FILE, type StoreLockRecord, systemProbe } from "./lock.js";
import { supportsParentDeathSignal } from "./parent-death.js";
import { startNatsServer } from "./start.js";

// These tests kill the process that started a server, as `kill -9` of `holdfast up` does;
// that process is owner.ts, run from source in a child process.
const LOADER = new URL("./testing/ts-loader.mjs", import.meta.url).href;
const OWNER = fileURLToPath(new URL("./testing/owner.ts", import.meta.url));
const run = promisify(execFile);

let binary: string;
let scratch: string;
const children: ChildProcess[] = [];
const strays: number[] = [];

beforeAll(async () => {
  binary = (await ensureNatsServer()).path;
  scratch = await mkdtemp(join(tmpdir(), "natsd-lock-"));
});

afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
  for (const pid of strays.splice(0)) {
    if (systemProbe.running(pid)) process.kill(pid, "SIGKILL");
  }
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

async function freshStore(name: string): Promise<string> {
  const storeDir = join(scratch, name, "nats");
  await mkdir(storeDir, { recursive: true });
  return storeDir;
}

/** Starts owner.ts, which starts a nats-server on `storeDir`, and waits for the server's pid. */
async function startOwner(storeDir: string, extra: { dieWithParent?: boolean } = {}) {
  const options = { binary, storeDir, logFile: join(storeDir, "..", "nats.log"), ...extra };
  const owner = spawn(process.execPath, ["--import", LOADER, OWNER, JSON.stringify(options)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(owner);
  let stdout = "";
  let stderr = "";
  owner.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  owner.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const line = await until(
    () => stdout.split("\n").find((l) => l.startsWith("{")),
    30_000,
    () => {
      return `owner printed no server (exit ${owner.exitCode}): ${stderr}`;
    },
  );
  const server = JSON.parse(line) as { pid: number; url: string };
  strays.push(server.pid);
  return { owner, natsPid: server.pid, url: server.url };
}

async function sigkill(child: ChildProcess): Promise<void> {
  const exited = once(child, "exit");
  child.kill("SIGKILL");
  await exited;
}

/** Every running nats-server whose store is `storeDir`, as `pgrep` sees them. */
async function serversOn(storeDir: string): Promise<number[]> {
  const { stdout } = await run("pgrep", ["-f", "--", `nats-server .*-sd ${storeDir}( |$)`]).catch(
    (error: { code?: number; stdout?: string }) => {
      if (error.code === 1) return { stdout: "" };
      throw error;
    },
  );
  return stdout
    .split("\n")
    .filter((line) => line !== "")
    .map(Number)
    .filter((pid) => systemProbe.running(pid))
    .sort();
}

function readLock(storeDir: string): StoreLockRecord {
  return JSON.parse(readFileSync(join(storeDir, STORE_LOCK_FILE), "utf8")) as StoreLockRecord;
}

async function until<T>(probe: () => T | undefined, timeoutMs: number, message: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(message());
    await sleep(25);
  }
}

describe("the store-dir lock", () => {
  it("refuses a second server on a store whose server and starter are alive, naming both", async () => {
    const storeDir = await freshStore("in-use");
    await using first = await startNatsServer({ binary, storeDir });

    const second = startNatsServer({ binary, storeDir });
    await expect(second).rejects.toBeInstanceOf(NatsStoreInUseError);
    await expect(second).rejects.toMatchObject({
      code: "HOLDFAST_NATSD_STORE_IN_USE",
      natsPid: first.pid,
      ownerPid: process.pid,
      storeDir,
      message: expect.stringContaining(`nats-server pid ${first.pid}`),
    });
    await expect(second).rejects.toThrow(storeDir);

    expect(await serversOn(storeDir)).toEqual([first.pid]);
    await expect(readServerInfo(first.url)).resolves.toMatchObject({ jetstream: true });
    expect(readLock(storeDir)).toMatchObject({ natsPid: first.pid, ownerPid: process.pid, port: first.port });
  });

  it("is released when the server stops, and when it dies, so a restart on the store works", async () => {
    const storeDir = await freshStore("released");
    const stopped = await startNatsServer({ binary, storeDir });
    await stopped.stop();
    expect(existsSync(join(storeDir, STORE_LOCK_FILE))).toBe(false);

    const killed = await startNatsServer({ binary, storeDir });
    process.kill(killed.pid, "SIGKILL");
    await killed.exited;
    expect(existsSync(join(storeDir, STORE_LOCK_FILE))).toBe(false);

    await using again = await startNatsServer({ binary, storeDir });
    expect(await serversOn(storeDir)).toEqual([again.pid]);
  });

  it("takes over a lock whose server and starter are both dead", async () => {
    const storeDir = await freshStore("stale");
    const { owner, natsPid } = await startOwner(storeDir, { dieWithParent: false });
    await sigkill(owner);
    process.kill(natsPid, "SIGKILL");
    await until(
      () => !systemProbe.running(natsPid),
      10_000,
      () => "nats-server survived SIGKILL",
    );
    expect(readLock(storeDir).natsPid).toBe(natsPid);

    await using server = await startNatsServer({ binary, storeDir });
    expect(readLock(storeDir)).toMatchObject({ natsPid: server.pid, ownerPid: process.pid });
    expect(await serversOn(storeDir)).toEqual([server.pid]);
  });

  it("takes over a lock whose server pid now belongs to another program, and leaves that program alone", async () => {
    const storeDir = await freshStore("reused");
    const other = spawn("sleep", ["60"], { stdio: "ignore" });
    children.push(other);
    const stale: StoreLockRecord = {
      token: "left-by-a-dead-supervisor",
      ownerPid: 2 ** 22 + 1, // above Linux's pid_max: certainly not running
      natsPid: other.pid!,
      storeDir,
      startedAt: new Date().toISOString(),
    };
    writeFileSync(join(storeDir, STORE_LOCK_FILE), JSON.stringify(stale));

    await using server = await startNatsServer({ binary, storeDir });
    expect(readLock(storeDir).natsPid).toBe(server.pid);
    expect(other.exitCode).toBeNull();
    expect(systemProbe.running(other.pid!)).toBe(true);
  });

  it("stops a server its killed starter left behind and starts one in its place", async () => {
    const storeDir = await freshStore("orphan");
    const { owner, natsPid, url } = await startOwner(storeDir, { dieWithParent: false });
    await sigkill(owner);
    // The bug this lock is for: the server outlives its starter and keeps the store open.
    expect(systemProbe.running(natsPid)).toBe(true);
    await expect(readServerInfo(url)).resolves.toMatchObject({ jetstream: true });

    const refused = startNatsServer({ binary, storeDir, takeOverOrphan: false });
    await expect(refused).rejects.toMatchObject({
      code: "HOLDFAST_NATSD_STORE_IN_USE",
      natsPid,
      ownerPid: owner.pid,
      message: expect.stringMatching(new RegExp(`pid ${natsPid}.*which is gone`)),
    });
    expect(systemProbe.running(natsPid)).toBe(true);

    const said: string[] = [];
    await using server = await startNatsServer({ binary, storeDir, log: (line) => said.push(line) });
    expect(said.join("\n")).toContain(`nats-server pid ${natsPid} outlived the process that started it`);
    expect(server.pid).not.toBe(natsPid);
    expect(systemProbe.running(natsPid)).toBe(false);
    expect(await serversOn(storeDir)).toEqual([server.pid]);
    expect(readLock(storeDir)).toMatchObject({ natsPid: server.pid, ownerPid: process.pid });
  });

  it("is one lock for one store however its path is spelled: through a symlink", async () => {
    const real = await freshStore("symlinked");
    const link = join(scratch, "symlinked", "nats-link");
    await symlink(real, link);
    await using first = await startNatsServer({ binary, storeDir: link });
    expect(first.storeDir).toBe(real);

    const second = startNatsServer({ binary, storeDir: real });
    await expect(second).rejects.toMatchObject({
      code: "HOLDFAST_NATSD_STORE_IN_USE",
      natsPid: first.pid,
      storeDir: real,
    });
    await expect(startNatsServer({ binary, storeDir: link })).rejects.toBeInstanceOf(NatsStoreInUseError);
    expect(await serversOn(real)).toEqual([first.pid]);
    expect(await serversOn(link)).toEqual([]);
    expect(readLock(real)).toMatchObject({ natsPid: first.pid, ownerPid: process.pid, storeDir: real });
  });

  it("is one lock for one store however its path is spelled: a trailing slash, a `..`", async () => {
    const storeDir = await freshStore("spelled");
    // `hop/..` is the store's parent for the kernel (hop leads into the store), not `spelled/`.
    const hop = join(scratch, "spelled", "hop");
    await mkdir(join(storeDir, "sub"));
    await symlink(join(storeDir, "sub"), hop);
    await using first = await startNatsServer({ binary, storeDir: `${storeDir}/` });
    expect(first.storeDir).toBe(storeDir);
    const spellings = [
      storeDir,
      `${storeDir}//`,
      join(storeDir, "..", "nats"),
      `${storeDir}/./`,
      `${hop}/..`,
    ];
    for (const spelling of spellings) {
      await expect(startNatsServer({ binary, storeDir: spelling })).rejects.toMatchObject({
        code: "HOLDFAST_NATSD_STORE_IN_USE",
        natsPid: first.pid,
      });
    }
    expect(await serversOn(storeDir)).toEqual([first.pid]);
    expect(readLock(storeDir).natsPid).toBe(first.pid);
  });

  it("knows an orphan that was given the store through a symlink, and does not start beside it", async () => {
    const real = await freshStore("orphan-symlinked");
    const link = join(scratch, "orphan-symlinked", "nats-link");
    await symlink(real, link);
    // A server started on the link's spelling whose starter is gone (as before paths were canonical).
    const orphan = spawn(binary, ["-js", "-sd", link, "-a", "127.0.0.1", "-p", "-1"], { stdio: "ignore" });
    children.push(orphan);
    const stale: StoreLockRecord = {
      token: "left-by-a-dead-supervisor",
      ownerPid: 2 ** 22 + 1, // above Linux's pid_max: certainly not running
      natsPid: orphan.pid!,
      storeDir: link,
      startedAt: new Date().toISOString(),
    };
    writeFileSync(join(real, STORE_LOCK_FILE), JSON.stringify(stale));

    await expect(startNatsServer({ binary, storeDir: real, takeOverOrphan: false })).rejects.toMatchObject({
      code: "HOLDFAST_NATSD_STORE_IN_USE",
      natsPid: orphan.pid,
      message: expect.stringContaining("which is gone"),
    });
    expect(systemProbe.running(orphan.pid!)).toBe(true);
    expect(await serversOn(real)).toEqual([]);
  });

  it("reads a server's command line through ps where there is no /proc", async () => {
    const storeDir = await freshStore("ps");
    await using server = await startNatsServer({ binary, storeDir });
    const [line] = commandLine(server.pid, "darwin") ?? [];
    expect(line).toContain(`-sd ${storeDir} `);
    expect(commandLine(2 ** 22 + 1, "darwin")).toEqual([]);
  });
});

describe("a server and the process that started it", () => {
  it("dies with it when setpriv can arrange that, and is otherwise taken over by the next start", async () => {
    const storeDir = await freshStore("parent-death");
    const { owner, natsPid } = await startOwner(storeDir);
    await sigkill(owner);

    if (await supportsParentDeathSignal()) {
      await until(
        () => !systemProbe.running(natsPid),
        15_000,
        () => `nats-server ${natsPid} outlived its parent`,
      );
      expect(await serversOn(storeDir)).toEqual([]);
    } else {
      // No prctl from Node without setpriv: the lock is what keeps the store single-server.
      await using server = await startNatsServer({ binary, storeDir });
      expect(await serversOn(storeDir)).toEqual([server.pid]);
    }
  });
});
