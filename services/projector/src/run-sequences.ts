/** Reads where each run's fold stands in the tables, before a stream sequence. */
export type ReadRunSequences = (runIds: readonly string[], before: number) => Promise<Map<string, number>>;

/** Runs whose projected sequence is kept in memory (about 100 bytes each). */
export const RUN_SEQUENCES_KEPT = 100_000;

/**
 * Where each run's fold stands in the tables (the last run sequence projected), as of the
 * projector's checkpoint: what a batch's events are checked against (each must be its run's
 * next). Kept in memory from one batch to the next, so a batch reads from ClickHouse only
 * the runs it has not met yet, instead of every run it holds (a query whose cost grew with
 * each run's length: all of a run's rows were read to find their last).
 *
 * Valid only at the checkpoint it was committed at: a batch that starts anywhere else (a
 * new stint, a checkpoint read again after a failure that moved it) reads every run again.
 */
export class RunSequences {
  private readonly known = new Map<string, number>();
  /** The checkpoint `known` describes (-1: none). */
  private through = -1;

  constructor(
    private readonly read: ReadRunSequences,
    private readonly kept = RUN_SEQUENCES_KEPT,
  ) {}

  /**
   * The last projected sequence of each run (0 for a run with none), for a batch that
   * follows `checkpoint` and begins at stream sequence `before`.
   */
  async lookup(runIds: readonly string[], checkpoint: number, before: number): Promise<Map<string, number>> {
    if (this.through !== checkpoint) {
      this.known.clear();
      this.through = checkpoint;
    }
    const missing = runIds.filter((id) => !this.known.has(id));
    const read = missing.length > 0 ? await this.read(missing, before) : undefined;
    const last = new Map<string, number>();
    for (const id of runIds) last.set(id, this.known.get(id) ?? read?.get(id) ?? 0);
    return last;
  }

  /** The batch is in every table and the checkpoint moved to `checkpoint`: its runs stand at `last`. */
  commit(last: ReadonlyMap<string, number>, checkpoint: number): void {
    for (const [id, sequence] of last) {
      // Latest used last: the oldest are the first dropped.
      this.known.delete(id);
      this.known.set(id, sequence);
    }
    for (const id of this.known.keys()) {
      if (this.known.size <= this.kept) break;
      this.known.delete(id);
    }
    this.through = checkpoint;
  }
}
