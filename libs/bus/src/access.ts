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

const AUTHORING: Readonly<Partial<Record<Principal, Author>>> = {
  gateway: "gateway",
  control: "control",
  scheduler: "scheduler",
};

/** The buckets each principal reads and writes (every one it opens). */
const BUCKETS_OF: Record<Exclude<Principal, "admin">, readonly BucketName[]> = {
  gateway: ["FINGERPRINTS", "RESPONSES", "GATEWAYS", "SNAPSHOT_PARTS", "SNAPSHOT_STEPS"],
  projector: ["LEASES"],
  budget: ["BUDGET_LEASES", "RATE_SLICES"],
  // Snapshots are read (never written) by the control API and the operator's CLI.
  control: ["SNAPSHOT_PARTS", "SNAPSHOT_STEPS"],
  scheduler: [],
  reader: ["SNAPSHOT_PARTS", "SNAPSHOT_STEPS"],
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
  // The reader (`holdfast show`) reads a run by direct gets, and makes no consumer: a
  // credential handed to operators must not be able to fill the stream's consumers.
  const reads = (stream: string) =>
    readStream(stream).filter(
      (subject) => principal !== "reader" || !/(\.CONSUMER\.|^\$JS\.FC\.)/.test(subject),
    );
  const publish: string[] = ["$JS.API.INFO", ...reads(events)];
  const deny: string[] = [];
  const subscribe: string[] = [`${inboxPrefix(principal)}.>`];

  const author = AUTHORING[principal];
  if (author !== undefined) {
    for (const type of typesAuthoredBy(author)) publish.push(eventSubject(prefix, type));
  }
  for (const bucket of BUCKETS_OF[principal]) {
    const name = bucketName(prefix, bucket);
    publish.push(...reads(`KV_${name}`));
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
  else if (principal !== "reader") {
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

/** An account of nats-server, as `natsAccounts` lays them out (natsd renders it). */
export interface AccountSpec {
  name: string;
  jetstream?: boolean;
  users: { nkey: string; permissions?: SubjectPermissions }[];
  exports?: {
    service?: string;
    stream?: string;
    accounts?: string[];
    responseType?: "singleton" | "stream";
  }[];
  imports?: (
    | { service: { account: string; subject: string } }
    | { stream: { account: string; subject: string } }
  )[];
}

/** The account a principal's users are in: the log's own for the admin, one of its own for every other. */
export function accountOf(principal: Principal, prefix: string): string {
  const log = prefix.toUpperCase();
  return principal === "admin" ? log : `${log}_${principal.toUpperCase()}`;
}

/**
 * The accounts Holdfast's NATS runs with: the log's account holds JetStream (the event
 * stream, the buckets) and the admin; every other principal has an account of its own,
 * which imports only what that principal uses: the JetStream API (its permissions say
 * which calls), the event types it authors and the buckets it keeps (each a service the
 * log's account answers), and the messages meant for it (its inbox, the stored events it
 * tails). A principal's permissions never look at a reply subject, so a request it makes
 * could ask for the answer on any subject; in an account of its own the answer stays there,
 * where only what the account imports reaches the log.
 */
export function natsAccounts(
  publicKeys: Readonly<Record<Principal, string>>,
  options: AccessOptions,
): AccountSpec[] {
  const { prefix } = options;
  const log = accountOf("admin", prefix);
  const services = PRINCIPALS.filter((p) => p !== "admin");
  const accountsOf = (principals: readonly Principal[]) => principals.map((p) => accountOf(p, prefix));
  const shared: { subject: string; kind: "service" | "stream"; for: Principal[]; responseType?: "stream" }[] =
    [
      { subject: "$JS.API.>", kind: "service", for: services, responseType: "stream" },
      { subject: "$JS.FC.>", kind: "service", for: services },
      { subject: "$JS.ACK.>", kind: "service", for: ["projector"] },
      { subject: `${prefix}.stored.run.>`, kind: "stream", for: [...TAILS] },
      ...services.map((p) => ({ subject: `${inboxPrefix(p)}.>`, kind: "stream" as const, for: [p] })),
    ];
  for (const [principal, author] of Object.entries(AUTHORING) as [Principal, Author][]) {
    for (const type of typesAuthoredBy(author)) {
      shared.push({ subject: eventSubject(prefix, type), kind: "service", for: [principal] });
    }
  }
  for (const bucket of BUCKET_NAMES) {
    shared.push({
      subject: `$KV.${bucketName(prefix, bucket)}.>`,
      kind: "service",
      for: [BUCKETS[bucket].writer],
    });
  }
  const logAccount: AccountSpec = {
    name: log,
    jetstream: true,
    users: [{ nkey: publicKeys.admin, permissions: permissionsFor("admin", options) }],
    exports: shared.map((s) => ({
      [s.kind]: s.subject,
      accounts: accountsOf(s.for),
      ...(s.responseType === undefined ? {} : { responseType: s.responseType }),
    })),
  };
  return [
    logAccount,
    ...services.map((principal) => ({
      name: accountOf(principal, prefix),
      users: [{ nkey: publicKeys[principal], permissions: permissionsFor(principal, options) }],
      imports: shared
        .filter((s) => s.for.includes(principal))
        .map((s) =>
          s.kind === "service"
            ? { service: { account: log, subject: s.subject } }
            : { stream: { account: log, subject: s.subject } },
        ),
    })),
  ];
}

/** The subjects an event type is appended on, across its runs (or keys, or agents). */
function eventSubject(prefix: string, type: string): string {
  if (type === "RateLimitObserved") return `${prefix}.key.*.${type}`;
  if (type === "AgentDeployed") return `${prefix}.agent.*.${type}`;
  return `${prefix}.run.*.${type}`;
}
