import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { readServerInfo } from "@holdfast/natsd";
import { describe, expect, it } from "vitest";
import { freePort, launchNatsServer, makeTempDir, natsUrl } from "./index.js";

describe("global setup", () => {
  it("provides a running JetStream server to every test file", async () => {
    const url = natsUrl();
    expect(url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    const info = await readServerInfo(url);
    expect(info.jetstream).toBe(true);
    expect(info.server_name).toBe("holdfast-int");
  });
});

describe("launchNatsServer", () => {
  it("starts a private server and removes its data on dispose", async () => {
    let storeDir: string;
    {
      await using server = await launchNatsServer({ label: "private" });
      storeDir = server.storeDir;
      expect(server.url).not.toBe(natsUrl());
      expect((await readServerInfo(server.url)).jetstream).toBe(true);
    }
    expect(existsSync(storeDir)).toBe(false);
  });
});

describe("makeTempDir", () => {
  it("removes the directory and its contents on dispose", async () => {
    let path: string;
    {
      await using dir = await makeTempDir("harness test");
      path = dir.path;
      await writeFile(join(dir.path, "file.txt"), "x");
      expect(existsSync(join(path, "file.txt"))).toBe(true);
    }
    expect(existsSync(path)).toBe(false);
  });
});

describe("freePort", () => {
  it("returns a port a listener can bind", async () => {
    const port = await freePort();
    expect(port).toBeGreaterThan(0);
    const { createServer } = await import("node:net");
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", resolve);
    });
    await new Promise((resolve) => server.close(resolve));
  });
});
