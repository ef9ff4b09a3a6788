import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { FILE_DESCRIPTOR_SET_BASE64, RunsService } from "@holdfast/proto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type GrpcServer, serve } from "./serve.js";
import { unary } from "./unary.js";

// Reflection as a client that has nothing but the server sees it: the descriptors it gets
// must resolve every type they name, and a generic client (`buf curl`, what grpcurl does)
// must be able to call a method with them.

const root = fileURLToPath(new URL("../../../", import.meta.url));
const buf = join(root, "node_modules", ".bin", "buf");
const run = promisify(execFile);

let server: GrpcServer;
beforeAll(async () => {
  const notHere = () => Promise.reject(Object.assign(new Error("not in this test"), { code: 12 }));
  const implementation: grpc.UntypedServiceImplementation = Object.fromEntries(
    Object.keys(RunsService).map((method) => [
      method,
      unary(notHere, () => ({ code: grpc.status.UNIMPLEMENTED })),
    ]),
  );
  implementation.listAgents = unary<unknown, unknown>(
    async () => ({
      agents: [
        {
          agent: "research",
          version: "v7",
          caps: { ceilingMs: 600_000, concurrencyPerKey: 2, startsPerMinute: 30 },
          deployedMs: 1_800_000_000_000,
          workers: 1,
          workersOnVersion: 1,
        },
      ],
    }),
    () => ({ code: grpc.status.INTERNAL }),
  );
  server = await serve({
    host: "127.0.0.1",
    port: 0,
    services: [{ definition: RunsService as unknown as grpc.ServiceDefinition, implementation }],
    health: true,
    reflection: Buffer.from(FILE_DESCRIPTOR_SET_BASE64, "base64"),
    graceMs: 200,
  });
});
afterAll(async () => {
  await server.close();
});

/** One request on a reflection stream (`grpc.reflection.v1`), its answer as decoded. */
async function reflect(request: Record<string, unknown>): Promise<Record<string, unknown>> {
  const protoDir = join(dirname(createRequire(import.meta.url).resolve("@grpc/reflection")), "../proto");
  const definition = grpc.loadPackageDefinition(
    protoLoader.loadSync(join(protoDir, "grpc/reflection/v1/reflection.proto"), {
      keepCase: true,
      oneofs: true,
    }),
  ) as unknown as {
    grpc: {
      reflection: {
        v1: { ServerReflection: new (address: string, c: grpc.ChannelCredentials) => grpc.Client };
      };
    };
  };
  const client = new definition.grpc.reflection.v1.ServerReflection(
    server.address,
    grpc.credentials.createInsecure(),
  ) as grpc.Client & { ServerReflectionInfo(): grpc.ClientDuplexStream<unknown, Record<string, unknown>> };
  try {
    const call = client.ServerReflectionInfo();
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => {
      call.once("data", resolve);
      call.once("error", reject);
    });
    call.write(request);
    const got = await answer;
    call.end();
    return got;
  } finally {
    client.close();
  }
}

function filesOf(answer: Record<string, unknown>): Uint8Array[] {
  const response = answer.file_descriptor_response as { file_descriptor_proto: Uint8Array[] } | undefined;
  expect(response, JSON.stringify(answer.error_response)).toBeDefined();
  return response!.file_descriptor_proto;
}

describe("reflection", () => {
  it("lists what the server offers, and only that", async () => {
    const answer = await reflect({ list_services: "" });
    expect(answer.list_services_response).toEqual({
      service: [{ name: "holdfast.v1.Runs" }, { name: "grpc.health.v1.Health" }],
    });
  });

  it("describes a service with the files it imports, as compiled, so that every type it names resolves", async () => {
    const files = filesOf(await reflect({ file_containing_symbol: "holdfast.v1.Runs" })).map((bytes) =>
      fromBinary(FileDescriptorProtoSchema, bytes),
    );
    expect(files.map((f) => f.name)).toEqual([
      "holdfast/runs/v1/runs.proto",
      "holdfast/events/v1/events.proto",
    ]);
    // One file, one file's services: not every service of the package merged into it.
    expect(files[0]!.service.map((s) => s.name)).toEqual(["Runs"]);
    expect(files[0]!.dependency).toContain("holdfast/events/v1/events.proto");
    // A registry refuses a file with an import it is not given or a type it cannot resolve.
    const byName = new Map(files.map((f) => [f.name, f]));
    const registry = createFileRegistry(files[0]!, (name) => byName.get(name));
    const runs = registry.getService("holdfast.v1.Runs");
    expect(runs?.methods.map((m) => m.name)).toEqual(
      expect.arrayContaining(["Submit", "Watch", "ListAgents"]),
    );
    expect(registry.getMessage("holdfast.events.v1.Envelope")).toBeDefined();
  });

  it("finds a method's file by its name, health's as protoc compiles it, and says NOT_FOUND for what it does not know", async () => {
    const method = filesOf(await reflect({ file_containing_symbol: "holdfast.v1.Runs.Submit" }));
    expect(fromBinary(FileDescriptorProtoSchema, method[0]!).name).toBe("holdfast/runs/v1/runs.proto");
    const health = filesOf(await reflect({ file_containing_symbol: "grpc.health.v1.Health" })).map((bytes) =>
      fromBinary(FileDescriptorProtoSchema, bytes),
    );
    expect(health.map((f) => f.name)).toEqual(["grpc/health/v1/health.proto"]);
    const listResponse = health[0]!.messageType.find((m) => m.name === "HealthListResponse");
    expect(listResponse?.nestedType.map((m) => [m.name, m.options?.mapEntry])).toEqual([
      ["StatusesEntry", true],
    ]);
    const byName = filesOf(await reflect({ file_by_filename: "holdfast/events/v1/events.proto" }));
    expect(fromBinary(FileDescriptorProtoSchema, byName[0]!).package).toBe("holdfast.events.v1");
    expect((await reflect({ file_containing_symbol: "holdfast.v1.Nothing" })).error_response).toMatchObject({
      error_code: grpc.status.NOT_FOUND,
    });
    expect((await reflect({ file_by_filename: "nope.proto" })).error_response).toMatchObject({
      error_code: grpc.status.NOT_FOUND,
    });
  });

  it("is enough for a client that has no .proto file: buf curl checks health and calls a method", async () => {
    const curl = (...args: string[]) =>
      run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args], { timeout: 30_000 });
    const listed = await curl("--list-methods", `http://${server.address}`);
    expect(listed.stdout.split("\n")).toEqual(
      expect.arrayContaining(["grpc.health.v1.Health/Check", "holdfast.v1.Runs/Submit"]),
    );
    const health = await curl(`http://${server.address}/grpc.health.v1.Health/Check`);
    expect(JSON.parse(health.stdout)).toEqual({ status: "SERVING" });
    const agents = await curl("-d", "{}", `http://${server.address}/holdfast.v1.Runs/ListAgents`);
    expect(JSON.parse(agents.stdout)).toEqual({
      agents: [
        {
          agent: "research",
          version: "v7",
          caps: { ceilingMs: "600000", concurrencyPerKey: 2, startsPerMinute: 30 },
          deployedMs: "1800000000000",
          workers: 1,
          workersOnVersion: 1,
        },
      ],
    });
  });
});
