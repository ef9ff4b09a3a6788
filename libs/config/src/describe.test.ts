import { describe, expect, it } from "vitest";
import { configSchema, describeConfig, loadConfig, redactConfig } from "./index.js";

describe("describeConfig", () => {
  it("describes every key, with the env var that sets it", () => {
    const entries = describeConfig();

    const missing = entries.filter((entry) => entry.description.trim() === "").map((entry) => entry.key);
    expect(missing).toEqual([]);
    expect(entries.find((entry) => entry.key === "identification.idle_minutes")?.env).toBe(
      "HOLDFAST_IDENTIFICATION__IDLE_MINUTES",
    );
  });

  it("gives the schema's own defaults, before ~ is expanded", () => {
    const byKey = new Map(describeConfig().map((entry) => [entry.key, entry]));

    expect(byKey.get("data_dir")?.default).toBe("~/.holdfast");
    expect(byKey.get("gateway.port")?.default).toBe(4141);
    expect(byKey.get("nats.url")?.default).toBeUndefined();
    expect(byKey.get("prices")?.default).toEqual({});
    expect(byKey.has("prices.<model>.input_per_mtok")).toBe(true);
  });

  it("lists exactly the leaf keys that a parsed config has", () => {
    const keys = new Set(describeConfig().map((entry) => entry.key));
    const full = configSchema.parse({
      gateway: { instance_id: "gw-1" },
      nats: { url: "nats://localhost:4222", server_bin: "nats-server", sync_interval: "always" },
      clickhouse: { url: "http://localhost:8123" },
    });

    const leaves: string[] = [];
    const collect = (value: unknown, path: string[]) => {
      if (value !== null && typeof value === "object" && !Array.isArray(value) && path[0] !== "prices") {
        for (const [key, child] of Object.entries(value)) collect(child, [...path, key]);
      } else {
        leaves.push(path.join("."));
      }
    };
    collect(full, []);

    expect(leaves.filter((key) => !keys.has(key))).toEqual([]);
  });
});

describe("redactConfig", () => {
  it("masks the ClickHouse password and URL credentials, leaving the input untouched", () => {
    const config = loadConfig({
      env: {
        HOLDFAST_CLICKHOUSE__PASSWORD: "s3cret-pw",
        HOLDFAST_CLICKHOUSE__URL: "https://holdfast:s3cret-url@ch.example.com:8443",
        HOLDFAST_NATS__URL: "nats://s3cret-token@nats.example.com:4222",
      },
      homeDir: "/home/tester",
    });

    const printed = JSON.stringify(redactConfig(config));

    expect(printed).not.toContain("s3cret");
    expect(redactConfig(config).clickhouse.password).toBe("***");
    expect(redactConfig(config).clickhouse.url).toBe("https://***@ch.example.com:8443");
    expect(config.clickhouse.password).toBe("s3cret-pw");
  });

  it("leaves an empty password visible as empty", () => {
    const config = loadConfig({ env: {}, homeDir: "/home/tester" });

    expect(redactConfig(config).clickhouse.password).toBe("");
  });
});
