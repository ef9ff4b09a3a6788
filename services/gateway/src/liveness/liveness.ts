import type { KeyValue } from "@holdfast/bus";

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
  // Other gateways: when each last beat, as this process saw it, and how often it beats.
  private readonly peers = new Map<string, { seenMs: number; heartbeatMs: number }>();
  private peersPresent = false;
  // The bucket's watch was lost and is not back yet: a peer is assumed meanwhile.
  private blind = false;
  // Every key's last value was in once: the fleet is judged from then on.
  private judging = false;
  private onPeers: ((present: boolean) => void) | undefined;
  private stopPeers: (() => void) | undefined;

  constructor(
    private readonly kv: KeyValue,
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

  /**
   * Whether a gateway beat within its last three beats: timed by when the server stored its
   * last beat, not by the time the beat claims (a beat dated in the future would keep a dead
   * gateway's calls in flight for ever). A value that is no beat is no sign of life.
   */
  async isAlive(gatewayId: string): Promise<boolean> {
    if (gatewayId === this.gatewayId) return true;
    const entry = await this.kv.get(keyOf(gatewayId));
    if (entry === undefined) return false;
    const heartbeatMs = heartbeatOf(entry.value);
    if (heartbeatMs === undefined) return false;
    return this.clock() - entry.storedMs < heartbeatMs * BEATS_TO_DEATH;
  }

  /**
   * Calls `onChange(true)` once another gateway is alive, and `onChange(false)` once none
   * is any more (each said goodbye, or missed three beats; noticed within a beat of this
   * one's). A gateway alone in the fleet writes its runs' calls itself: it need not read
   * them back from the log. While the bucket cannot be watched, a peer is assumed.
   */
  async watchPeers(onChange: (present: boolean) => void): Promise<void> {
    this.onPeers = onChange;
    await this.openPeers();
  }

  /** Whether another gateway is alive, as this one last saw the fleet. */
  get peersAlive(): boolean {
    return this.peersPresent;
  }

  private async openPeers(): Promise<void> {
    const own = keyOf(this.gatewayId);
    // Every key's last value first, then each change as it is stored.
    const watch = await this.kv.watch();
    this.stopPeers = () => watch.stop();
    // Nothing is judged before every key's last value is in (a gateway that starts is alone
    // until then, as it was; one whose watch was lost stays blind until then).
    let caughtUp = false;
    void (async () => {
      for await (const entry of watch) {
        if (entry.key !== own) {
          const heartbeatMs = entry.value === undefined ? undefined : heartbeatOf(entry.value);
          if (heartbeatMs === undefined) this.peers.delete(entry.key);
          else {
            // Timed by this process's clock, not by the beat's own (a peer's clock may be
            // off); a key's last value, read as the watch starts, by when it was stored.
            const seenMs = entry.update ? this.clock() : entry.storedMs;
            this.peers.set(entry.key, { seenMs, heartbeatMs });
          }
        }
        // The last of the keys' values (an empty bucket's first entry is a change).
        if (!caughtUp && entry.caughtUp) {
          caughtUp = true;
          this.blind = false;
          this.judging = true;
        }
        if (caughtUp) this.reviewPeers();
      }
    })()
      .catch(() => undefined)
      .finally(() => {
        if (this.onPeers === undefined) return;
        // The watch ended on its own (its consumer lost with a server): a peer is assumed
        // until the bucket can be watched again.
        this.blind = true;
        this.reviewPeers();
        this.rewatch();
      });
  }

  private rewatch(): void {
    const timer = setTimeout(
      () => {
        if (this.onPeers === undefined) return;
        this.peers.clear();
        this.openPeers().catch(() => this.rewatch());
      },
      Math.min(this.heartbeatMs, 1_000),
    );
    timer.unref();
  }

  private reviewPeers(): void {
    if (this.onPeers === undefined || !this.judging) return;
    const now = this.clock();
    let present = this.blind;
    for (const [key, { seenMs, heartbeatMs }] of this.peers) {
      if (now - seenMs < heartbeatMs * BEATS_TO_DEATH) present = true;
      // Long dead: forgotten (its key stays in the bucket until someone reaps it).
      else if (now - seenMs > heartbeatMs * BEATS_TO_DEATH * 10) this.peers.delete(key);
    }
    if (present === this.peersPresent) return;
    this.peersPresent = present;
    this.onPeers(present);
  }

  /** Stops beating and says goodbye, so nobody waits three beats to know. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.onPeers = undefined;
    this.stopPeers?.();
    await this.kv.delete(keyOf(this.gatewayId)).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    await this.kv.put(
      keyOf(this.gatewayId),
      JSON.stringify({ beatMs: this.clock(), heartbeatMs: this.heartbeatMs }),
    );
  }
}

// Beats further apart than this are taken to be this far apart: a value claiming a longer
// heartbeat would keep a dead gateway counted as a peer for hours.
const MAX_HEARTBEAT_MS = 10 * 60_000;

/** How often a gateway beats, as its key says; undefined for a value that is not a beat. */
function heartbeatOf(value: string): number | undefined {
  try {
    const { beatMs, heartbeatMs } = JSON.parse(value) as { beatMs: unknown; heartbeatMs: unknown };
    if (typeof beatMs !== "number" || !Number.isFinite(beatMs)) return undefined;
    if (typeof heartbeatMs !== "number" || !Number.isFinite(heartbeatMs) || heartbeatMs <= 0)
      return undefined;
    return Math.min(heartbeatMs, MAX_HEARTBEAT_MS);
  } catch {
    return undefined;
  }
}

function keyOf(gatewayId: string): string {
  return Buffer.from(gatewayId, "utf8").toString("base64url");
}
