import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { service as healthService } from "grpc-health-check";

// The reflection protocol's own definition, as @grpc/reflection ships it.
const REFLECTION_PROTO = join(
  dirname(createRequire(import.meta.url).resolve("@grpc/reflection")),
  "../proto/grpc/reflection/v1/reflection.proto",
);

interface ReflectionResponse {
  listServicesResponse?: { service: { name: string }[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

/**
 * The services a server lists through gRPC server reflection (`grpc.reflection.v1`), as
 * `grpcurl -plaintext <address> list` prints them: a check that reflection works, and
 * what the README's example session shows where grpcurl is not installed.
 */
export async function listServices(
  address: string,
  options: { deadlineMs?: number } = {},
): Promise<string[]> {
  const definition = protoLoader.loadSync(REFLECTION_PROTO, { keepCase: false });
  const Reflection = grpc.makeClientConstructor(
    definition["grpc.reflection.v1.ServerReflection"] as grpc.ServiceDefinition,
    "ServerReflection",
  );
  const client = new Reflection(address, grpc.credentials.createInsecure());
  try {
    return await new Promise<string[]>((resolve, reject) => {
      const call = method(
        client,
        "ServerReflectionInfo",
      )({
        deadline: Date.now() + (options.deadlineMs ?? 5_000),
      }) as grpc.ClientDuplexStream<unknown, ReflectionResponse>;
      call.on("data", (response: ReflectionResponse) => {
        if (response.errorResponse) reject(new Error(response.errorResponse.errorMessage));
        else resolve((response.listServicesResponse?.service ?? []).map((s) => s.name).sort());
        call.end();
      });
      call.on("error", reject);
      call.write({ listServices: "" });
    });
  } finally {
    client.close();
  }
}

/** What `grpc.health.v1.Health/Check` says of `service` ("" for the server as a whole). */
export async function checkHealth(
  address: string,
  service = "",
  options: { deadlineMs?: number } = {},
): Promise<"UNKNOWN" | "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN"> {
  const Health = grpc.makeClientConstructor(healthService as grpc.ServiceDefinition, "Health");
  const client = new Health(address, grpc.credentials.createInsecure());
  try {
    return await new Promise((resolve, reject) => {
      method(client, "Check")(
        { service },
        { deadline: Date.now() + (options.deadlineMs ?? 5_000) },
        (error: grpc.ServiceError | null, response: { status: string }) => {
          if (error) reject(error);
          else resolve(response.status as "SERVING");
        },
      );
    });
  } finally {
    client.close();
  }
}

type Method = (...args: unknown[]) => unknown;

/** A method of a client made at run time (makeClientConstructor), bound to it. */
function method(client: grpc.Client, name: string): Method {
  const found = (client as unknown as Record<string, Method | undefined>)[name];
  if (found === undefined) throw new TypeError(`the client has no method ${name}`);
  return found.bind(client);
}
