export type { Consumer, ConsumerMessages, JsMsg } from "@nats-io/jetstream";
export type { KV, KvEntry, KvWatchEntry } from "@nats-io/kv";
export {
  type AppendResult,
  Bus,
  type BusOptions,
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
