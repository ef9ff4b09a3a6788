import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readdir, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { PythonHttpxInstallError, PythonUnavailableError } from "./errors.js";
import {
  ensurePythonGrpc,
  ensurePythonHttpx,
  type PythonGrpc,
  type PythonHttpx,
  pythonEnv,
} from "./python.js";
import { makeTempDir } from "./temp.js";

const execFileAsync = promisify(execFile);

let httpx: PythonHttpx | undefined;
let unavailable: string | undefined;
let grpc: PythonGrpc | undefined;
let grpcUnavailable: string | undefined;

beforeAll(async () => {
  try {
    // `npm run setup` unpacks it already; on a fresh checkout this installs it.
    httpx = await ensurePythonHttpx();
  } catch (error) {
    if (!(error instanceof PythonUnavailableError)) throw error;
    unavailable = error.message;
  }
  try {
    grpc = await ensurePythonGrpc();
  } catch (error) {
    if (!(error instanceof PythonUnavailableError)) throw error;
    grpcUnavailable = error.message;
  }
});

describe("ensurePythonHttpx", () => {
  it("gives an interpreter and a PYTHONPATH under which httpx talks HTTP", async (ctx) => {
    if (httpx === undefined) return ctx.skip(unavailable);
    const server = createServer((req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ userAgent: req.headers["user-agent"] }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
      const script =
        "import httpx, sys; print(httpx.__file__); print(httpx.get(sys.argv[1]).json()['userAgent'])";
      const { stdout } = await execFileAsync(httpx.python, ["-c", script, url], {
        env: { ...process.env, PYTHONPATH: httpx.pythonPath },
        encoding: "utf8",
      });
      const [file, userAgent] = stdout.trim().split("\n");
      expect(file).toBe(join(httpx.pythonPath, "httpx", "__init__.py"));
      expect(userAgent).toBe(`python-httpx/${httpx.packages["python3-httpx"]?.replace(/-[^-]*$/, "")}`);
    } finally {
      server.close();
    }
  });

  it("leaves a complete unpack alone", async (ctx) => {
    if (httpx === undefined) return ctx.skip(unavailable);
    const marker = join(httpx.pythonPath, "..", "..", "..", "..", "holdfast-installed.json");
    const before = (await stat(marker)).mtimeMs;
    const lines: string[] = [];
    const again = await ensurePythonHttpx({ log: (line) => lines.push(line) });
    expect(again).toEqual(httpx);
    expect((await stat(marker)).mtimeMs).toBe(before);
    expect(lines).toEqual([expect.stringMatching(/^httpx \(0\.23\.3-1\) is already unpacked in /)]);
  });
});

describe("ensurePythonGrpc", () => {
  it("gives an interpreter and an environment under which grpc imports and grpc_tools.protoc generates", async (ctx) => {
    if (grpc === undefined) return ctx.skip(grpcUnavailable);
    await using scratch = await makeTempDir("python-grpc-int");
    const proto =
      'syntax = "proto3";\npackage probe.v1;\nmessage Ping { string text = 1; }\nservice Probe { rpc Echo(Ping) returns (Ping); }\n';
    await writeFile(join(scratch.path, "probe.proto"), proto);
    const script = [
      "import sys, grpc, google.protobuf",
      "from grpc_tools import protoc",
      "assert protoc.main(['protoc', '-I' + sys.argv[1], '--python_out=' + sys.argv[1], '--grpc_python_out=' + sys.argv[1], 'probe.proto']) == 0",
      "sys.path.insert(0, sys.argv[1])",
      "import probe_pb2, probe_pb2_grpc",
      "print(grpc.__file__); print(google.protobuf.__file__); print(probe_pb2.Ping(text='hi').SerializeToString())",
    ].join("\n");
    const { stdout } = await execFileAsync(grpc.python, ["-c", script, scratch.path], {
      env: pythonEnv(grpc),
      encoding: "utf8",
    });
    const [grpcFile, protobufFile, ping] = stdout.trim().split("\n");
    expect(grpcFile).toBe(join(grpc.pythonPath, "grpc", "__init__.py"));
    expect(protobufFile).toBe(join(grpc.pythonPath, "google", "protobuf", "__init__.py"));
    expect(ping).toBe("b'\\n\\x02hi'");
  });

  it("leaves a complete unpack alone", async (ctx) => {
    if (grpc === undefined) return ctx.skip(grpcUnavailable);
    const lines: string[] = [];
    expect(await ensurePythonGrpc({ log: (line) => lines.push(line) })).toEqual(grpc);
    expect(lines).toEqual([expect.stringMatching(/^grpcio \(1\.51\.1-[^)]+\) is already unpacked in /)]);
  });
});

// The real download runs in `npm run setup` (and above, on a fresh checkout); here the
// mirror is unreachable on purpose, to check the failure path without the network.
describe.runIf(existsSync("/usr/bin/apt-get"))("ensurePythonHttpx against an unreachable mirror", () => {
  it("fails with apt's reason, and leaves neither the tools dir nor temp files behind", async (ctx) => {
    if (httpx === undefined) return ctx.skip(unavailable);
    await using scratch = await makeTempDir("python-httpx-int");
    const toolsDir = join(scratch.path, "tools", "python-httpx");
    const privateTmp = join(scratch.path, "tmp");
    await mkdir(privateTmp);
    const originalTmp = process.env.TMPDIR;
    process.env.TMPDIR = privateTmp;
    try {
      const attempt = ensurePythonHttpx({ toolsDir, mirror: "http://127.0.0.1:9/debian" });
      await expect(attempt).rejects.toBeInstanceOf(PythonHttpxInstallError);
      await expect(attempt).rejects.toThrow(/apt-get update for Debian bookworm failed[\s\S]*127\.0\.0\.1:9/);
    } finally {
      if (originalTmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = originalTmp;
    }
    expect(existsSync(join(scratch.path, "tools"))).toBe(false);
    expect(await readdir(privateTmp)).toEqual([]);
  });
});
