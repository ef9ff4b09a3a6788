import * as grpc from "@grpc/grpc-js";
import { HealthImplementation } from "grpc-health-check";
import { GrpcBindError } from "./errors.js";
import { DescriptorReflection } from "./reflection.js";

/** One service the server offers: its definition (ts-proto's `…Service`) and its handlers. */
export interface ServedService {
  readonly definition: grpc.ServiceDefinition;
  readonly implementation: grpc.UntypedServiceImplementation;
}

export interface ServeOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
  services: readonly ServedService[];
  /**
   * Serve `grpc.health.v1.Health`: the server as a whole ("") and each service by its full
   * name, SERVING while the server runs and NOT_SERVING once it starts to close.
   */
  health: boolean;
  /**
   * Serve gRPC server reflection (`grpc.reflection.v1` and `v1alpha`, what `grpcurl list`
   * and `describe` use) from this serialized FileDescriptorSet, which must hold every file
   * the services are defined in, imports included (and grpc/health/v1/health.proto when
   * health is served); undefined for none.
   */
  reflection: Uint8Array | undefined;
  /** Longest a close lets calls in flight finish before it cancels them (default 5 s). */
  graceMs?: number;
  /** A port another process holds is replaced by a free one instead of failing (free_port_if_taken). */
  freePortIfTaken?: boolean;
  /**
   * Decides, from a call's metadata alone, whether it may reach `services` (health and
   * reflection stay open): undefined lets it through; a refusal ends the call at once with
   * that status, before any handler runs, whether it is unary or a stream.
   */
  authorize?: (metadata: grpc.Metadata, method: string) => Refusal | undefined;
  /** What one caller may hold open (defaults: SERVER_BOUNDS); tests lower them. */
  bounds?: Partial<ServerBounds>;
}

/**
 * What a caller can hold on to, on every server `serve` starts. Health and reflection take
 * no token, so these bound what anyone who can reach the port can make the process keep:
 * streams on one connection, connections left idle, the size of one message, and the
 * open streams of the services that take no token, whatever the number of connections.
 */
export interface ServerBounds {
  /** Streams (calls) open at once on one connection; HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS. */
  maxStreamsPerConnection: number;
  /** A connection with no call open for this long is closed (a client reconnects by itself). */
  idleConnectionMs: number;
  /** The largest message the server reads, in bytes; larger is refused RESOURCE_EXHAUSTED. */
  maxMessageBytes: number;
  /**
   * Streaming calls open at once, on all connections, to the services that take no token
   * (grpc.health.v1.Health/Watch, reflection); past it a new one is refused RESOURCE_EXHAUSTED.
   * A unary Check is never refused for it, so a probe still gets its answer.
   */
  maxOpenUnauthenticatedStreams: number;
}

export const SERVER_BOUNDS: ServerBounds = Object.freeze({
  // RFC 9113 recommends at least 100; nginx has 128, Go's gRPC server unlimited.
  maxStreamsPerConnection: 100,
  idleConnectionMs: 5 * 60_000,
  // grpc's own default, said here: no message of these APIs is near it (a run's input is at most 1 MB).
  maxMessageBytes: 4 * 1024 * 1024,
  maxOpenUnauthenticatedStreams: 1_000,
});

/** Why a call was turned away: its gRPC status and the message the client reads. */
export interface Refusal {
  code: grpc.status;
  details: string;
}

export interface GrpcServer {
  readonly host: string;
  readonly port: number;
  /** host:port, as a client dials it. */
  readonly address: string;
  /** Says NOT_SERVING, lets calls in flight finish within the grace, then cancels the rest. */
  close(): Promise<void>;
}

/** The full name of a service from its definition ("/holdfast.v1.Control/GetRun" → "holdfast.v1.Control"). */
export function serviceName(definition: grpc.ServiceDefinition): string {
  const first = Object.values(definition)[0];
  if (first === undefined) throw new TypeError("a gRPC service definition without methods");
  return first.path.slice(1, first.path.lastIndexOf("/"));
}

/**
 * A call that reaches its handler only once its metadata is authorized; refused, it ends
 * with the refusal's status before the handler hears of it (a stream does not hang open).
 */
function guardedCall(
  method: grpc.ServerMethodDefinition<unknown, unknown>,
  call: grpc.ServerInterceptingCallInterface,
  guarded: ReadonlySet<string>,
  authorize: NonNullable<ServeOptions["authorize"]>,
): grpc.ServerInterceptingCall {
  const service = method.path.slice(1, method.path.lastIndexOf("/"));
  return new grpc.ServerInterceptingCall(call, {
    start(next) {
      next({
        onReceiveMetadata(metadata, pass) {
          const refusal = guarded.has(service) ? authorize(metadata, method.path) : undefined;
          if (refusal === undefined) pass(metadata);
          else
            call.sendStatus({ code: refusal.code, details: refusal.details, metadata: new grpc.Metadata() });
        },
      });
    },
  });
}

/**
 * A streaming call to a service that takes no token, counted while it is open; refused at
 * once (RESOURCE_EXHAUSTED) when `open` is already at its bound, before its handler hears of it.
 */
function boundedCall(
  call: grpc.ServerInterceptingCallInterface,
  open: { count: number },
  max: number,
): grpc.ServerInterceptingCall {
  if (open.count >= max) {
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata() {
            call.sendStatus({
              code: grpc.status.RESOURCE_EXHAUSTED,
              details: `this server has ${max} streams open to its services that take no token (health, reflection): try again later`,
              metadata: new grpc.Metadata(),
            });
          },
        });
      },
    });
  }
  open.count += 1;
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    open.count -= 1;
  };
  return new grpc.ServerInterceptingCall(call, {
    start(next) {
      next({
        onCancel() {
          end();
        },
      });
    },
    sendStatus(status, next) {
      end();
      next(status);
    },
  });
}

/** Starts a grpc-js server (plaintext) with the given services, health and reflection. */
export async function serve(options: ServeOptions): Promise<GrpcServer> {
  const names = options.services.map((s) => serviceName(s.definition));
  const authorize = options.authorize;
  const guarded = new Set(names);
  const bounds = { ...SERVER_BOUNDS, ...options.bounds };
  const unauthenticatedStreams = { count: 0 };
  const server = new grpc.Server({
    // Clients may ping to keep idle connections through NATs and load balancers.
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.max_concurrent_streams": bounds.maxStreamsPerConnection,
    "grpc.max_connection_idle_ms": bounds.idleConnectionMs,
    "grpc.max_receive_message_length": bounds.maxMessageBytes,
    interceptors: [
      (method: grpc.ServerMethodDefinition<unknown, unknown>, call: grpc.ServerInterceptingCallInterface) => {
        const service = method.path.slice(1, method.path.lastIndexOf("/"));
        if (guarded.has(service)) {
          return authorize === undefined
            ? new grpc.ServerInterceptingCall(call)
            : guardedCall(method, call, guarded, authorize);
        }
        if (!method.requestStream && !method.responseStream) return new grpc.ServerInterceptingCall(call);
        return boundedCall(call, unauthenticatedStreams, bounds.maxOpenUnauthenticatedStreams);
      },
    ],
  });
  for (const service of options.services) server.addService(service.definition, service.implementation);

  let health: HealthImplementation | undefined;
  if (options.health) {
    health = new HealthImplementation(Object.fromEntries(["", ...names].map((name) => [name, "SERVING"])));
    health.addToServer(server);
  }
  if (options.reflection !== undefined) {
    // The set may describe more services than this server offers: only those it offers are
    // listed. Health is listed too, so a client can find it like any other service.
    const offered = options.health ? [...names, "grpc.health.v1.Health"] : names;
    new DescriptorReflection(options.reflection, offered).addToServer(server);
  }

  const host = options.host;
  const bind = (wanted: number) => {
    const target = host.includes(":") ? `[${host}]:${wanted}` : `${host}:${wanted}`;
    return new Promise<number>((resolve, reject) => {
      server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (error, bound) => {
        if (error)
          reject(new GrpcBindError(`gRPC cannot listen on ${target}: ${error.message}`, { cause: error }));
        else resolve(bound);
      });
    });
  };
  let port: number;
  try {
    port = await bind(options.port);
  } catch (error) {
    // Another process holds the port: a free one instead, when the caller allows it.
    if (!options.freePortIfTaken || !/address already in use|EADDRINUSE/i.test((error as Error).message)) {
      throw error;
    }
    port = await bind(0);
  }
  const graceMs = options.graceMs ?? 5_000;
  return {
    host,
    port,
    address: host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`,
    async close() {
      for (const name of ["", ...names]) health?.setStatus(name, "NOT_SERVING");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
  };
}
