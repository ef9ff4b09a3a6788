import type { ControlStanza, DebianRelation } from "@holdfast/natsd";
import { describe, expect, it } from "vitest";
import { PythonHttpxInstallError, PythonUnavailableError } from "./errors.js";
import { resolvePythonPackages } from "./python.js";

// The Depends fields of Debian bookworm's records, as `apt-cache show` printed them.
const BOOKWORM: Record<string, string> = {
  "python3-httpx":
    "python3-click (>= 8), python3-pygments, python3-rich (>= 10), python3-certifi, python3-httpcore (>= 0.15.0), python3-rfc3986 (>= 1.3.0), python3-sniffio, python3:any",
  "python3-httpcore": "python3-h11 (>= 0.11), python3-anyio, python3-certifi, python3-sniffio, python3:any",
  "python3-h11": "python3-typing-extensions | python3 (>> 3.8), python3:any",
  "python3-anyio": "python3-idna, python3-sniffio, python3-typing-extensions | python3 (>> 3.8), python3:any",
  "python3-sniffio": "python3:any (>= 3.7~)",
  "python3-idna": "python3:any",
  "python3-certifi": "ca-certificates, python3:any",
  "python3-rfc3986": "python3-idna, python3:any",
  "python3-click": "python3-colorama, python3-importlib-metadata | python3 (>> 3.8), python3:any",
  "python3-colorama": "python3:any",
  "python3-pygments": "python3-pkg-resources, python3:any",
  "python3-pkg-resources": "python3:any",
  "python3-rich":
    "python3-markdown-it, python3-pygments (>= 2.14.0), python3-typing-extensions (>= 3.7.4) | python3 (>> 3.9), python3:any",
  "python3-markdown-it": "python3-mdurl, python3-typing-extensions | python3 (>> 3.8), python3:any",
  "python3-mdurl": "python3:any",
  "python3-typing-extensions": "python3:any",
  "python3-importlib-metadata": "python3-zipp (>= 0.5), python3:any",
  "python3-zipp": "python3:any",
};

function index(records: Record<string, string>, overrides: Record<string, Partial<ControlStanza>> = {}) {
  const asked: string[][] = [];
  const show = async (names: readonly string[]): Promise<ControlStanza[]> => {
    asked.push([...names]);
    return names.map((name) => {
      const depends = records[name];
      if (depends === undefined) throw new Error(`no package ${name}`);
      return { Package: name, Version: "1", Architecture: "all", Depends: depends, ...overrides[name] };
    });
  };
  return { show, asked };
}

const names = (stanzas: readonly ControlStanza[]) => stanzas.map((stanza) => stanza.Package).sort();

describe("resolvePythonPackages", () => {
  it("takes httpx's Debian dependency closure, leaving the interpreter and non-Python packages to the host", async () => {
    const { show } = index(BOOKWORM);
    expect(names(await resolvePythonPackages(["python3-httpx"], show, "3.11.2"))).toEqual([
      "python3-anyio",
      "python3-certifi",
      "python3-click",
      "python3-colorama",
      "python3-h11",
      "python3-httpcore",
      "python3-httpx",
      "python3-idna",
      "python3-markdown-it",
      "python3-mdurl",
      "python3-pkg-resources",
      "python3-pygments",
      "python3-rfc3986",
      "python3-rich",
      "python3-sniffio",
    ]);
  });

  it("asks the index once per level of the tree, never twice for a package", async () => {
    const { show, asked } = index(BOOKWORM);
    await resolvePythonPackages(["python3-httpx"], show, "3.11.2");
    const all = asked.flat();
    expect(new Set(all).size).toBe(all.length);
    expect(asked[0]).toEqual(["python3-httpx"]);
    expect(asked.length).toBeLessThanOrEqual(4);
  });

  it("takes the backport package when the interpreter is too old for the alternative", async () => {
    const { show } = index(BOOKWORM);
    const resolved = names(await resolvePythonPackages(["python3-httpx"], show, "3.7.3"));
    expect(resolved).toContain("python3-typing-extensions");
    expect(resolved).toContain("python3-importlib-metadata");
    expect(resolved).toContain("python3-zipp");
  });

  it("refuses a package with compiled modules", async () => {
    const { show } = index(BOOKWORM, { "python3-idna": { Architecture: "amd64" } });
    const attempt = resolvePythonPackages(["python3-httpx"], show, "3.11.2");
    await expect(attempt).rejects.toBeInstanceOf(PythonHttpxInstallError);
    await expect(attempt).rejects.toThrow(/python3-idna is built for amd64/);
  });

  it("says which dependency the interpreter cannot satisfy", async () => {
    const { show } = index({ "python3-new": "python3:any (>= 3.13~)" });
    const attempt = resolvePythonPackages(["python3-new"], show, "3.11.2");
    await expect(attempt).rejects.toBeInstanceOf(PythonUnavailableError);
    await expect(attempt).rejects.toThrow(
      "python3-new depends on python3:any (>= 3.13~), which Python 3.11.2",
    );
  });

  it("follows Pre-Depends as well as Depends", async () => {
    const { show } = index(
      { "python3-a": "python3:any", "python3-b": "python3:any" },
      { "python3-a": { "Pre-Depends": "python3-b" } },
    );
    expect(names(await resolvePythonPackages(["python3-a"], show, "3.11.2"))).toEqual([
      "python3-a",
      "python3-b",
    ]);
  });
});

// bookworm's grpcio and what it links, as `apt-cache show` printed them (amd64).
const BOOKWORM_GRPC: Record<string, string> = {
  "python3-grpcio":
    "python3 (<< 3.12), python3 (>= 3.11~), python3:any, python3-protobuf (>= 3.21.0~), libabsl20220623 (>= 0~20220623.0-1), libc-ares2 (>= 1.11.0~rc1), libc6 (>= 2.34), libre2-9 (>= 20150701+dfsg), libssl3 (>= 3.0.0), libstdc++6 (>= 12), zlib1g (>= 1:1.1.4)",
  "python3-protobuf":
    "libc6 (>= 2.34), libgcc-s1 (>= 3.0), libprotobuf32 (>= 3.21.12), libstdc++6 (>= 11), python3 (<< 3.12), python3 (>= 3.11~), python3:any",
  "python3-grpc-tools":
    "python3 (<< 3.12), python3 (>= 3.11~), python3-grpcio, python3-protobuf, python3:any, libc6 (>= 2.15), libgcc-s1 (>= 3.0), libstdc++6 (>= 11)",
  "libc-ares2": "libc6 (>= 2.17)",
  "libre2-9": "libc6 (>= 2.34), libgcc-s1 (>= 3.0), libstdc++6 (>= 11)",
  libprotobuf32: "libc6 (>= 2.34), libgcc-s1 (>= 3.0), libstdc++6 (>= 11), zlib1g (>= 1:1.1.4)",
};
const GRPC_ROOTS = ["python3-grpcio", "python3-protobuf", "python3-grpc-tools"];

function host(installed: readonly string[]) {
  const asked: string[] = [];
  return {
    asked,
    native: {
      architecture: "amd64",
      installed: async (relation: DebianRelation) => {
        asked.push(relation.name);
        return installed.includes(relation.name);
      },
    },
  };
}

describe("resolvePythonPackages with compiled modules", () => {
  const amd64 = Object.fromEntries(
    Object.keys(BOOKWORM_GRPC).map((name) => [name, { Architecture: "amd64" }]),
  );
  // What a bookworm machine with Python but without gRPC has.
  const base = ["libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libssl3", "libabsl20220623"];

  it("takes grpcio's packages for this architecture, and the libraries they link that the machine lacks", async () => {
    const { show } = index(BOOKWORM_GRPC, amd64);
    const { native, asked } = host(base);
    expect(names(await resolvePythonPackages(GRPC_ROOTS, show, "3.11.2", native))).toEqual([
      "libc-ares2",
      "libprotobuf32",
      "libre2-9",
      "python3-grpc-tools",
      "python3-grpcio",
      "python3-protobuf",
    ]);
    // The interpreter is never looked up in dpkg: its version is the one that runs them.
    expect(asked).not.toContain("python3");
  });

  it("leaves the libraries the machine has installed", async () => {
    const { show } = index(BOOKWORM_GRPC, amd64);
    const { native } = host([...base, "libc-ares2", "libre2-9", "libprotobuf32"]);
    expect(names(await resolvePythonPackages(GRPC_ROOTS, show, "3.11.2", native))).toEqual([
      "python3-grpc-tools",
      "python3-grpcio",
      "python3-protobuf",
    ]);
  });

  it("says so when the interpreter is not the one the modules are built for", async () => {
    const { show } = index(BOOKWORM_GRPC, amd64);
    const attempt = resolvePythonPackages(GRPC_ROOTS, show, "3.13.5", host(base).native);
    await expect(attempt).rejects.toBeInstanceOf(PythonUnavailableError);
    await expect(attempt).rejects.toThrow("python3-grpcio depends on python3 (<< 3.12), which Python 3.13.5");
  });

  it("never unpacks a C library of its own", async () => {
    const { show } = index(BOOKWORM_GRPC, amd64);
    const attempt = resolvePythonPackages(GRPC_ROOTS, show, "3.11.2", host([]).native);
    await expect(attempt).rejects.toBeInstanceOf(PythonUnavailableError);
    await expect(attempt).rejects.toThrow(/depends on libc6 \(>= 2\.34\), which this machine does not have/);
  });

  it("refuses a package built for another architecture", async () => {
    const { show } = index(BOOKWORM_GRPC, { ...amd64, "python3-protobuf": { Architecture: "arm64" } });
    const attempt = resolvePythonPackages(GRPC_ROOTS, show, "3.11.2", host(base).native);
    await expect(attempt).rejects.toBeInstanceOf(PythonHttpxInstallError);
    await expect(attempt).rejects.toThrow("python3-protobuf is built for arm64, not this machine's amd64");
  });
});
