import { KeyChangedError } from "./errors.js";
import type { KeyValue } from "./model.js";

export interface LeaseOptions {
  kv: KeyValue;
  /** What is leased, as a KV key, e.g. "projector.projector". */
  key: string;
  /** This process. Unique per process: a restart is a new holder and waits like any other. */
  holder: string;
  /** A lease nobody renews for this long is free. It is renewed every third of it. */
  leaseMs: number;
  /** Monotonic milliseconds (performance.now by default). */
  now?: () => number;
}

/** What a lease tells its owner. Called synchronously; the owner does the work. */
export interface LeaseHandlers {
  acquired(): void;
  lost(): void;
}

/** The record in the bucket, for whoever looks at it with `nats kv get`. */
interface LeaseRecord {
  holder: string;
  lease_ms: number;
  renewed_at: string;
}

/**
 * A lease in a JetStream KV bucket: at most one holder at a time, the others standing by.
 *
 * The holder renews by compare-and-set on the key's revision; a renewal that finds
 * another revision has lost the lease, and so has a holder that could not renew for
 * `leaseMs`. A standby takes the lease once it has seen the same revision for `leaseMs`
 * on its own clock, so the machines' clocks need not agree; a holder that lets go
 * (`stop`) deletes the key and the standby takes it on its next look.
 *
 * A lease narrows, but cannot close, the window in which a paused holder still acts
 * while another has taken over (a process stopped between its check and its write): what
 * it guards must tolerate a late write from a former holder.
 */
export class Lease {
  private handlers: LeaseHandlers | undefined;
  private revision = 0;
  /** When the last write that succeeded was sent. */
  private renewedAt = 0;
  private seen: { revision: number; since: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private stopped = false;
  private holding = false;
  /** Who holds the lease, as last seen in the bucket; undefined when nobody does. */
  holderSeen: string | undefined;
  private readonly now: () => number;

  constructor(private readonly options: LeaseOptions) {
    this.now = options.now ?? (() => performance.now());
  }

  /** True while this process holds the lease and has renewed it within `leaseMs`. */
  get held(): boolean {
    return this.holding && this.now() - this.renewedAt < this.options.leaseMs;
  }

  /** Looks once (taking the lease if it is free), then keeps looking or renewing. */
  async start(handlers: LeaseHandlers): Promise<void> {
    this.handlers = handlers;
    await this.tick();
    this.schedule();
  }

  /** Stops renewing and lets go, so a standby need not wait out the lease. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.ticking;
    if (!this.holding) return;
    this.holding = false;
    await this.options.kv.delete(this.options.key, { revision: this.revision }).catch(() => undefined);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.ticking = this.tick().finally(() => {
        this.ticking = undefined;
        this.schedule();
      });
    }, this.options.leaseMs / 3);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.holding) await this.renew();
    else await this.tryAcquire();
  }

  private async renew(): Promise<void> {
    const { kv, key, leaseMs } = this.options;
    const sentAt = this.now();
    try {
      this.revision = await kv.update(key, this.record(), this.revision);
      this.renewedAt = sentAt;
    } catch (error) {
      if (error instanceof KeyChangedError || sentAt - this.renewedAt >= leaseMs) this.lose();
    }
  }

  private async tryAcquire(): Promise<void> {
    const { kv, key, leaseMs, holder } = this.options;
    try {
      const entry = await kv.get(key);
      const sentAt = this.now();
      if (entry === undefined) {
        this.holderSeen = undefined;
        this.won(await kv.create(key, this.record()), sentAt);
        return;
      }
      const current = JSON.parse(entry.value) as LeaseRecord;
      this.holderSeen = current.holder;
      // Still ours: nobody wrote since this process last held it (a renewal it could not send).
      if (current.holder === holder) {
        this.won(await kv.update(key, this.record(), entry.revision), sentAt);
        return;
      }
      if (this.seen?.revision !== entry.revision) {
        this.seen = { revision: entry.revision, since: sentAt };
        return;
      }
      if (sentAt - this.seen.since >= leaseMs) {
        this.won(await kv.update(key, this.record(), entry.revision), sentAt);
      }
    } catch {
      // Another standby got there first, or NATS is away: look again next time.
    }
  }

  private won(revision: number, sentAt: number): void {
    this.revision = revision;
    this.renewedAt = sentAt;
    this.holding = true;
    this.seen = undefined;
    this.holderSeen = this.options.holder;
    this.handlers?.acquired();
  }

  private lose(): void {
    this.holding = false;
    this.holderSeen = undefined;
    this.handlers?.lost();
  }

  private record(): string {
    const record: LeaseRecord = {
      holder: this.options.holder,
      lease_ms: this.options.leaseMs,
      renewed_at: new Date().toISOString(),
    };
    return JSON.stringify(record);
  }
}
