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
export { Bus, type BusOptions, type BusTls, connectBus } from "./bus.js";
export { type NatsCredential, newNatsCredential, publicKeyOf } from "./credentials.js";
export {
  BusConfigurationError,
  BusError,
  BusRejectedError,
  BusUnavailableError,
  ConcurrencyError,
  KeyChangedError,
} from "./errors.js";
export { Lease, type LeaseHandlers, type LeaseOptions } from "./lease.js";
export type {
  AppendResult,
  DurableSpec,
  DurableState,
  KeyChange,
  KeyEntry,
  KeyValue,
  KeyWatch,
  PulledMessage,
  Puller,
  RawMessage,
  RunHistory,
  StoredEvent,
  StoredMessage,
  StreamSettings,
  StreamState,
  Watch,
  WatchedEvent,
} from "./model.js";
export type { QuarantineCounts, QuarantineLog } from "./quarantine.js";
export { type Start, type SwitchError, Switched } from "./switched.js";
