import type { KV } from "@holdfast/bus";

/** How many missed beats make a gateway dead. */
const BEATS_TO_DEATH = 3;

/**
 * Each gateway process says it is alive in a KV bucket every `heartbeatMs`. One that has
 * been silent for three beats is dead, and the calls it had in flight will never finish.
 * Keys are the base64url of the process id ("<instance id>#<boot id>"), which KV keys can
 * always hold.
 */
export class Liveness {
  private timer: NodeJS.Timeout | undefined;
  // Other gateways' last beats, as their keys were last seen (peers watch only).
  private readonly peers = new Map<string, { beatMs: number; heartbeatMs: number }>();
  private peersPresent = false;
  private onPeers: ((present: boolean) => void) | undefined;
  private stopPeers: (() => void) | undefined;

  constructor(
    private readonly kv: KV,
    /** This process: "<instance id>#<boot id>". */
    readonly gatewayId: string,
    private readonly heartbeatMs: number,
    private readonly clock: () => number,
  ) {}

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => {
      this.beat().catch(() => undefined);
      // A peer that stopped beating without saying goodbye is dead after three beats.
      this.reviewPeers();
    }, this.heartbeatMs);
    this.timer.unref();
  }

  async isAlive(gatewayId: string): Promise<boolean> {
    if (gatewayId === this.gatewayId) return true;
    const entry = await this.kv.get(keyOf(gatewayId));
    if (entry?.operation !== "PUT") return false;
    const { beatMs, heartbeatMs } = entry.json<{ beatMs: number; heartbeatMs: number }>();
    return this.clock() - beatMs < heartbeatMs * BEATS_TO_DEATH;
  }

  /**
   * Calls `onChange(true)` once another gateway is alive, and `onChange(false)` once none
   * is any more (each said goodbye, or missed three beats; noticed within a beat of this
   * one's). A gateway alone in the fleet writes its runs' calls itself: it need not read
   * them back from the log.
   */
  async watchPeers(onChange: (present: boolean) => void): Promise<void> {
    this.onPeers = onChange;
    const own = keyOf(this.gatewayId);
    // Every key's last value first, then each change as it is stored.
    const watch = await this.kv.watch();
    this.stopPeers = () => watch.stop();
    void (async () => {
      for await (const entry of watch) {
        if (entry.key === own) continue;
        if (entry.operation === "PUT") {
          const beat = beatOf(entry);
          if (beat === undefined) this.peers.delete(entry.key);
          else this.peers.set(entry.key, beat);
        } else {
          this.peers.delete(entry.key);
        }
        this.reviewPeers();
      }
    })();
  }

  /** Whether another gateway is alive, as this one last saw the fleet. */
  get peersAlive(): boolean {
    return this.peersPresent;
  }

  private reviewPeers(): void {
    if (this.onPeers === undefined) return;
    const now = this.clock();
    let present = false;
    for (const [key, { beatMs, heartbeatMs }] of this.peers) {
      if (now - beatMs < heartbeatMs * BEATS_TO_DEATH) present = true;
      // Long dead: forgotten (its key stays in the bucket until someone reaps it).
      else if (now - beatMs > heartbeatMs * BEATS_TO_DEATH * 10) this.peers.delete(key);
    }
    if (present === this.peersPresent) return;
    this.peersPresent = present;
    this.onPeers(present);
  }

  /** Stops beating and says goodbye, so nobody waits three beats to know. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.stopPeers?.();
    this.onPeers = undefined;
    await this.kv.delete(keyOf(this.gatewayId)).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    await this.kv.put(
      keyOf(this.gatewayId),
      JSON.stringify({ beatMs: this.clock(), heartbeatMs: this.heartbeatMs }),
    );
  }
}

/** A gateway's last beat as its key holds it; undefined for a value that is not one. */
function beatOf(entry: { json<T>(): T }): { beatMs: number; heartbeatMs: number } | undefined {
  try {
    const { beatMs, heartbeatMs } = entry.json<{ beatMs: unknown; heartbeatMs: unknown }>();
    if (typeof beatMs !== "number" || typeof heartbeatMs !== "number") return undefined;
    if (!Number.isFinite(beatMs) || !Number.isFinite(heartbeatMs)) return undefined;
    return { beatMs, heartbeatMs };
  } catch {
    return undefined;
  }
}

function keyOf(gatewayId: string): string {
  return Buffer.from(gatewayId, "utf8").toString("base64url");
}
