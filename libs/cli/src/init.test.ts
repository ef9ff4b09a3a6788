import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadConfig } from "@holdfast/config";
import { afterAll, describe, expect, it, vi } from "vitest";
import { init, initialConfig } from "./init.js";

const dir = mkdtempSync(join(tmpdir(), "holdfast-init-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("holdfast init's file", () => {
  it("loads as a configuration with every key at its default, the gateway's port named", () => {
    const file = join(dir, "holdfast.yaml");
    writeFileSync(file, initialConfig());
    expect(loadConfig({ file, env: {} })).toEqual(loadConfig({ env: {} }));
  });

  it("holds no secret: the tokens are the credentials directory's", () => {
    expect(initialConfig()).not.toMatch(/^\s*(token|read_token|worker_token):/m);
  });
});

describe("holdfast init", () => {
  it("with no --config writes the file into the data dir, says where, and keeps the tokens out of it", async () => {
    const dataDir = join(dir, "stack");
    const printed: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((line: string) => void printed.push(line));
    try {
      await init(["--data-dir", dataDir]);
    } finally {
      log.mockRestore();
    }
    const file = join(dataDir, "holdfast.yaml");
    expect(printed.join("\n")).toContain(`Wrote ${file} (every command reads it from there)`);
    expect(statSync(dataDir).mode & 0o777).toBe(0o700);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const written = readFileSync(file, "utf8");
    for (const name of ["control.token", "read.token", "worker.token", "budget.token"]) {
      const token = readFileSync(join(dataDir, "credentials", name), "utf8").trim();
      expect(token.length).toBeGreaterThan(20);
      expect(written).not.toContain(token);
    }
    await expect(init(["--data-dir", dataDir])).rejects.toThrow(/exists; pass --force to replace it/);
  });

  it("a holdfast.yaml written into a checkout is ignored by git, so neither a commit nor the linter takes it", () => {
    const root = fileURLToPath(new URL("../../..", import.meta.url));
    for (const path of ["holdfast.yaml", "services/gateway/holdfast.yaml"]) {
      const ignored = spawnSync("git", ["check-ignore", "--no-index", "-q", path], { cwd: root });
      expect(ignored.status, `${path}: ${ignored.stderr}`).toBe(0);
    }
    const biome = JSON.parse(readFileSync(join(root, "biome.json"), "utf8")) as {
      vcs: { useIgnoreFile: boolean };
    };
    expect(biome.vcs.useIgnoreFile).toBe(true);
  });
});
