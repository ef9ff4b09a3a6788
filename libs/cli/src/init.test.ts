import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "@holdfast/config";
import { afterAll, describe, expect, it } from "vitest";
import { initialConfig, newToken } from "./init.js";

const dir = mkdtempSync(join(tmpdir(), "holdfast-init-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("holdfast init's file", () => {
  it("loads as a configuration with its tokens and every other key at its default", () => {
    const tokens = { control: newToken(), read: newToken() };
    const file = join(dir, "holdfast.yaml");
    writeFileSync(file, initialConfig(tokens));
    const config = loadConfig({ file, env: {} });
    const defaults = loadConfig({ env: {} });
    expect(config.control).toEqual({ ...defaults.control, token: tokens.control, read_token: tokens.read });
    expect({ ...config, control: defaults.control }).toEqual(defaults);
  });

  it("makes tokens that are long, URL-safe and new each time", () => {
    const a = newToken();
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(newToken()).not.toBe(a);
  });
});
