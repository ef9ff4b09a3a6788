import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { defaultToolsDir, describeSearch, findNatsServer, searchNatsServer } from "./find.js";
import type { Exec, System } from "./system.js";

type Binary = { version: string } | { error: string } | { output: string };

/** A fake machine: which paths exist, what each prints for --version, what is on PATH. */
function machine(
  binaries: Record<string, Binary>,
  options: { onPath?: string; env?: Record<string, string> } = {},
) {
  const calls: string[] = [];
  const exec: Exec = async (file) => {
    calls.push(file);
    const binary = binaries[file];
    if (binary === undefined) throw Object.assign(new Error(`spawn ${file} ENOENT`), { code: "ENOENT" });
    if ("error" in binary) throw Object.assign(new Error(binary.error), { code: binary.error });
    if ("output" in binary) return { stdout: binary.output, stderr: "" };
    return { stdout: `nats-server: v${binary.version}\n`, stderr: "" };
  };
  const system: Partial<System> = {
    exec,
    which: async (command) => (command === "nats-server" ? options.onPath : undefined),
    env: options.env ?? {},
  };
  return { system, calls };
}

const tools = "/repo/.tools/nats-server";

describe("searchNatsServer", () => {
  it("takes an explicit path first and looks no further", async () => {
    const { system, calls } = machine(
      { "/opt/nats/nats-server": { version: "2.12.0" }, "/usr/bin/nats-server": { version: "2.15.1" } },
      { onPath: "/usr/bin/nats-server" },
    );
    const found = await findNatsServer({ explicit: "/opt/nats/nats-server", toolsDir: tools, system });
    expect(found).toEqual({ path: "/opt/nats/nats-server", version: "2.12.0" });
    expect(calls).toEqual(["/opt/nats/nats-server"]);
  });

  it("checks config, then $HOLDFAST_NATS_SERVER, then PATH, then the tools dir", async () => {
    const { system, calls } = machine(
      { "/from/env": { version: "2.9.10" }, [`${tools}/nats-server`]: { version: "2.15.1" } },
      { onPath: "/usr/sbin/nats-server", env: { HOLDFAST_NATS_SERVER: "/from/env" } },
    );
    const search = await searchNatsServer({ explicit: "/from/config", toolsDir: tools, system });
    expect(calls).toEqual(["/from/config", "/from/env", "/usr/sbin/nats-server", `${tools}/nats-server`]);
    expect(search.found).toEqual({ path: `${tools}/nats-server`, version: "2.15.1" });
    expect(search.steps.map((step) => [step.source, step.outcome])).toEqual([
      ["explicit", "missing"],
      ["env", "too-old"],
      ["path", "missing"],
      ["tools", "usable"],
    ]);
  });

  it("skips a binary older than the minimum and remembers why", async () => {
    const { system } = machine(
      { "/usr/bin/nats-server": { version: "2.9.10" } },
      { onPath: "/usr/bin/nats-server" },
    );
    const search = await searchNatsServer({ toolsDir: tools, system });
    expect(search.found).toBeUndefined();
    expect(search.steps.find((step) => step.source === "path")).toMatchObject({
      outcome: "too-old",
      version: "2.9.10",
      detail: "version 2.9.10 is older than 2.11.0",
    });
  });

  it("honours a different minimum version", async () => {
    const { system } = machine(
      { "/usr/bin/nats-server": { version: "2.9.10" } },
      { onPath: "/usr/bin/nats-server" },
    );
    const found = await findNatsServer({ toolsDir: tools, minVersion: "2.9.0", system });
    expect(found?.version).toBe("2.9.10");
  });

  it("tells apart unexecutable, unreadable and failing binaries", async () => {
    const { system } = machine(
      {
        "/a/nats-server": { error: "EACCES" },
        "/b/nats-server": { output: "hello" },
        [`${tools}/nats-server`]: { error: "ERR_CHILD_PROCESS_STDIO_MAXBUFFER" },
      },
      { onPath: "/b/nats-server", env: { HOLDFAST_NATS_SERVER: "/a/nats-server" } },
    );
    const search = await searchNatsServer({ toolsDir: tools, system });
    expect(search.steps.map((step) => step.outcome)).toEqual([
      "not-set",
      "not-executable",
      "unknown-version",
      "failed",
    ]);
  });

  it("does not run the same binary twice", async () => {
    const { system, calls } = machine(
      { [`${tools}/nats-server`]: { version: "2.10.0" } },
      { onPath: `${tools}/nats-server` },
    );
    const search = await searchNatsServer({ toolsDir: tools, system });
    expect(calls).toEqual([`${tools}/nats-server`]);
    expect(search.steps.at(-1)).toMatchObject({ source: "tools", outcome: "duplicate" });
  });

  it("makes configured paths absolute", async () => {
    const absolute = resolve("bin/nats-server");
    const { system } = machine({ [absolute]: { version: "2.11.0" } });
    expect(await findNatsServer({ explicit: "bin/nats-server", toolsDir: tools, system })).toEqual({
      path: absolute,
      version: "2.11.0",
    });
  });

  it("describes every place it looked when nothing fits", async () => {
    const { system } = machine(
      { "/usr/bin/nats-server": { version: "2.9.10" } },
      { onPath: "/usr/bin/nats-server" },
    );
    const search = await searchNatsServer({ toolsDir: tools, system });
    expect(describeSearch(search)).toBe(
      [
        "No nats-server 2.11.0 or newer was found.",
        "Looked in:",
        "  1. configured path: not set",
        "  2. $HOLDFAST_NATS_SERVER: not set",
        "  3. PATH (/usr/bin/nats-server): version 2.9.10 is older than 2.11.0",
        `  4. Holdfast tools dir (${tools}/nats-server): no such file`,
      ].join("\n"),
    );
  });
});

describe("defaultToolsDir", () => {
  it("is .tools/nats-server at the workspace root in a checkout", () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const root = resolve(here, "../../..");
    expect(defaultToolsDir(here, "/home/someone")).toBe(join(root, ".tools", "nats-server"));
  });

  it("is ~/.holdfast/bin for an installed package", () => {
    const installed = "/srv/app/node_modules/@holdfast/natsd/dist";
    expect(defaultToolsDir(installed, "/home/someone")).toBe("/home/someone/.holdfast/bin");
  });
});
