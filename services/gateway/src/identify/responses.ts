import type { KV } from "@holdfast/bus";

/** Responses are kept by OpenAI for 30 days; so is the run each one belongs to. */
export const RESPONSE_TTL_MS = 30 * 24 * 60 * 60 * 1000;
const MAX_ID_LENGTH = 256;

/**
 * Which run produced each response (OpenAI Responses' `previous_response_id`), across
 * every gateway: the gateway that records a response's outcome writes response → run to a
 * KV bucket, and every gateway watches the bucket into a bounded local map, so a
 * follow-up is resolved from memory whichever gateway it reaches. A miss (a response older
 * than this process) costs one KV read.
 */
export class ResponseIndex {
  private readonly local = new Map<string, string>();
  private stopWatch: (() => void) | undefined;

  constructor(
    private readonly kv: KV,
    private readonly maxLocal = 100_000,
  ) {}

  async start(): Promise<void> {
    const watch = await this.kv.watch({ include: "updates" });
    this.stopWatch = () => watch.stop();
    void (async () => {
      for await (const entry of watch) {
        if (entry.operation === "PUT") this.keep(responseIdOf(entry.key), entry.string());
      }
    })();
  }

  stop(): void {
    this.stopWatch?.();
  }

  /** The run that produced `responseId`, or undefined when no gateway recorded it. */
  async runOf(responseId: string): Promise<string | undefined> {
    if (responseId.length === 0 || responseId.length > MAX_ID_LENGTH) return undefined;
    const known = this.local.get(responseId);
    if (known !== undefined) return known;
    const entry = await this.kv.get(keyOf(responseId));
    if (entry?.operation !== "PUT") return undefined;
    const runId = entry.string();
    this.keep(responseId, runId);
    return runId;
  }

  /** Records that `responseId` belongs to `runId` (after the answer; not on the client's path). */
  async remember(responseId: string, runId: string): Promise<void> {
    if (responseId.length === 0 || responseId.length > MAX_ID_LENGTH) return;
    this.keep(responseId, runId);
    await this.kv.put(keyOf(responseId), runId);
  }

  private keep(responseId: string, runId: string): void {
    this.local.delete(responseId);
    this.local.set(responseId, runId);
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
