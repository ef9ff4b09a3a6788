/**
 * The KV buckets Holdfast keeps beside its log: small pointers shared across instances and
 * restarts, each written by one kind of process. Made once by `Bus.provisionBuckets` (an
 * admin credential), opened by the services that use them.
 */
export const BUCKETS = {
  /** Each fingerprinted agent's current generation (gateways). */
  FINGERPRINTS: { writer: "gateway" },
  /**
   * A Responses answer's id → its run, for `previous_response_id` (gateways). OpenAI keeps
   * a response 30 days; so is the run each one belongs to.
   */
  RESPONSES: { writer: "gateway", ttlMs: 30 * 24 * 60 * 60 * 1000 },
  /** Every gateway's heartbeat: who is alive, and whose calls in flight are orphaned. */
  GATEWAYS: { writer: "gateway" },
  /** The projector's lease on its consumer. */
  LEASES: { writer: "projector" },
  /** Slices of budgets leased to gateways (the budget service). */
  BUDGET_LEASES: { writer: "budget" },
  /**
   * Slices of shared rate-limit windows granted (the budget service's coordinator), kept as
   * long as the coordinator remembers a slice (`SLICE_MEMORY_MS` in @holdfast/predict).
   */
  RATE_SLICES: { writer: "budget", ttlMs: 120_000 },
  /**
   * What steps asked and were answered, by content: each piece of a request or an answer
   * under its SHA-256 (@holdfast/snapshots). Kept as long as a run names it.
   */
  SNAPSHOT_PARTS: { writer: "gateway" },
  /** Each step's snapshot manifests: the pieces its request and its answer are made of. */
  SNAPSHOT_STEPS: { writer: "gateway" },
} as const satisfies Record<string, { writer: string; ttlMs?: number }>;

export type BucketName = keyof typeof BUCKETS;

export const BUCKET_NAMES = Object.keys(BUCKETS) as BucketName[];

/** How long a bucket keeps a value, when it forgets them. */
export function bucketTtlMs(bucket: BucketName): number | undefined {
  return (BUCKETS[bucket] as { readonly ttlMs?: number }).ttlMs;
}

/** Bounds on what buckets may hold, from the deployment's configuration. */
export interface BucketLimits {
  /**
   * The most bytes each snapshot bucket keeps (snapshots.max_storage_bytes; -1: no bound).
   * A bucket at its bound refuses new values (JetStream's discard-new, as every KV
   * bucket): snapshots stop being stored, counted as failures, and nothing stored is lost.
   */
  readonly snapshotMaxBytes?: number;
}
