import {
  QUARANTINE_REASONS,
  type QuarantinedEvent,
  type QuarantineReason,
  quarantinePreview,
} from "@holdfast/events";

/** What a process has set aside from the log since it started: events, in all and by reason. */
export interface QuarantineCounts {
  total: number;
  by_reason: Record<QuarantineReason, number>;
}

/** Where a quarantined event is told: one warning line per event (a service's logger). */
export interface QuarantineLog {
  warn(fields: Record<string, unknown>, message: string): void;
}

/** Stream sequences remembered to count an event once; past this many, the oldest are forgotten. */
const REMEMBERED = 10_000;

/**
 * The events of the log this process could not use: each counted once, by its stream
 * sequence, however often it is read again (a redelivery, a run read twice, several
 * readers of one event), and told once as a warning. The events themselves stay in the
 * log for ever (it is append-only), found by that sequence.
 */
export class QuarantineBook {
  private readonly seen = new Set<number>();
  private readonly byReason = new Map<QuarantineReason, number>();
  private total = 0;

  constructor(private readonly log: QuarantineLog | undefined) {}

  /** Counts and tells `event` unless it was already; says whether it was new. */
  add(event: QuarantinedEvent): boolean {
    if (this.seen.has(event.streamSequence)) return false;
    this.seen.add(event.streamSequence);
    if (this.seen.size > REMEMBERED) {
      for (const oldest of this.seen) {
        this.seen.delete(oldest);
        break;
      }
    }
    this.total += 1;
    this.byReason.set(event.reason, (this.byReason.get(event.reason) ?? 0) + 1);
    this.log?.warn(
      {
        seq: event.streamSequence,
        subject: event.subject,
        runId: event.runId,
        type: event.type,
        reason: event.reason,
        detail: event.detail,
        bytes: event.data.length,
        preview: quarantinePreview(event.data),
      },
      "an event of the log cannot be used: quarantined (it stays in the log at its stream sequence); going on past it",
    );
    return true;
  }

  get counts(): QuarantineCounts {
    const byReason = Object.fromEntries(
      QUARANTINE_REASONS.map((reason) => [reason, this.byReason.get(reason) ?? 0]),
    ) as Record<QuarantineReason, number>;
    return { total: this.total, by_reason: byReason };
  }
}
