import { describe, expect, it } from "vitest";
import { NatsServerInstallUnsupportedError, NatsServerNotFoundError } from "./errors.js";
import { ensureNatsServer, installNatsServer } from "./install.js";
import type { Exec, System } from "./system.js";

function system(versions: Record<string, string>, onPath: readonly string[]) {
  const calls: string[] = [];
  const exec: Exec = async (file, args) => {
    calls.push([file, ...args].join(" "));
    const version = versions[file];
    if (version === undefined) throw Object.assign(new Error(`spawn ${file} ENOENT`), { code: "ENOENT" });
    return { stdout: `nats-server: v${version}\n`, stderr: "" };
  };
  const fake: Partial<System> = {
    exec,
    which: async (command) => (onPath.includes(command) ? `/usr/bin/${command}` : undefined),
    env: {},
  };
  return { fake, calls };
}

describe("installNatsServer", () => {
  it("does nothing when a new enough binary is already in the tools dir", async () => {
    const { fake, calls } = system({ "/tools/nats-server": "2.15.1" }, ["apt-get", "dpkg"]);
    const lines: string[] = [];
    const installed = await installNatsServer({
      toolsDir: "/tools",
      system: fake,
      log: (line) => lines.push(line),
    });
    expect(installed).toEqual({ path: "/tools/nats-server", version: "2.15.1" });
    expect(calls).toEqual(["/tools/nats-server --version"]);
    expect(lines).toEqual(["nats-server 2.15.1 is already installed at /tools/nats-server"]);
  });

  it("explains how to install by hand when apt-get is missing", async () => {
    const { fake, calls } = system({}, ["dpkg"]);
    const attempt = installNatsServer({ toolsDir: "/tools", system: fake });
    await expect(attempt).rejects.toBeInstanceOf(NatsServerInstallUnsupportedError);
    await expect(attempt).rejects.toMatchObject({
      code: "HOLDFAST_NATSD_INSTALL_UNSUPPORTED",
      message: expect.stringContaining("apt-get not found on PATH"),
    });
    await expect(attempt).rejects.toThrow(/HOLDFAST_NATS_SERVER/);
    expect(calls.some((call) => call.startsWith("apt-get"))).toBe(false);
  });
});

describe("ensureNatsServer", () => {
  it("returns what the search finds without installing", async () => {
    const { fake, calls } = system({ "/usr/bin/nats-server": "2.12.1" }, ["nats-server", "apt-get", "dpkg"]);
    expect(await ensureNatsServer({ toolsDir: "/tools", system: fake })).toEqual({
      path: "/usr/bin/nats-server",
      version: "2.12.1",
    });
    expect(calls).toEqual(["/usr/bin/nats-server --version"]);
  });

  it("reports both the search and the failed install", async () => {
    const { fake } = system({ "/usr/bin/nats-server": "2.9.10" }, ["nats-server"]);
    const attempt = ensureNatsServer({ toolsDir: "/tools", system: fake });
    await expect(attempt).rejects.toBeInstanceOf(NatsServerNotFoundError);
    await expect(attempt).rejects.toThrow(
      /PATH \(\/usr\/bin\/nats-server\): version 2\.9\.10 is older than 2\.11\.0/,
    );
    await expect(attempt).rejects.toThrow(/apt-get and dpkg not found on PATH/);
  });
});
