import { describe, expect, it } from "vitest";
import { RunSequences } from "./run-sequences.js";

/** The tables as the reader sees them: each run's last sequence; every read recorded. */
function tables(runs: Record<string, number>) {
  const reads: string[][] = [];
  const read = async (ids: readonly string[]) => {
    reads.push([...ids]);
    return new Map(ids.filter((id) => id in runs).map((id) => [id, runs[id]!]));
  };
  return { reads, read };
}

describe("RunSequences", () => {
  it("reads every run of the first batch, a run with no rows at 0", async () => {
    const { reads, read } = tables({ a: 4 });
    const sequences = new RunSequences(read);
    expect(await sequences.lookup(["a", "b"], 10, 11)).toEqual(
      new Map([
        ["a", 4],
        ["b", 0],
      ]),
    );
    expect(reads).toEqual([["a", "b"]]);
  });

  it("after a batch is committed, reads only the runs it has not met", async () => {
    const { reads, read } = tables({ a: 4, c: 7 });
    const sequences = new RunSequences(read);
    await sequences.lookup(["a", "b"], 10, 11);
    sequences.commit(
      new Map([
        ["a", 6],
        ["b", 2],
      ]),
      20,
    );
    expect(await sequences.lookup(["a", "b", "c"], 20, 21)).toEqual(
      new Map([
        ["a", 6],
        ["b", 2],
        ["c", 7],
      ]),
    );
    expect(reads).toEqual([["a", "b"], ["c"]]);
  });

  it("reads every run again for a batch after another checkpoint (redelivered, a new stint)", async () => {
    const { reads, read } = tables({ a: 4 });
    const sequences = new RunSequences(read);
    await sequences.lookup(["a"], 10, 11);
    sequences.commit(new Map([["a", 6]]), 20);
    // The checkpoint was read again and says 10: what was committed at 20 describes another place.
    expect(await sequences.lookup(["a"], 10, 11)).toEqual(new Map([["a", 4]]));
    expect(reads).toEqual([["a"], ["a"]]);
  });

  it("a batch that failed before its commit leaves what was known at the checkpoint", async () => {
    const { reads, read } = tables({ a: 4 });
    const sequences = new RunSequences(read);
    await sequences.lookup(["a"], 10, 11);
    sequences.commit(new Map([["a", 6]]), 20);
    await sequences.lookup(["a"], 20, 21);
    // Not committed: tried again from the same checkpoint.
    expect(await sequences.lookup(["a"], 20, 21)).toEqual(new Map([["a", 6]]));
    expect(reads).toEqual([["a"]]);
  });

  it("keeps at most its bound, dropping the runs least recently projected, and reads a dropped one again", async () => {
    const { reads, read } = tables({ a: 1, b: 2, c: 3 });
    const sequences = new RunSequences(read, 2);
    await sequences.lookup(["a", "b", "c"], 0, 1);
    sequences.commit(
      new Map([
        ["a", 1],
        ["b", 2],
      ]),
      5,
    );
    sequences.commit(new Map([["c", 3]]), 6);
    expect(await sequences.lookup(["a", "b", "c"], 6, 7)).toEqual(
      new Map([
        ["a", 1],
        ["b", 2],
        ["c", 3],
      ]),
    );
    expect(reads).toEqual([["a", "b", "c"], ["a"]]);
  });
});
