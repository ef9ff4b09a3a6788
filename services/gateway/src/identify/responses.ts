import { type KeyValue, type SwitchError, Switched } from "@holdfast/bus";

const MAX_ID_LENGTH = 256;

// How long a follow-up waits for a response id that no gateway has published yet: the
// gateway that served it writes it as soon as it sees the id, before the client has the
// whole answer, so only a race with that write is worth waiting out.
const UNKNOWN_GRACE_MS = 100;

/**
 * Which run produced each response (OpenAI Responses' `previous_response_id`), across
 * every gateway: the gateway that serves a response writes response → run to a KV
 * bucket as soon as the provider names the response (before the client has all of it),
 * and keeps it in a bounded local map; while other gateways are alive each also watches
 * the bucket into its map, so a follow-up is resolved from memory whichever gateway it
 * reaches. A miss costs one KV read, and (watching) a short wait in case the write is
 * still on its way.
 */
export class ResponseIndex {
  private readonly local = new Map<string, string>();
  private readonly waiting = new Map<string, Set<(runId: string) => void>>();
  private readonly watching: Switched;
  private readonly maxLocal: number;
  private readonly graceMs: number;

  constructor(
    private readonly kv: KeyValue,
    /** Writes a key of the bucket (Bus.putValue: a put through the bus's publisher). */
    private readonly put: (key: string, value: string) => Promise<void>,
    options: { maxLocal?: number; graceMs?: number; onError?: SwitchError } = {},
  ) {
    this.maxLocal = options.maxLocal ?? 100_000;
    this.graceMs = options.graceMs ?? UNKNOWN_GRACE_MS;
    this.watching = new Switched(
      async () => {
        const watch = await this.kv.watch({ updatesOnly: true });
        void (async () => {
          for await (const entry of watch) {
            if (entry.value !== undefined) this.keep(responseIdOf(entry.key), entry.value);
          }
        })().catch(() => undefined);
        return () => watch.stop();
      },
      options.onError ?? (() => undefined),
    );
  }

  /**
   * Starts or stops hearing what other gateways write, into the local map. Off (a gateway
   * alone in the fleet), a response another gateway recorded is read from the bucket when
   * it is asked for.
   */
  watch(on: boolean): Promise<void> {
    return this.watching.set(on);
  }

  stop(): Promise<void> {
    return this.watching.close();
  }

  /** The run that produced `responseId`, or undefined when no gateway recorded it. */
  async runOf(responseId: string): Promise<string | undefined> {
    if (responseId.length === 0 || responseId.length > MAX_ID_LENGTH) return undefined;
    const local = this.local.get(responseId);
    if (local !== undefined) return local;
    const entry = await this.kv.get(keyOf(responseId));
    if (entry !== undefined) {
      const runId = entry.value;
      this.keep(responseId, runId);
      return runId;
    }
    // The watch may have brought it while the read was out; if not, give it a moment. With
    // no other gateway alive (no watch wanted), nobody else can be writing it.
    const known = this.local.get(responseId);
    if (known !== undefined || !this.watching.wanted) return known;
    return this.arrival(responseId);
  }

  /** The run of `responseId` if the watch brings it within the grace period. */
  private arrival(responseId: string): Promise<string | undefined> {
    return new Promise((resolve) => {
      let waiters = this.waiting.get(responseId);
      if (waiters === undefined) {
        waiters = new Set();
        this.waiting.set(responseId, waiters);
      }
      const found = (runId: string | undefined) => {
        clearTimeout(timer);
        waiters.delete(found);
        if (waiters.size === 0) this.waiting.delete(responseId);
        resolve(runId);
      };
      const timer = setTimeout(() => found(this.local.get(responseId)), this.graceMs);
      waiters.add(found);
    });
  }

  /** Records that `responseId` belongs to `runId`; not awaited on the client's path. */
  async remember(responseId: string, runId: string): Promise<void> {
    if (responseId.length === 0 || responseId.length > MAX_ID_LENGTH) return;
    this.keep(responseId, runId);
    await this.put(keyOf(responseId), runId);
  }

  private keep(responseId: string, runId: string): void {
    this.local.delete(responseId);
    this.local.set(responseId, runId);
    const waiters = this.waiting.get(responseId);
    if (waiters !== undefined) for (const waiter of [...waiters]) waiter(runId);
    if (this.local.size > this.maxLocal) {
      const oldest = this.local.keys().next().value;
      if (oldest !== undefined) this.local.delete(oldest);
    }
  }
}

// Response ids come from clients (previous_response_id): never raw into a key (a subject).
function keyOf(responseId: string): string {
  return Buffer.from(responseId, "utf8").toString("base64url");
}

function responseIdOf(key: string): string {
  return Buffer.from(key, "base64url").toString("utf8");
}
