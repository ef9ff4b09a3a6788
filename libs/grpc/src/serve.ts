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
}

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

/** Starts a grpc-js server (plaintext) with the given services, health and reflection. */
export async function serve(options: ServeOptions): Promise<GrpcServer> {
  const names = options.services.map((s) => serviceName(s.definition));
  const authorize = options.authorize;
  const guarded = new Set(names);
  const server = new grpc.Server({
    // Clients may ping to keep idle connections through NATs and load balancers.
    "grpc.keepalive_permit_without_calls": 1,
    ...(authorize === undefined
      ? {}
      : {
          interceptors: [
            (
              method: grpc.ServerMethodDefinition<unknown, unknown>,
              call: grpc.ServerInterceptingCallInterface,
            ) => guardedCall(method, call, guarded, authorize),
          ],
        }),
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
