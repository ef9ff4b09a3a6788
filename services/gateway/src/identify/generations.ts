import type { KeyValue } from "@holdfast/bus";
import { type RunState, scopedRunId } from "@holdfast/events";

export interface GenerationsOptions {
  /** The shared pointer store: fingerprint → current generation. */
  kv: KeyValue;
  /** The run as the gateway knows it (read from the log when not in memory). */
  runState: (runId: string) => Promise<RunState>;
  clock: () => number;
  idleMs: number;
  /** Fingerprints whose pointer is kept in memory; the least recently used go first. */
  maxCached?: number;
}

export interface Generation {
  runId: string;
  generation: number;
}

/** The run of a fingerprint's generation, within its tenant (`<tenant>/fp-…` for a tenant's). */
export function fingerprintRunId(fingerprint: string, generation: number, tenant = ""): string {
  return scopedRunId(tenant, `fp-${fingerprint}-${generation}`);
}

/**
 * Splits a fingerprinted agent into generations, one run each. Within one agent loop the
 * message count only grows, so a call with fewer messages than the previous one is a new
 * invocation (a cron job, a re-run); so is a call after `idleMs` of silence.
 *
 * The current generation of each fingerprint is a small pointer in a key-value bucket,
 * advanced with compare-and-set so gateways racing on the same agent agree; everything
 * else the decision needs (last message count, last activity) comes from the run's own
 * events.
 */
export class Generations {
  // Bounded, and kept current by a watch on the bucket: a generation another gateway
  // started is known here as soon as it is written.
  private readonly known = new Map<string, { generation: number; revision: number }>();
  private stopWatch: (() => void) | undefined;

  constructor(private readonly options: GenerationsOptions) {}

  async start(): Promise<void> {
    const watch = await this.options.kv.watch({ updatesOnly: true });
    this.stopWatch = () => watch.stop();
    void (async () => {
      for await (const entry of watch) {
        const cached = this.known.get(entry.key);
        if (cached === undefined || entry.revision <= cached.revision) continue;
        if (entry.value !== undefined)
          this.remember(entry.key, { generation: Number(entry.value), revision: entry.revision });
        else this.known.delete(entry.key);
      }
    })();
  }

  stop(): void {
    this.stopWatch?.();
  }

  /** The run of `fingerprint`'s current generation, or of a new one; `tenant`'s (its fingerprint is its own). */
  async resolve(fingerprint: string, messageCount: number, tenant = ""): Promise<Generation> {
    let pointer = this.known.get(fingerprint) ?? (await this.read(fingerprint));
    if (pointer.generation > 0) {
      const runId = fingerprintRunId(fingerprint, pointer.generation, tenant);
      const state = await this.options.runState(runId);
      if (!this.startsNewGeneration(state, messageCount)) return { runId, generation: pointer.generation };
    }
    pointer = await this.advance(fingerprint, pointer);
    return {
      runId: fingerprintRunId(fingerprint, pointer.generation, tenant),
      generation: pointer.generation,
    };
  }

  private startsNewGeneration(state: RunState, messageCount: number): boolean {
    if (state.started === 0) return false;
    if (messageCount < state.lastMessageCount) return true;
    return state.lastSeenMs !== null && this.options.clock() - state.lastSeenMs > this.options.idleMs;
  }

  private remember(fingerprint: string, pointer: { generation: number; revision: number }): void {
    this.known.delete(fingerprint);
    this.known.set(fingerprint, pointer);
    if (this.known.size > (this.options.maxCached ?? 100_000)) {
      const oldest = this.known.keys().next().value;
      if (oldest !== undefined) this.known.delete(oldest);
    }
  }

  private async read(fingerprint: string): Promise<{ generation: number; revision: number }> {
    const entry = await this.options.kv.get(fingerprint);
    const pointer =
      entry === undefined
        ? { generation: 0, revision: 0 }
        : { generation: Number(entry.value), revision: entry.revision };
    this.remember(fingerprint, pointer);
    return pointer;
  }

  /** Moves the pointer one generation on, unless another gateway already did. */
  private async advance(
    fingerprint: string,
    from: { generation: number; revision: number },
  ): Promise<{ generation: number; revision: number }> {
    const next = String(from.generation + 1);
    try {
      const revision =
        from.revision === 0
          ? await this.options.kv.create(fingerprint, next)
          : await this.options.kv.update(fingerprint, next, from.revision);
      const pointer = { generation: from.generation + 1, revision };
      this.remember(fingerprint, pointer);
      return pointer;
    } catch {
      // Lost the race: whoever won started the new generation; join it.
      return this.read(fingerprint);
    }
  }
}
