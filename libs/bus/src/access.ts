import { type Author, typesAuthoredBy } from "@holdfast/events";
import { BUCKET_NAMES, BUCKETS, type BucketName } from "./buckets.js";

/**
 * Who connects to NATS. Each service has a credential of its own, allowed only what that
 * service does: publish the event types it authors, write the buckets it keeps, read what
 * it follows. None may create, update, delete or purge a stream or bucket: that is the
 * admin's, a credential that provisions and is not used at run time. `reader` is the
 * operator's CLI (`holdfast show`): it reads the log and writes nothing.
 */
export type Principal = "admin" | "gateway" | "projector" | "budget" | "control" | "scheduler" | "reader";

export const PRINCIPALS: readonly Principal[] = [
  "admin",
  "gateway",
  "projector",
  "budget",
  "control",
  "scheduler",
  "reader",
];

/** NATS subject permissions, as nats-server's configuration spells them. */
export interface SubjectPermissions {
  publish: { allow: string[]; deny: string[] };
  subscribe: { allow: string[]; deny: string[] };
}

export interface AccessOptions {
  /** The deployment's subject prefix (nats.prefix). */
  prefix: string;
  /** The projector's durable consumer (projector.consumer): only the projector may touch it. */
  projectorConsumer: string;
}

/**
 * Where a principal's replies come: its own inbox prefix, so no credential can subscribe
 * to another's answers (a direct get's bytes, a KV read, a publish acknowledgement).
 */
export function inboxPrefix(principal: Principal): string {
  return `_INBOX_${principal}`;
}

const AUTHORING: Partial<Record<Principal, Author>> = {
  gateway: "gateway",
  control: "control",
  scheduler: "scheduler",
};

/** The buckets each principal reads and writes (every one it opens). */
const BUCKETS_OF: Record<Exclude<Principal, "admin">, readonly BucketName[]> = {
  gateway: ["FINGERPRINTS", "RESPONSES", "GATEWAYS"],
  projector: ["LEASES"],
  budget: ["BUDGET_LEASES", "RATE_SLICES"],
  control: [],
  scheduler: [],
  reader: [],
};

/** Principals that hear a run's events as they are stored (`Bus.tail`). */
const TAILS: ReadonlySet<Principal> = new Set(["gateway", "scheduler"]);

/**
 * What `principal` may publish and subscribe to. Everything not allowed is refused: the
 * lists name exactly the JetStream API calls and subjects its code uses.
 */
export function permissionsFor(principal: Principal, options: AccessOptions): SubjectPermissions {
  if (principal === "admin") {
    return { publish: { allow: [">"], deny: [] }, subscribe: { allow: [">"], deny: [] } };
  }
  const { prefix, projectorConsumer } = options;
  const events = `${prefix.toUpperCase()}_EVENTS`;
  const publish: string[] = ["$JS.API.INFO", ...readStream(events)];
  const deny: string[] = [];
  const subscribe: string[] = [`${inboxPrefix(principal)}.>`];

  const author = AUTHORING[principal];
  if (author !== undefined) {
    for (const type of typesAuthoredBy(author)) {
      if (type === "RateLimitObserved") publish.push(`${prefix}.key.*.${type}`);
      else if (type === "AgentDeployed") publish.push(`${prefix}.agent.*.${type}`);
      else publish.push(`${prefix}.run.*.${type}`);
    }
  }
  for (const bucket of BUCKETS_OF[principal]) {
    const name = bucketName(prefix, bucket);
    publish.push(...readStream(`KV_${name}`));
    if (BUCKETS[bucket].writer === principal) publish.push(`$KV.${name}.>`);
  }
  if (TAILS.has(principal)) subscribe.push(`${prefix}.stored.run.>`);

  const durable = [
    `$JS.API.CONSUMER.DURABLE.CREATE.${events}.${projectorConsumer}`,
    `$JS.API.CONSUMER.CREATE.${events}.${projectorConsumer}`,
    `$JS.API.CONSUMER.CREATE.${events}.${projectorConsumer}.>`,
    `$JS.API.CONSUMER.RESET.${events}.${projectorConsumer}`,
    `$JS.ACK.${events}.${projectorConsumer}.>`,
  ];
  if (principal === "projector") publish.push(...durable);
  else {
    // Any other credential may make and pull consumers of its own, but not touch the
    // projector's: taking its messages or resetting it would skip the projection.
    deny.push(...durable, `$JS.API.CONSUMER.MSG.NEXT.${events}.${projectorConsumer}`);
  }
  // Nobody at run time deletes it, the projector included.
  deny.push(`$JS.API.CONSUMER.DELETE.${events}.${projectorConsumer}`);
  return { publish: { allow: publish, deny }, subscribe: { allow: subscribe, deny: [] } };
}

/** The JetStream API calls that read a stream: its info, direct gets, consumers of one's own. */
function readStream(stream: string): string[] {
  return [
    `$JS.API.STREAM.INFO.${stream}`,
    `$JS.API.STREAM.MSG.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}.>`,
    `$JS.API.CONSUMER.CREATE.${stream}`,
    `$JS.API.CONSUMER.CREATE.${stream}.*`,
    `$JS.API.CONSUMER.CREATE.${stream}.*.>`,
    `$JS.API.CONSUMER.INFO.${stream}.*`,
    `$JS.API.CONSUMER.DELETE.${stream}.*`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
    // Flow control answered by push consumers (a KV watch).
    `$JS.FC.${stream}.>`,
  ];
}

/** A bucket's name under a prefix (HF_GATEWAYS); its stream is KV_ + that. */
export function bucketName(prefix: string, bucket: BucketName): string {
  return `${prefix.toUpperCase()}_${bucket}`;
}

/** Every bucket's name under a prefix. */
export function bucketNames(prefix: string): string[] {
  return BUCKET_NAMES.map((bucket) => bucketName(prefix, bucket));
}
