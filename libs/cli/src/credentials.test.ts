import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PRINCIPALS } from "@holdfast/bus";
import { afterAll, describe, expect, it } from "vitest";
import { ensureCredentials, readCredentials } from "./credentials.js";

const dataDir = mkdtempSync(join(tmpdir(), "holdfast-credentials-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe("the stack's credentials (holdfast credentials, --rotate)", () => {
  it("are made once, each principal's nkey and each token in a file its owner alone reads, and kept after", () => {
    const made = ensureCredentials(dataDir);
    expect(statSync(made.dir).mode & 0o777).toBe(0o700);
    const files = readdirSync(made.dir);
    expect(files.sort()).toEqual(
      [
        ...PRINCIPALS.map((p) => `nats-${p}.nk`),
        "control.token",
        "read.token",
        "budget.token",
        "worker.token",
      ].sort(),
    );
    for (const file of files) expect(statSync(join(made.dir, file)).mode & 0o777, file).toBe(0o600);
    expect(new Set(PRINCIPALS.map((p) => made.nats[p].publicKey)).size).toBe(PRINCIPALS.length);
    expect(new Set(Object.values(made.tokens)).size).toBe(4);
    expect(ensureCredentials(dataDir)).toEqual(made);
    expect(readCredentials(dataDir)).toEqual(made);
  });

  it("are each replaced by a rotation, which the stack's next start reads", () => {
    const before = ensureCredentials(dataDir);
    const after = ensureCredentials(dataDir, { rotate: true });
    for (const principal of PRINCIPALS) {
      expect(after.nats[principal].publicKey, principal).not.toBe(before.nats[principal].publicKey);
    }
    for (const name of Object.keys(before.tokens) as (keyof typeof before.tokens)[]) {
      expect(after.tokens[name], name).not.toBe(before.tokens[name]);
    }
    expect(readCredentials(dataDir)).toEqual(after);
  });

  it("say what is wrong with them, rather than be taken for none: a file missing, a seed that is not one", () => {
    const made = ensureCredentials(dataDir);
    rmSync(made.tokenFiles.budget);
    expect(() => readCredentials(dataDir)).toThrow(/incomplete \(.*budget\.token is missing\).*credentials/);
    ensureCredentials(dataDir);
    writeFileSync(made.nats.gateway.file, "not a seed\n", { mode: 0o600 });
    expect(() => readCredentials(dataDir)).toThrow(/cannot read Holdfast's credentials in/);
    expect(readCredentials(join(dataDir, "elsewhere"))).toBeUndefined();
  });
});
