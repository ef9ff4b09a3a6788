import * as grpc from "@grpc/grpc-js";

/** A generated client's constructor (ts-proto's `…Client`). */
export type ClientConstructor<C> = new (
  address: string,
  credentials: grpc.ChannelCredentials,
  options?: Partial<grpc.ClientOptions>,
) => C;

export interface RetryPolicy {
  /** Attempts in all, the first included (default 4). */
  maxAttempts: number;
  /** Backoff before the first retry; it doubles (with jitter) up to maxBackoffMs. */
  initialBackoffMs: number;
  maxBackoffMs: number;
}

export interface ConnectOptions {
  /** host:port. */
  address: string;
  /** Plaintext unless given. */
  credentials?: grpc.ChannelCredentials;
  /** Deadline of a call that sets none, from its start, retries included (default 10 s). */
  deadlineMs?: number;
  /** How often an open connection is pinged while calls are active (default 30 s). */
  keepaliveMs?: number;
  /** Retries of unary calls that fail UNAVAILABLE (the server was unreachable or going away). */
  retry?: Partial<RetryPolicy>;
  /** Metadata sent with every call, e.g. `{ authorization: "Bearer …" }`. */
  metadata?: Readonly<Record<string, string>>;
  /** Interceptors run after the defaults' (closest to the wire last). */
  interceptors?: grpc.Interceptor[];
  /** The largest message this client accepts, in bytes; -1 for no limit (grpc-js's default is 4 MiB). */
  maxReceiveBytes?: number;
}

export const DEFAULT_RETRY: RetryPolicy = Object.freeze({
  maxAttempts: 4,
  initialBackoffMs: 100,
  maxBackoffMs: 2_000,
});

/**
 * A client of a generated service with Holdfast's defaults filled in: a deadline on every
 * call, keepalive pings, retries with backoff for UNAVAILABLE, and the given metadata.
 */
export function connect<C>(Client: ClientConstructor<C>, options: ConnectOptions): C {
  const credentials = options.credentials ?? grpc.credentials.createInsecure();
  const retry = { ...DEFAULT_RETRY, ...options.retry };
  const interceptors: grpc.Interceptor[] = [
    deadlineInterceptor(options.deadlineMs ?? 10_000),
    ...(options.metadata === undefined ? [] : [metadataInterceptor(options.metadata)]),
    retryInterceptor(retry),
    ...(options.interceptors ?? []),
  ];
  return new Client(options.address, credentials, {
    interceptors,
    "grpc.keepalive_time_ms": options.keepaliveMs ?? 30_000,
    "grpc.keepalive_timeout_ms": 10_000,
    // Retries are the interceptor's, with its own policy: the channel's own would double them.
    "grpc.enable_retries": 0,
    // A channel that could not connect fails every call at once until it tries again, 1 s
    // later at first and growing (grpc-js's default): it tries again at the retries' own
    // pace, so that a server which comes up between two retries is reached by the next.
    "grpc.initial_reconnect_backoff_ms": retry.initialBackoffMs,
    "grpc.max_reconnect_backoff_ms": retry.maxBackoffMs,
    ...(options.maxReceiveBytes === undefined
      ? {}
      : { "grpc.max_receive_message_length": options.maxReceiveBytes }),
  });
}

/** Gives a call without a deadline one, `ms` from its start. */
export function deadlineInterceptor(ms: number): grpc.Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(
      nextCall(options.deadline === undefined ? { ...options, deadline: Date.now() + ms } : options),
    );
}

/** Adds the same metadata to every call. */
export function metadataInterceptor(entries: Readonly<Record<string, string>>): grpc.Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        for (const [key, value] of Object.entries(entries)) metadata.set(key, value);
        next(metadata, listener);
      },
    });
}

/**
 * Retries a unary call that ends UNAVAILABLE (no server, a connection reset, a server
 * shutting down): the request is sent again after a backoff that doubles, with jitter,
 * within the call's own deadline. Streaming calls are passed through untouched: their
 * messages cannot be replayed safely.
 */
export function retryInterceptor(policy: RetryPolicy): grpc.Interceptor {
  return (options, nextCall) => {
    const method = options.method_definition;
    if (method.requestStream || method.responseStream || policy.maxAttempts <= 1) {
      return new grpc.InterceptingCall(nextCall(options));
    }
    let metadata: grpc.Metadata | undefined;
    let request: unknown;
    return new grpc.InterceptingCall(nextCall(options), {
      start(startMetadata, listener, next) {
        metadata = startMetadata;
        // The answer goes to the caller once an attempt is final: its message, then its status.
        const deliver = (message: unknown, status: grpc.StatusObject) => {
          if (message !== undefined) listener.onReceiveMessage(message);
          listener.onReceiveStatus(status);
        };
        let attempt = 1;
        const settle = (message: unknown, status: grpc.StatusObject) => {
          const wait = backoff(policy, attempt);
          const deadline =
            options.deadline === undefined ? Number.POSITIVE_INFINITY : Number(options.deadline);
          if (
            status.code !== grpc.status.UNAVAILABLE ||
            attempt >= policy.maxAttempts ||
            Date.now() + wait >= deadline
          ) {
            deliver(message, status);
            return;
          }
          attempt += 1;
          setTimeout(() => {
            let received: unknown;
            const call = nextCall(options);
            call.start(metadata!.clone(), {
              onReceiveMessage(message: unknown) {
                received = message;
              },
              onReceiveStatus(retried: grpc.StatusObject) {
                settle(received, retried);
              },
            });
            call.sendMessage(request);
            call.halfClose();
          }, wait);
        };
        let received: unknown;
        next(startMetadata, {
          onReceiveMessage(message: unknown) {
            received = message;
          },
          onReceiveStatus(status: grpc.StatusObject) {
            settle(received, status);
          },
        });
      },
      sendMessage(message, next) {
        request = message;
        next(message);
      },
    });
  };
}

function backoff(policy: RetryPolicy, attempt: number): number {
  const ceiling = Math.min(policy.initialBackoffMs * 2 ** (attempt - 1), policy.maxBackoffMs);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}
