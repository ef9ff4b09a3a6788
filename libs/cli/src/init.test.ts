import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "@holdfast/config";
import { afterAll, describe, expect, it } from "vitest";
import { initialConfig } from "./init.js";

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
