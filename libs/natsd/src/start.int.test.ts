import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NatsServerStartError } from "./errors.js";
import { parseNatsUrl, readServerInfo } from "./info.js";
import { ensureNatsServer } from "./install.js";
import { startNatsServer } from "./start.js";

let binary: string;
let scratch: string;

beforeAll(async () => {
  binary = (await ensureNatsServer()).path;
  scratch = await mkdtemp(join(tmpdir(), "natsd-int-"));
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

/**
 * Just enough of the NATS text protocol for one request/reply, so this package can test
 * JetStream persistence without depending on a client library.
 */
async function request(url: string, subject: string, body: unknown): Promise<Record<string, unknown>> {
  const { hostname, port } = parseNatsUrl(url);
  const payload = Buffer.from(JSON.stringify(body));
  const socket = connect({ host: hostname, port });
  try {
    return await new Promise((resolve, reject) => {
      let buffer = Buffer.alloc(0);
      socket.on("error", reject);
      socket.on("data", (chunk: Buffer) => {
        buffer = Buffer.concat([buffer, chunk]);
        for (;;) {
          const end = buffer.indexOf("\r\n");
          if (end === -1) return;
          const line = buffer.subarray(0, end).toString();
          if (line.startsWith("INFO ")) {
            socket.write(`CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.test 1\r\n`);
            socket.write(`PUB ${subject} _INBOX.test ${payload.length}\r\n`);
            socket.write(Buffer.concat([payload, Buffer.from("\r\n")]));
          } else if (line.startsWith("-ERR")) {
            reject(new Error(line));
          } else if (line.startsWith("MSG ")) {
            const size = Number(line.split(" ").at(-1));
            if (buffer.length < end + 2 + size + 2) return;
            resolve(JSON.parse(buffer.subarray(end + 2, end + 2 + size).toString()));
            return;
          } else if (line === "PING") {
            socket.write("PONG\r\n");
          }
          buffer = buffer.subarray(end + 2);
        }
      });
    });
  } finally {
    socket.destroy();
  }
}

describe("startNatsServer", () => {
  it("serves JetStream on a free port and keeps its data across a restart", async () => {
    const storeDir = join(scratch, "store");

    {
      await using server = await startNatsServer({
        binary,
        storeDir,
        serverName: "natsd-int",
        monitor: true,
      });
      expect(server.url).toBe(`nats://127.0.0.1:${server.port}`);

      const info = await readServerInfo(server.url);
      expect(info).toMatchObject({ jetstream: true, server_name: "natsd-int", port: server.port });

      const health = await fetch(`${server.monitorUrl}/healthz?js-enabled-only=true`);
      expect(health.status).toBe(200);

      const created = await request(server.url, "$JS.API.STREAM.CREATE.KEEP", {
        name: "KEEP",
        subjects: ["keep.>"],
        storage: "file",
      });
      expect(created.error).toBeUndefined();
      const ack = await request(server.url, "keep.one", { hello: "world" });
      expect(ack).toMatchObject({ stream: "KEEP", seq: 1 });
    }

    await using again = await startNatsServer({ binary, storeDir });
    const stream = await request(again.url, "$JS.API.STREAM.INFO.KEEP", {});
    expect(stream).toMatchObject({ config: { name: "KEEP" }, state: { messages: 1, last_seq: 1 } });
  });

  it("stops on dispose and reports the exit", async () => {
    const server = await startNatsServer({ binary, storeDir: join(scratch, "dispose") });
    await server[Symbol.asyncDispose]();
    await expect(server.exited).resolves.toBe(0);
    await expect(readServerInfo(server.url, { timeoutMs: 1_000 })).rejects.toThrow();
    await server.stop();
  });

  it("writes the log to logFile when asked", async () => {
    const logFile = join(scratch, "logged", "server.log");
    await using server = await startNatsServer({ binary, storeDir: join(scratch, "logged"), logFile });
    expect(server.output()).toBe("");
    expect(await readdir(join(scratch, "logged"))).toContain("server.log");
  });

  it("applies settings that only exist in the config file", async () => {
    await using server = await startNatsServer({
      binary,
      storeDir: join(scratch, "configured"),
      maxPayload: 4 * 1024 * 1024,
      syncInterval: "always",
    });
    expect((await readServerInfo(server.url)).max_payload).toBe(4 * 1024 * 1024);
  });

  it("runs Go on as many CPUs as asked, and on Go's default otherwise", async () => {
    const varz = async (url: string | undefined) =>
      (await (await fetch(`${url}/varz`)).json()) as { gomaxprocs: number; cores: number };
    {
      await using one = await startNatsServer({
        binary,
        storeDir: join(scratch, "gomaxprocs-1"),
        monitor: true,
        gomaxprocs: 1,
      });
      expect((await varz(one.monitorUrl)).gomaxprocs).toBe(1);
    }
    await using unset = await startNatsServer({
      binary,
      storeDir: join(scratch, "gomaxprocs-0"),
      monitor: true,
    });
    const stats = await varz(unset.monitorUrl);
    expect(stats.gomaxprocs).toBe(Number(process.env.GOMAXPROCS || stats.cores));
    // 0 is Go's own default, whatever this process was given.
    const given = process.env.GOMAXPROCS;
    process.env.GOMAXPROCS = "1";
    try {
      await using zero = await startNatsServer({
        binary,
        storeDir: join(scratch, "gomaxprocs-zero"),
        monitor: true,
        gomaxprocs: 0,
      });
      expect((await varz(zero.monitorUrl)).gomaxprocs).toBe(stats.cores);
    } finally {
      if (given === undefined) delete process.env.GOMAXPROCS;
      else process.env.GOMAXPROCS = given;
    }
  });

  it("rejects with the server's own words when it exits during startup", async () => {
    const attempt = startNatsServer({
      binary,
      storeDir: join(scratch, "bad"),
      extraArgs: ["--no-such-flag"],
    });
    await expect(attempt).rejects.toBeInstanceOf(NatsServerStartError);
    await expect(attempt).rejects.toThrow(/exited \(code \d+\) before it was ready[\s\S]*no-such-flag/);
  });

  it("rejects clearly when the binary does not exist", async () => {
    const attempt = startNatsServer({
      binary: join(scratch, "missing-nats-server"),
      storeDir: join(scratch, "none"),
    });
    await expect(attempt).rejects.toMatchObject({
      code: "HOLDFAST_NATSD_START_FAILED",
      message: expect.stringContaining("ENOENT"),
    });
  });
});

describe("startNatsServer, when a port it let nats-server pick is taken before it is bound", () => {
  it("starts it again, on a port picked anew", async () => {
    // A stand-in for nats-server that fails the first time as nats-server does when another
    // process took the port it picked (`-m -1`) before it listened on it, then is the real one.
    const dir = await mkdtemp(join(scratch, "taken-"));
    const marker = join(dir, "failed-once");
    const script = join(dir, "nats-server");
    await writeFile(
      script,
      `#!/bin/sh\nif [ ! -e "${marker}" ]; then\n  : > "${marker}"\n` +
        `  echo '[1] [FTL] Error listening on port: 127.0.0.1:40101, "listen tcp 127.0.0.1:40101: bind: address already in use"' >&2\n` +
        `  exit 1\nfi\nexec "${binary}" "$@"\n`,
    );
    await chmod(script, 0o755);
    await using server = await startNatsServer({
      binary: script,
      storeDir: join(dir, "store"),
      monitor: true,
    });
    expect(server.monitorUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    await expect(readdir(dir)).resolves.toContain("failed-once");
  });

  it("does not try again when nats-server fails for anything else", async () => {
    const dir = await mkdtemp(join(scratch, "broken-"));
    const count = join(dir, "runs");
    const script = join(dir, "nats-server");
    await writeFile(script, `#!/bin/sh\necho run >> "${count}"\necho '[FTL] bad config' >&2\nexit 1\n`);
    await chmod(script, 0o755);
    await expect(startNatsServer({ binary: script, storeDir: join(dir, "store") })).rejects.toThrow(
      NatsServerStartError,
    );
    expect((await readFile(count, "utf8")).trim().split("\n")).toHaveLength(1);
  });
});
