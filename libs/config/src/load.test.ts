import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, type LoadConfigOptions, loadConfig } from "./index.js";

const HOME = "/home/tester";
const CWD = "/srv/holdfast";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Writes a config file into a fresh temp directory and returns its absolute path. */
const givenFile = (yaml: string, name = "holdfast.yaml"): string => {
  const dir = mkdtempSync(join(tmpdir(), "holdfast-config-"));
  dirs.push(dir);
  const path = join(dir, name);
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, yaml);
  return path;
};

// Tests never see the developer's own HOLDFAST_* variables or home directory.
const load = (options: LoadConfigOptions = {}) =>
  loadConfig({ env: {}, cwd: CWD, homeDir: HOME, ...options });

const loadError = (options: LoadConfigOptions): ConfigError => {
  try {
    load(options);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error("expected loadConfig to throw a ConfigError");
};

describe("loadConfig", () => {
  describe("given no file, env or flags", () => {
    it("returns every default, with data_dir expanded under the home directory", () => {
      const config = load();

      expect(config).toEqual({
        data_dir: `${HOME}/.holdfast`,
        free_port_if_taken: false,
        log_level: "info",
        http: {
          header_timeout_ms: 20_000,
          request_timeout_ms: 120_000,
          idle_timeout_ms: 75_000,
          max_headers: 500,
          max_json_depth: 128,
        },
        gateway: {
          host: "127.0.0.1",
          port: 4141,
          upstream: "auto",
          upstreams: {},
          max_body_bytes: 33_554_432,
          max_answer_bytes: 67_108_864,
          max_event_bytes: 16_777_216,
          upstream_timeout_ms: 600_000,
          heartbeat_ms: 10_000,
          outcome_defer_ms: 2,
          upstream_connections: 0,
          passthrough: "allow",
        },
        nats: { host: "127.0.0.1", port: 0, prefix: "hf", replicas: 1, watch_linger_ms: 100 },
        clickhouse: { database: "holdfast", username: "default", password: "", reader_password: "" },
        analytics: { max_rows: 10_000, max_execution_ms: 30_000, max_memory_bytes: 1_073_741_824 },
        projector: {
          host: "127.0.0.1",
          port: 0,
          batch_size: 5_000,
          linger_ms: 1_000,
          consumer: "projector",
          ack_wait_ms: 30_000,
          lease_ms: 10_000,
        },
        identification: {
          headers: ["X-Holdfast-Run", "X-Run-Id", "X-Session-Id", "X-Conversation-Id"],
          body_fields: [
            "metadata.run_id",
            "metadata.session_id",
            "metadata.conversation_id",
            "metadata.thread_id",
            "metadata.trace_id",
            "metadata.user_id",
          ],
          traceparent: true,
          idle_minutes: 30,
          tag_headers: ["X-Holdfast-Tag"],
          tag_fields: ["metadata.tag"],
          tenant_headers: ["X-Holdfast-Tenant"],
        },
        tenants: {},
        prices: {},
        pricing: { unknown_usd_per_mtok: 75, unknown: "charge" },
        limits: { max_cost_usd: 0, max_steps: 0, max_minutes: 0, max_tokens_per_minute: 0 },
        limits_by_tag: {},
        budgets: {},
        tool_gate: { on_match: "hold", deny: [] },
        tool_gate_by_tag: {},
        max_repeated_tool_calls: 0,
        redact: { patterns: [] },
        snapshots: { enabled: true, max_bytes: 33554432, max_storage_bytes: 4294967296 },
        routes: {},
        routing: { breaker_failures: 3, breaker_open_s: 30, cooldown_s: 10 },
        predict: {
          enabled: true,
          wait_threshold_s: 15,
          window_shapes: {},
          limits: {},
          max_wait_s: 300,
          on_checkpoint: "auto_resume",
          compaction: "off",
          summary_model: "",
          compaction_keep: 4,
          k: 3,
          k_max: 8,
          k_step: 1,
          max_retries: 2,
          estimator: "moving_average",
          features: ["model", "tag", "tools", "messages", "input"],
          shared: true,
          slice_ms: 2_000,
          priority_by_tag: {},
          priority_aging_s: 10,
          headers: {},
        },
        on_trip: "hold",
        hold: {
          keepalive_ms: 15_000,
          keepalive_1xx: true,
          max_parked: 10_000,
          max_parked_per_run: 100,
          max_parked_bytes: 1073741824,
        },
        control: { host: "127.0.0.1", port: 4142, grpc_port: 4143, insecure: false },
        budget: { host: "127.0.0.1", insecure: false, port: 0, lease_ms: 30_000 },
        scheduler: { host: "127.0.0.1", grpc_port: 4144, port: 4145, lease_ms: 30_000 },
      });
    });
  });

  describe("given a config file", () => {
    const yaml = [
      "log_level: debug",
      "gateway:",
      "  port: 8080",
      "  upstream: https://api.anthropic.com/",
      "nats:",
      "  url: nats://nats.internal:4222",
      "  sync_interval: 2m",
      "prices:",
      "  gpt-4o: { input_per_mtok: 2.5, output_per_mtok: 10, cached_input_per_mtok: 1.25 }",
      "",
    ].join("\n");

    it("when named by opts.file, its values replace the defaults and the rest keep theirs", () => {
      const file = givenFile(yaml);

      const config = load({ file });

      expect(config.log_level).toBe("debug");
      expect(config.gateway.port).toBe(8080);
      expect(config.gateway.upstream).toBe("https://api.anthropic.com");
      expect(config.gateway.host).toBe("127.0.0.1");
      expect(config.nats.url).toBe("nats://nats.internal:4222");
      expect(config.nats.sync_interval).toBe("2m");
      expect(config.prices).toEqual({
        "gpt-4o": { input_per_mtok: 2.5, output_per_mtok: 10, cached_input_per_mtok: 1.25 },
      });
    });

    it("when named by HOLDFAST_CONFIG, it is read the same way", () => {
      const file = givenFile(yaml);

      const config = load({ env: { HOLDFAST_CONFIG: file } });

      expect(config.gateway.port).toBe(8080);
    });

    it("when opts.file and HOLDFAST_CONFIG both name a file, opts.file wins", () => {
      const flagFile = givenFile("gateway: { port: 1111 }\n");
      const envFile = givenFile("gateway: { port: 2222 }\n");

      const config = load({ file: flagFile, env: { HOLDFAST_CONFIG: envFile } });

      expect(config.gateway.port).toBe(1111);
    });

    it("when the file is empty, every key keeps its default", () => {
      const file = givenFile("# nothing set yet\n");

      expect(load({ file })).toEqual(load());
    });
  });

  describe("precedence: defaults < file < env < flags", () => {
    it("an env var beats the file", () => {
      const file = givenFile("gateway:\n  port: 8080\n  host: 0.0.0.0\n");

      const config = load({ file, env: { HOLDFAST_GATEWAY__PORT: "9090" } });

      expect(config.gateway.port).toBe(9090);
      expect(config.gateway.host).toBe("0.0.0.0");
    });

    it("a flag beats an env var", () => {
      const config = load({
        env: { HOLDFAST_GATEWAY__PORT: "9090", HOLDFAST_LOG_LEVEL: "warn" },
        overrides: { gateway: { port: 7070 } },
      });

      expect(config.gateway.port).toBe(7070);
      expect(config.log_level).toBe("warn");
    });

    it("a flag left undefined does not hide the env value", () => {
      const config = load({
        env: { HOLDFAST_GATEWAY__PORT: "9090" },
        overrides: { gateway: { port: undefined } },
      });

      expect(config.gateway.port).toBe(9090);
    });

    it("a specific env var beats the same key inside a whole-section env var", () => {
      const config = load({
        env: { HOLDFAST_GATEWAY: "{ port: 1, host: 10.0.0.1 }", HOLDFAST_GATEWAY__PORT: "2" },
      });

      expect(config.gateway).toMatchObject({ port: 2, host: "10.0.0.1" });
    });

    it("an empty env var counts as unset", () => {
      const file = givenFile("gateway: { port: 8080 }\n");

      const config = load({ file, env: { HOLDFAST_GATEWAY__PORT: "", HOLDFAST_CONFIG: "" } });

      expect(config.gateway.port).toBe(8080);
    });
  });

  describe("env values", () => {
    it("are read as YAML scalars: numbers, booleans, and flow lists", () => {
      const config = load({
        env: {
          HOLDFAST_DATA_DIR: "/var/lib/holdfast",
          HOLDFAST_IDENTIFICATION__IDLE_MINUTES: "7.5",
          HOLDFAST_IDENTIFICATION__TRACEPARENT: "false",
          HOLDFAST_IDENTIFICATION__HEADERS: "[X-Trace, X-Job]",
          HOLDFAST_NATS__URL: "tls://nats.example.com:4222",
        },
      });

      expect(config.data_dir).toBe("/var/lib/holdfast");
      expect(config.identification.idle_minutes).toBe(7.5);
      expect(config.identification.traceparent).toBe(false);
      expect(config.identification.headers).toEqual(["X-Trace", "X-Job"]);
      expect(config.nats.url).toBe("tls://nats.example.com:4222");
    });

    it("for a list key, also accept comma-separated items", () => {
      const config = load({ env: { HOLDFAST_IDENTIFICATION__TAG_FIELDS: "metadata.tag, metadata.team" } });

      expect(config.identification.tag_fields).toEqual(["metadata.tag", "metadata.team"]);
    });

    it("for a string key, keep the text exactly, even when it looks like a number or a comment", () => {
      const config = load({
        env: { HOLDFAST_CLICKHOUSE__PASSWORD: "#0123", HOLDFAST_GATEWAY__INSTANCE_ID: "42" },
      });

      expect(config.clickhouse.password).toBe("#0123");
      expect(config.gateway.instance_id).toBe("42");
    });

    it("ignore HOLDFAST_ variables that are not config keys", () => {
      const config = load({
        env: {
          HOLDFAST_NATS_SERVER: "/opt/nats-server",
          HOLDFAST_LOG_PRETTY: "1",
          HOLDFAST_TEST_SEED: "7",
          OTHER_VAR: "x",
        },
      });

      expect(config).toEqual(load());
    });
  });

  describe("routes", () => {
    it("take a list of targets, or {targets, expose_model}; both read the same", () => {
      const file = givenFile(
        [
          "routes:",
          "  fast:",
          "    - { upstream: https://api.groq.com/openai/v1/, model: llama-3.1-8b-instant, key_env: GROQ_API_KEY }",
          "    - { upstream: https://api.openai.com/v1, model: gpt-4o-mini }",
          "  smart:",
          "    targets: [{ upstream: https://api.anthropic.com/v1, model: claude-sonnet-4-5 }]",
          "    expose_model: true",
          "",
        ].join("\n"),
      );
      const config = load({ file });
      expect(config.routes).toEqual({
        fast: {
          targets: [
            {
              upstream: "https://api.groq.com/openai/v1",
              model: "llama-3.1-8b-instant",
              key_env: "GROQ_API_KEY",
            },
            { upstream: "https://api.openai.com/v1", model: "gpt-4o-mini" },
          ],
          expose_model: false,
        },
        smart: {
          targets: [{ upstream: "https://api.anthropic.com/v1", model: "claude-sonnet-4-5" }],
          expose_model: true,
        },
      });
    });

    it("a route without targets is an error naming the alias", () => {
      const file = givenFile("routes:\n  fast: []\n");
      const error = loadError({ file });
      expect(error.key).toBe("routes.fast");
      expect(error.message).toMatch(/routes\.fast: expected at least one route target/);
    });
  });

  describe("predict.limits", () => {
    const limits =
      "predict:\n  limits:\n    http://llm.internal:8000:\n      window_s: 60\n      tokens: 30000\n";

    it("reads an upstream's declared limits, a window of a minute when not said", () => {
      const config = load({ file: givenFile(limits.replace("      window_s: 60\n", "")) });
      expect(config.predict.limits).toEqual({ "http://llm.internal:8000": { window_s: 60, tokens: 30_000 } });
    });

    it("is an error without predict.shared: only the budget service keeps a declared key's account", () => {
      const error = loadError({ file: givenFile(`${limits}  shared: false\n`) });
      expect(error.key).toBe("predict.limits");
      expect(error.message).toMatch(/needs predict\.shared/);
    });

    it("is an error for a window longer than a day", () => {
      const error = loadError({ file: givenFile(limits.replace("window_s: 60", "window_s: 2592000")) });
      expect(error.key).toBe("predict.limits.http://llm.internal:8000.window_s");
      expect(error.message).toMatch(/at most 86400/);
    });

    it("is an error when it declares no limit", () => {
      const error = loadError({
        file: givenFile("predict:\n  limits:\n    http://llm.internal:8000:\n      window_s: 60\n"),
      });
      expect(error.message).toMatch(/at least one of requests, tokens/);
    });
  });

  describe("tenants", () => {
    const hash = "ab".repeat(32);

    it("list each tenant's keys by their SHA-256, read in either case", () => {
      const file = givenFile(`tenants:\n  acme:\n    keys_sha256: ["${hash.toUpperCase()}"]\n`);
      expect(load({ file }).tenants).toEqual({ acme: { keys_sha256: [hash] } });
    });

    it.each([
      ['  "acme/eu":\n    keys_sha256: ["HASH"]', "tenants.acme/eu", /contains "\/"/],
      ['  "acme\\ud800":\n    keys_sha256: ["HASH"]', "tenants.acme\ud800", /unpaired UTF-16 surrogate/],
      ["  acme:\n    keys_sha256: []", "tenants.acme.keys_sha256", /at least one gateway key's SHA-256/],
      ['  acme:\n    keys_sha256: ["hfk_a-key-itself"]', "tenants.acme.keys_sha256.0", /64 hex digits/],
      [
        '  acme:\n    keys_sha256: ["HASH"]\n  globex:\n    keys_sha256: ["HASH"]',
        "tenants.globex.keys_sha256",
        /each key under one tenant/,
      ],
    ])("refuse what cannot be a tenant's keys, naming the key: %s", (yaml, key, message) => {
      const error = loadError({ file: givenFile(`tenants:\n${yaml.replaceAll("HASH", hash)}\n`) });
      expect(error.key).toBe(key);
      expect(error.message).toMatch(message);
    });
  });

  describe("errors name the key and where the value came from", () => {
    it("a bad type in the file", () => {
      const file = givenFile("gateway:\n  host: 0.0.0.0\n  port: abc\n");

      const error = loadError({ file });

      expect(error).toBeInstanceOf(ConfigError);
      expect(error.code).toBe("HOLDFAST_CONFIG_INVALID");
      expect(error.key).toBe("gateway.port");
      expect(error.source).toBe(file);
      expect(error.line).toBe(3);
      expect(error.message).toBe(`${file}: gateway.port: expected an integer from 0 to 65535, got "abc"`);
    });

    it("the file path as the user wrote it, relative to cwd", () => {
      const file = givenFile("gateway: { port: 70000 }\n", "conf/holdfast.yaml");
      const dir = join(file, "..", "..");

      const error = loadError({ file: "conf/holdfast.yaml", cwd: dir });

      expect(error.message).toBe(
        "conf/holdfast.yaml: gateway.port: expected an integer from 0 to 65535, got 70000",
      );
    });

    it("a projector linger that would outlast half its ack wait", () => {
      const file = givenFile("projector:\n  ack_wait_ms: 1500\n  linger_ms: 1000\n");

      const error = loadError({ file });

      expect(error.key).toBe("projector.linger_ms");
      expect(error.message).toBe(
        `${file}: projector.linger_ms: must be less than half of projector.ack_wait_ms, or batches are redelivered while they linger, got 1000`,
      );
    });

    it("a header timeout longer than the whole request's", () => {
      const file = givenFile("http:\n  header_timeout_ms: 5000\n  request_timeout_ms: 1000\n");

      const error = loadError({ file });

      expect(error.key).toBe("http.header_timeout_ms");
      expect(error.message).toBe(
        `${file}: http.header_timeout_ms: must be at most http.request_timeout_ms: the headers are part of the request, got 5000`,
      );
    });

    it("a bad env value", () => {
      const file = givenFile("gateway: { port: 8080 }\n");

      const error = loadError({ file, env: { HOLDFAST_GATEWAY__PORT: "abc" } });

      expect(error.key).toBe("gateway.port");
      expect(error.source).toBe("HOLDFAST_GATEWAY__PORT");
      expect(error.message).toBe(
        'HOLDFAST_GATEWAY__PORT: gateway.port: expected an integer from 0 to 65535, got "abc"',
      );
    });

    it("a pricing.unknown that is neither charge nor refuse", () => {
      const error = loadError({ env: { HOLDFAST_PRICING__UNKNOWN: "free" } });

      expect(error.key).toBe("pricing.unknown");
      expect(error.message).toBe(
        'HOLDFAST_PRICING__UNKNOWN: pricing.unknown: expected charge or refuse, got "free"',
      );
    });

    it("a gateway.passthrough that is neither allow nor deny_models", () => {
      const error = loadError({ env: { HOLDFAST_GATEWAY__PASSTHROUGH: "deny" } });

      expect(error.key).toBe("gateway.passthrough");
      expect(error.message).toBe(
        'HOLDFAST_GATEWAY__PASSTHROUGH: gateway.passthrough: expected allow or deny_models, got "deny"',
      );
    });

    it("an env value that is not valid YAML", () => {
      const error = loadError({ env: { HOLDFAST_IDENTIFICATION__HEADERS: "[X-Run, X-Job" } });

      expect(error.key).toBe("identification.headers");
      expect(error.source).toBe("HOLDFAST_IDENTIFICATION__HEADERS");
      expect(error.message).toMatch(
        /^HOLDFAST_IDENTIFICATION__HEADERS: identification\.headers: expected a YAML value/,
      );
    });

    it("a bad flag", () => {
      const error = loadError({ overrides: { nats: { replicas: 9 } } });

      expect(error.key).toBe("nats.replicas");
      expect(error.source).toBe("flag");
      expect(error.message).toBe("flag: nats.replicas: expected an integer from 1 to 5, got 9");
    });

    it("an unknown key in the file", () => {
      const file = givenFile("gateway:\n  prot: 8080\n");

      const error = loadError({ file });

      expect(error.key).toBe("gateway.prot");
      expect(error.source).toBe(file);
      expect(error.line).toBe(2);
      expect(error.message).toBe(`${file}: gateway.prot: unknown key`);
    });

    it("an unknown HOLDFAST_ variable", () => {
      const error = loadError({ env: { HOLDFAST_GATEWAY__PROT: "8080" } });

      expect(error.key).toBe("gateway.prot");
      expect(error.source).toBe("HOLDFAST_GATEWAY__PROT");
      expect(error.message).toBe("HOLDFAST_GATEWAY__PROT: gateway.prot: unknown key");
    });

    it("an unknown top-level HOLDFAST_ variable", () => {
      const error = loadError({ env: { HOLDFAST_LOGLEVEL: "debug" } });

      expect(error.message).toBe("HOLDFAST_LOGLEVEL: loglevel: unknown key");
    });

    it("a YAML syntax error, with its line", () => {
      const file = givenFile("gateway:\n  port: 8080\n  host: a: b\nnats: {}\n");

      const error = loadError({ file });

      expect(error.source).toBe(file);
      expect(error.key).toBeUndefined();
      expect(error.line).toBe(3);
      expect(error.message).toBe(
        `${file}:3:9: invalid YAML: Nested mappings are not allowed in compact mappings`,
      );
    });

    it("a key written twice in the file", () => {
      const file = givenFile("log_level: info\nlog_level: debug\n");

      const error = loadError({ file });

      expect(error.line).toBe(2);
      expect(error.message).toMatch(/invalid YAML: .*unique/);
    });

    it("a named file that does not exist", () => {
      const error = loadError({ file: "/nonexistent/holdfast.yaml" });

      expect(error.source).toBe("/nonexistent/holdfast.yaml");
      expect(error.message).toMatch(/^\/nonexistent\/holdfast\.yaml: config file not found/);
    });

    it("a file named by HOLDFAST_CONFIG that does not exist says so", () => {
      const error = loadError({ env: { HOLDFAST_CONFIG: "missing.yaml" } });

      expect(error.source).toBe("missing.yaml");
      expect(error.message).toBe(
        `missing.yaml: config file not found (looked for ${CWD}/missing.yaml, named by HOLDFAST_CONFIG)`,
      );
    });

    it("a missing field of a price, attributed to the file that wrote the price", () => {
      const file = givenFile("prices:\n  gpt-4o:\n    input_per_mtok: 2.5\n");

      const error = loadError({ file });

      expect(error.key).toBe("prices.gpt-4o.output_per_mtok");
      expect(error.source).toBe(file);
      expect(error.message).toBe(
        `${file}: prices.gpt-4o.output_per_mtok: expected a number of at least 0 (USD per million tokens), but it is missing`,
      );
    });

    it("every problem at once, so one run shows all the typos", () => {
      const file = givenFile("gateway:\n  prot: 1\nnats:\n  prefix: HF\n");

      const error = loadError({ file, env: { HOLDFAST_LOG_LEVEL: "loud" } });

      expect(error.issues.map(({ key, source }) => ({ key, source }))).toEqual([
        { key: "log_level", source: "HOLDFAST_LOG_LEVEL" },
        { key: "gateway.prot", source: file },
        { key: "nats.prefix", source: file },
      ]);
      expect(error.message.split("\n")).toHaveLength(3);
    });

    it("a bad password never shows its value", () => {
      const file = givenFile("clickhouse:\n  password: 123456789\n");

      const error = loadError({ file });

      expect(error.key).toBe("clickhouse.password");
      expect(error.message).not.toContain("123456789");
    });
  });

  describe("paths", () => {
    it("a relative path in the file resolves against the file's directory", () => {
      const file = givenFile(
        "data_dir: state\nnats:\n  server_bin: ../bin/nats-server\n",
        "etc/holdfast.yaml",
      );
      const etc = join(file, "..");

      const config = load({ file });

      expect(config.data_dir).toBe(join(etc, "state"));
      expect(config.nats.server_bin).toBe(join(etc, "..", "bin", "nats-server"));
    });

    it("a relative path from env or a flag resolves against cwd", () => {
      const file = givenFile("data_dir: state\n");

      const fromEnv = load({ file, env: { HOLDFAST_DATA_DIR: "env-state" } });
      const fromFlag = load({ file, overrides: { data_dir: "./flag-state" } });

      expect(fromEnv.data_dir).toBe(`${CWD}/env-state`);
      expect(fromFlag.data_dir).toBe(`${CWD}/flag-state`);
    });

    it("a leading ~ expands to the home directory, from any source", () => {
      const file = givenFile("data_dir: ~/holdfast-data\n");

      expect(load({ file }).data_dir).toBe(`${HOME}/holdfast-data`);
      expect(load({ env: { HOLDFAST_NATS__SERVER_BIN: "~/bin/nats-server" } }).nats.server_bin).toBe(
        `${HOME}/bin/nats-server`,
      );
      expect(load({ overrides: { data_dir: "~" } }).data_dir).toBe(HOME);
    });

    it("a config file path may itself start with ~", () => {
      const file = givenFile("gateway: { port: 5151 }\n");
      const home = join(file, "..");

      const config = load({ file: "~/holdfast.yaml", homeDir: home });

      expect(config.gateway.port).toBe(5151);
    });

    it("a bare server_bin name is left for a PATH lookup", () => {
      const config = load({ env: { HOLDFAST_NATS__SERVER_BIN: "nats-server" } });

      expect(config.nats.server_bin).toBe("nats-server");
    });

    it("~user is refused rather than taken as a directory named ~user", () => {
      const error = loadError({ env: { HOLDFAST_DATA_DIR: "~bob/data" } });

      expect(error.key).toBe("data_dir");
      expect(error.source).toBe("HOLDFAST_DATA_DIR");
    });
  });
});
