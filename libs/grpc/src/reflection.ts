import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createFileRegistry, type FileRegistry, fromBinary } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

// The reflection protocol's own definitions (v1 and the v1alpha that older clients speak),
// as @grpc/reflection ships them.
const protoDir = join(dirname(createRequire(import.meta.url).resolve("@grpc/reflection")), "../proto");
const VERSIONS = [
  { file: "grpc/reflection/v1/reflection.proto", service: "grpc.reflection.v1.ServerReflection" },
  { file: "grpc/reflection/v1alpha/reflection.proto", service: "grpc.reflection.v1alpha.ServerReflection" },
] as const;

const NOT_FOUND = grpc.status.NOT_FOUND;
const INVALID_ARGUMENT = grpc.status.INVALID_ARGUMENT;

/** A ServerReflectionRequest as proto-loader decodes it (`keepCase`, `oneofs`). */
interface ReflectionRequest {
  host?: string;
  message_request?: string;
  file_by_filename?: string;
  file_containing_symbol?: string;
  file_containing_extension?: { containing_type?: string; extension_number?: number };
  all_extension_numbers_of_type?: string;
  list_services?: string;
}

/**
 * gRPC server reflection (`grpc.reflection.v1` and `v1alpha`) that answers with the
 * descriptors exactly as the protobuf compiler wrote them (the FileDescriptorSet `buf
 * generate` embeds), each file with the files it imports. @grpc/reflection rebuilds them
 * from proto-loader's view instead, which merges the files of one package and drops
 * their imports, so a generic client (grpcurl, `buf curl`, grpcui) could list the services
 * but not describe or call them.
 */
export class DescriptorReflection {
  private readonly files = new Map<string, { bytes: Uint8Array; imports: readonly string[] }>();
  private readonly registry: FileRegistry;

  /** `set`: a serialized FileDescriptorSet; `services`: the ones this server offers (what it lists). */
  constructor(
    set: Uint8Array,
    private readonly services: readonly string[],
  ) {
    this.registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, set));
    // Each file's own bytes, as written: FileDescriptorSet.file (1), repeated.
    const reader = new BinaryReader(set);
    while (reader.pos < reader.len) {
      const [field, wireType] = reader.tag();
      if (field !== 1 || wireType !== WireType.LengthDelimited) {
        reader.skip(wireType);
        continue;
      }
      const bytes = reader.bytes();
      const name = fileName(bytes);
      const file = this.registry.getFile(name);
      if (file !== undefined)
        this.files.set(name, { bytes, imports: file.dependencies.map((d) => d.proto.name) });
    }
    for (const service of services) {
      if (this.registry.getService(service) === undefined) {
        throw new TypeError(`the descriptor set does not describe the service ${service}`);
      }
    }
  }

  addToServer(server: grpc.Server): void {
    for (const version of VERSIONS) {
      const definition = grpc.loadPackageDefinition(
        protoLoader.loadSync(join(protoDir, version.file), { keepCase: true, oneofs: true, longs: Number }),
      );
      const service = version.service
        .split(".")
        .reduce<unknown>((at, part) => (at as Record<string, unknown>)[part], definition) as {
        service: grpc.ServiceDefinition;
      };
      server.addService(service.service, {
        ServerReflectionInfo: (call: grpc.ServerDuplexStream<ReflectionRequest, unknown>) => {
          // Files already sent on this stream go once (the client keeps them).
          const sent = new Set<string>();
          call.on("data", (request: ReflectionRequest) => {
            let answer: Record<string, unknown>;
            try {
              answer = this.answer(request, sent);
            } catch (error) {
              answer = failure(grpc.status.INTERNAL, `reflection failed: ${(error as Error).message}`);
            }
            call.write(answer);
          });
          call.on("end", () => call.end());
          call.on("error", () => undefined);
        },
      });
    }
  }

  /** The answer to one request of a reflection stream. */
  answer(request: ReflectionRequest, sent: Set<string>): Record<string, unknown> {
    const base = { valid_host: request.host ?? "", original_request: request };
    switch (request.message_request) {
      case "list_services":
        return { ...base, list_services_response: { service: this.services.map((name) => ({ name })) } };
      case "file_by_filename": {
        const name = request.file_by_filename ?? "";
        if (!this.files.has(name)) return { ...base, ...failure(NOT_FOUND, `no file named ${name}`) };
        return { ...base, ...this.withImports(name, sent) };
      }
      case "file_containing_symbol": {
        const symbol = request.file_containing_symbol ?? "";
        const name = this.fileDefining(symbol);
        if (name === undefined) return { ...base, ...failure(NOT_FOUND, `no symbol named ${symbol}`) };
        return { ...base, ...this.withImports(name, sent) };
      }
      case "file_containing_extension": {
        const { containing_type = "", extension_number = 0 } = request.file_containing_extension ?? {};
        const extendee = this.registry.getMessage(containing_type);
        const extension = extendee && this.registry.getExtensionFor(extendee, extension_number);
        if (extension === undefined) {
          return {
            ...base,
            ...failure(NOT_FOUND, `no extension ${extension_number} of ${containing_type}`),
          };
        }
        return { ...base, ...this.withImports(extension.file.proto.name, sent) };
      }
      case "all_extension_numbers_of_type": {
        const type = request.all_extension_numbers_of_type ?? "";
        if (this.registry.getMessage(type) === undefined) {
          return { ...base, ...failure(NOT_FOUND, `no message type named ${type}`) };
        }
        const numbers: number[] = [];
        for (const desc of this.registry) {
          if (desc.kind === "extension" && desc.extendee.typeName === type) numbers.push(desc.number);
        }
        return {
          ...base,
          all_extension_numbers_response: { base_type_name: type, extension_number: numbers },
        };
      }
      default:
        return { ...base, ...failure(INVALID_ARGUMENT, "the request asks for nothing this server knows") };
    }
  }

  /** The file that defines a message, enum, service, method or extension by its full name. */
  private fileDefining(symbol: string): string | undefined {
    const found = this.registry.get(symbol);
    if (found !== undefined) return found.file.proto.name;
    // A method: <service>.<method>.
    const dot = symbol.lastIndexOf(".");
    const service = dot > 0 ? this.registry.getService(symbol.slice(0, dot)) : undefined;
    if (service?.methods.some((method) => method.name === symbol.slice(dot + 1)))
      return service.file.proto.name;
    return undefined;
  }

  /** A file and everything it imports, less what this stream has sent already (the file itself always). */
  private withImports(name: string, sent: Set<string>): Record<string, unknown> {
    const out: Uint8Array[] = [];
    const visit = (file: string, asked: boolean) => {
      if (!asked && sent.has(file)) return;
      const entry = this.files.get(file);
      if (entry === undefined) return;
      sent.add(file);
      out.push(entry.bytes);
      for (const imported of entry.imports) visit(imported, false);
    };
    visit(name, true);
    return { file_descriptor_response: { file_descriptor_proto: out.map((bytes) => Buffer.from(bytes)) } };
  }
}

function failure(code: number, message: string): Record<string, unknown> {
  return { error_response: { error_code: code, error_message: message } };
}

/** FileDescriptorProto.name (field 1) of a serialized file. */
function fileName(bytes: Uint8Array): string {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.LengthDelimited) return reader.string();
    reader.skip(wireType);
  }
  return "";
}
