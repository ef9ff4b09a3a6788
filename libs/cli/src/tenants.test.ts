import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "@holdfast/config";
import { afterAll, describe, expect, it, vi } from "vitest";
import { CliError } from "./errors.js";
import { describeTenantKey, newTenantKey, tenants } from "./tenants.js";

const dir = mkdtempSync(join(tmpdir(), "holdfast-tenants-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The configuration lines `holdfast tenants key` prints, loaded as the gateway would load them. */
function configFrom(printed: string) {
  const yaml = printed.slice(printed.indexOf("tenants:"), printed.indexOf("\n\nThe tenant's agents"));
  const file = join(dir, `holdfast-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, `${yaml}\n`);
  return loadConfig({ file, env: {} });
}

describe("holdfast tenants key", () => {
  it("makes an hfk_ key of 32 random bytes and the SHA-256 the configuration lists", () => {
    const made = newTenantKey("acme", Buffer.alloc(32, 7));
    expect(made.key).toBe(`hfk_${Buffer.alloc(32, 7).toString("base64url")}`);
    expect(made.key).toMatch(/^hfk_[A-Za-z0-9_-]{43}$/);
    expect(made.sha256).toBe(createHash("sha256").update(made.key).digest("hex"));
    expect(newTenantKey("acme").key).not.toBe(newTenantKey("acme").key);
  });

  it.each(["acme", "team one", "true", "1e3", "ünï 🚀", 'quote"d'])(
    "prints the key once and configuration lines that load as tenant %j's hash, never the key",
    (tenant) => {
      const made = newTenantKey(tenant);
      const printed = describeTenantKey(made);
      expect(printed.split(made.key)).toHaveLength(2);
      const config = configFrom(printed);
      expect(config.tenants).toEqual({ [tenant]: { keys_sha256: [made.sha256] } });
      expect(JSON.stringify(config)).not.toContain(made.key);
    },
  );

  it("refuses a tenant name no tenant may have, saying why", () => {
    expect(() => newTenantKey("acme/eu")).toThrow(CliError);
    expect(() => newTenantKey("acme/eu")).toThrow(/contains "\/"/);
    expect(() => newTenantKey("")).toThrow(/is empty/);
  });
});

describe("holdfast tenants key's options", () => {
  it("takes --data-dir and --config as every command does", async () => {
    const printed: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((line: string) => void printed.push(line));
    try {
      await tenants(["key", "acme", "--data-dir", dir, "--config", join(dir, "holdfast.yaml"), "--json"]);
    } finally {
      log.mockRestore();
    }
    expect(printed).toHaveLength(1);
    const made = JSON.parse(printed[0]!) as { tenant: string; key: string; sha256: string };
    expect(made.tenant).toBe("acme");
    expect(made.sha256).toBe(createHash("sha256").update(made.key).digest("hex"));
  });
});
