import { describe, expect, it } from "vitest";
import { judgeLock, type ProcessProbe, parseLock, type StoreLockRecord } from "./lock.js";

const STORE = "/data/nats";
const OWNER = 100;
const NATS = 200;

/** A machine where exactly these pids run, and these of them are nats-servers on STORE. */
function machine(running: number[], serving: number[] = []): ProcessProbe {
  return {
    running: (pid) => running.includes(pid),
    servesStore: (pid, storeDir) => storeDir === STORE && serving.includes(pid) && running.includes(pid),
  };
}

const lock = (fields: Partial<StoreLockRecord> = {}): StoreLockRecord => ({
  token: "t",
  ownerPid: OWNER,
  natsPid: NATS,
  storeDir: STORE,
  startedAt: "2025-01-01T00:00:00.000Z",
  ...fields,
});

describe("judgeLock", () => {
  it("calls the store in use while its server and the server's starter both run", () => {
    expect(judgeLock(lock(), STORE, machine([OWNER, NATS], [NATS]))).toBe("in-use");
  });

  it("calls the server an orphan when it runs but its starter is gone", () => {
    expect(judgeLock(lock(), STORE, machine([NATS], [NATS]))).toBe("orphaned");
  });

  it("frees the store when the server is gone, whether or not its starter runs", () => {
    expect(judgeLock(lock(), STORE, machine([OWNER]))).toBe("free");
    expect(judgeLock(lock(), STORE, machine([]))).toBe("free");
  });

  it("frees the store when its starter is gone and the server's pid now belongs to some other process", () => {
    expect(judgeLock(lock(), STORE, machine([NATS], []))).toBe("free");
  });

  it("never frees a running server's store while its starter lives, whatever its command line says", () => {
    // A server given another spelling of the store (a symlink) does not match it by text.
    expect(judgeLock(lock(), STORE, machine([OWNER, NATS], []))).toBe("in-use");
  });

  it("treats a lock without a server pid as a start in progress while its starter runs", () => {
    const starting = lock({ natsPid: undefined });
    expect(judgeLock(starting, STORE, machine([OWNER]))).toBe("in-use");
    expect(judgeLock(starting, STORE, machine([]))).toBe("free");
  });

  it("frees the store when the lock cannot be read", () => {
    expect(judgeLock(undefined, STORE, machine([OWNER, NATS], [NATS]))).toBe("free");
  });
});

describe("parseLock", () => {
  it("reads what a holder writes", () => {
    expect(parseLock(`${JSON.stringify(lock({ port: 4222 }))}\n`)).toEqual(lock({ port: 4222 }));
  });

  it("rejects a damaged or foreign file rather than guessing a pid from it", () => {
    expect(parseLock("")).toBeUndefined();
    expect(parseLock('{"token":"t","ownerPid":100,"natsP')).toBeUndefined();
    expect(parseLock("null")).toBeUndefined();
    expect(parseLock(JSON.stringify({ ...lock(), ownerPid: "100" }))).toBeUndefined();
    expect(parseLock(JSON.stringify({ ...lock(), natsPid: -1 }))).toBeUndefined();
    expect(parseLock(JSON.stringify({ ...lock(), token: undefined }))).toBeUndefined();
  });
});
