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

  /** Stops beating and says goodbye, so nobody waits three beats to know. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.kv.delete(keyOf(this.gatewayId)).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    await this.kv.put(
      keyOf(this.gatewayId),
      JSON.stringify({ beatMs: this.clock(), heartbeatMs: this.heartbeatMs }),
    );
  }
}

function keyOf(gatewayId: string): string {
  return Buffer.from(gatewayId, "utf8").toString("base64url");
}
