import { homedir } from "node:os";
import { resolve } from "node:path";
import type * as z from "zod";
import { ConfigError, type ConfigIssue } from "./errors.js";
import { isMapping, LayeredTree } from "./layers.js";
import { maskUserinfo } from "./redact.js";
import { type Config, configSchema, type DeepPartial } from "./schema.js";
import { readConfigFile, readEnv, resolvePath } from "./sources.js";

export interface LoadConfigOptions {
  /** Config file; else env HOLDFAST_CONFIG; else none, and every key takes its default. */
  file?: string;
  /** Defaults to process.env. */
  env?: NodeJS.ProcessEnv;
  /** Values from command-line flags: the highest precedence. `undefined` leaves a key alone. */
  overrides?: DeepPartial<Config>;
  /** Base of relative paths given by env or flags, and of a relative config file path. */
  cwd?: string;
  /** What a leading `~` expands to. */
  homeDir?: string;
}

/**
 * Reads, merges and validates the configuration: defaults < file < HOLDFAST_* env < overrides.
 * Throws a ConfigError listing every problem, each naming its key and where it came from.
 */
export const loadConfig = (options: LoadConfigOptions = {}): Config => {
  const env = options.env ?? process.env;
  const cwd = resolve(options.cwd ?? process.cwd());
  const homeDir = options.homeDir ?? homedir();
  const tree = new LayeredTree();

  const fromEnv = env.HOLDFAST_CONFIG === "" ? undefined : env.HOLDFAST_CONFIG;
  const file = options.file ?? fromEnv;
  if (file !== undefined) {
    const namedBy = options.file === undefined ? "HOLDFAST_CONFIG" : undefined;
    const { layer, origin } = readConfigFile(file, namedBy, cwd, homeDir);
    tree.apply(layer, origin);
  }

  const { layers, issues } = readEnv(env);
  for (const { name, layer } of layers) tree.apply(layer, { source: name, baseDir: cwd });

  if (options.overrides !== undefined) {
    if (!isMapping(options.overrides)) throw new TypeError("loadConfig: overrides must be a plain object");
    tree.apply(options.overrides, { source: "flag", baseDir: cwd });
  }

  const parsed = configSchema.safeParse(tree.root);
  if (!parsed.success) issues.push(...parsed.error.issues.flatMap((issue) => toConfigIssues(issue, tree)));
  const [first, ...rest] = issues;
  if (first !== undefined) throw new ConfigError([first, ...rest]);

  // Unreachable: a failed parse always carries at least one issue.
  if (!parsed.success) throw parsed.error;
  const config = parsed.data;
  const baseOf = (path: readonly string[]) => tree.originOf(path)?.baseDir ?? cwd;
  config.data_dir = resolvePath(config.data_dir, baseOf(["data_dir"]), homeDir);
  // A file named in the config file is found beside it, as data_dir is.
  const beside = (path: string | undefined, key: readonly string[]) =>
    path === undefined ? undefined : resolvePath(path, baseOf(key), homeDir);
  if (config.nats.credentials !== undefined) {
    config.nats.credentials = beside(config.nats.credentials, ["nats", "credentials"]);
  }
  const tls = config.nats.tls;
  if (tls !== undefined) {
    for (const key of ["ca_file", "cert_file", "key_file"] as const) {
      if (tls[key] !== undefined) tls[key] = beside(tls[key], ["nats", "tls", key]);
    }
  }
  const serverBin = config.nats.server_bin;
  if (serverBin !== undefined && !isBareCommand(serverBin)) {
    config.nats.server_bin = resolvePath(serverBin, baseOf(["nats", "server_bin"]), homeDir);
  }
  return config;
};

/**
 * How a process connects to NATS as configured: the server, the deployment's prefix, its
 * credential and TLS. Each service adds who it is (its principal) and its connection name.
 */
export const natsConnection = (nats: Config["nats"]) => ({
  servers: nats.url ?? "",
  prefix: nats.prefix,
  replicas: nats.replicas,
  watchLingerMs: nats.watch_linger_ms,
  credentials: nats.credentials,
  tls:
    nats.tls === undefined
      ? undefined
      : { caFile: nats.tls.ca_file, certFile: nats.tls.cert_file, keyFile: nats.tls.key_file },
});

// "nats-server" means "look it up on PATH", as a shell would; "./nats-server" is a path.
const isBareCommand = (value: string): boolean => !/[/\\]/.test(value) && !value.startsWith("~");

const toConfigIssues = (issue: z.core.$ZodIssue, tree: LayeredTree): ConfigIssue[] => {
  if (issue.code === "unrecognized_keys") {
    return issue.keys.map((key) => attribute([...issue.path, key], "unknown key", tree));
  }
  const value = tree.valueAt(issue.path);
  // A rule across keys (custom) can fail on a key left at its default.
  const missing = issue.code === "custom" ? "at its default" : "but it is missing";
  const found = value === undefined ? missing : `got ${render(value, issue.path)}`;
  return [attribute(issue.path, `${issue.message}, ${found}`, tree)];
};

const attribute = (path: readonly PropertyKey[], text: string, tree: LayeredTree): ConfigIssue => {
  const origin = tree.originOf(path);
  const source = origin?.source ?? "default";
  const key = path.map(String).join(".");
  return { key, source, line: origin?.lineOf?.(path), message: `${source}: ${key}: ${text}` };
};

const SECRET_KEYS = new Set(["clickhouse.password"]);

const render = (value: unknown, path: readonly PropertyKey[]): string => {
  if (value === null) return "an empty value";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "a mapping";
  // Say what kind of value a secret was, never the value itself.
  if (SECRET_KEYS.has(path.map(String).join("."))) return `a ${typeof value}`;
  if (typeof value === "string") {
    const shown = maskUserinfo(value);
    return JSON.stringify(shown.length > 80 ? `${shown.slice(0, 77)}...` : shown);
  }
  return String(value);
};
