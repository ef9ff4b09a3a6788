export type { Consumer, ConsumerMessages, JsMsg } from "@nats-io/jetstream";
export type { KV, KvEntry, KvWatchEntry } from "@nats-io/kv";
export {
  type AccessOptions,
  type AccountSpec,
  accountOf,
  bucketName,
  bucketNames,
  inboxPrefix,
  natsAccounts,
  PRINCIPALS,
  type Principal,
  permissionsFor,
  type SubjectPermissions,
} from "./access.js";
export { BUCKET_NAMES, BUCKETS, type BucketName } from "./buckets.js";
export {
  type AppendResult,
  Bus,
  type BusOptions,
  type BusTls,
  connectBus,
  type DurableSpec,
  type RawMessage,
  type RunHistory,
  type StoredEvent,
  type StoredMessage,
  type StreamState,
  type Watch,
  type WatchedEvent,
} from "./bus.js";
export { authenticatorFrom, type NatsCredential, newNatsCredential, publicKeyOf } from "./credentials.js";
export {
  BusConfigurationError,
  BusError,
  BusRejectedError,
  BusUnavailableError,
  ConcurrencyError,
} from "./errors.js";
export { Lease, type LeaseHandlers, type LeaseOptions } from "./lease.js";
export type { PulledMessage, Puller } from "./puller.js";
export type { QuarantineCounts, QuarantineLog } from "./quarantine.js";
export { type Start, type SwitchError, Switched } from "./switched.js";
