import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { resolveSystem, type System, tail } from "./system.js";
import { formatVersion, MIN_NATS_SERVER_VERSION, parseVersion, satisfiesMinimum } from "./version.js";

export const NATS_SERVER_ENV = "HOLDFAST_NATS_SERVER";
export const NATS_SERVER_BINARY = "nats-server";

export interface NatsServerBinary {
  readonly path: string;
  /** As reported by `nats-server --version`, without the "v": "2.15.1". */
  readonly version: string;
}

export type SearchSource = "explicit" | "env" | "path" | "tools";

export type SearchOutcome =
  | "usable"
  | "not-set"
  | "missing"
  | "not-executable"
  | "too-old"
  | "unknown-version"
  | "failed"
  | "duplicate";

export interface SearchStep {
  readonly source: SearchSource;
  /** Where this step looked, in words ("PATH", "$HOLDFAST_NATS_SERVER"). */
  readonly place: string;
  readonly path?: string;
  readonly outcome: SearchOutcome;
  readonly detail: string;
  readonly version?: string;
}

export interface NatsServerSearch {
  readonly minVersion: string;
  readonly found: NatsServerBinary | undefined;
  /** Every place looked at, in order, including the ones skipped and why. */
  readonly steps: readonly SearchStep[];
}

export interface FindNatsServerOptions {
  /** A path from configuration; tried before $HOLDFAST_NATS_SERVER. */
  readonly explicit?: string;
  /** Directory holding a Holdfast-installed `nats-server`; see {@link defaultToolsDir}. */
  readonly toolsDir?: string;
  readonly minVersion?: string;
  readonly system?: Partial<System>;
}

const VERSION_TIMEOUT_MS = 10_000;

/**
 * Where Holdfast installs its own nats-server: `<repo>/.tools/nats-server` in a checkout,
 * so every worktree pins its own copy and `git clean` removes it, else `~/.holdfast/bin`.
 * A copy under node_modules is an installed package, not a checkout, even when the project
 * that installed it happens to be a pnpm workspace.
 */
export function defaultToolsDir(
  moduleDir: string = dirname(fileURLToPath(import.meta.url)),
  home: string = homedir(),
): string {
  const root = findWorkspaceRoot(moduleDir);
  return root === undefined ? join(home, ".holdfast", "bin") : join(root, ".tools", "nats-server");
}

export function findWorkspaceRoot(from: string): string | undefined {
  if (from.split(sep).includes("node_modules")) return undefined;
  let dir = from;
  for (;;) {
    if (existsSync(join(dir, "pnpm-workspace.yaml"))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

export async function findNatsServer(
  options: FindNatsServerOptions = {},
): Promise<NatsServerBinary | undefined> {
  return (await searchNatsServer(options)).found;
}

/** Like {@link findNatsServer}, but also says where it looked and why each place was rejected. */
export async function searchNatsServer(options: FindNatsServerOptions = {}): Promise<NatsServerSearch> {
  const system = resolveSystem(options.system);
  const minVersion = options.minVersion ?? MIN_NATS_SERVER_VERSION;
  const steps: SearchStep[] = [];
  const seen = new Set<string>();

  const candidates: Array<() => Promise<{ source: SearchSource; place: string; path: string | undefined }>> =
    [
      async () => ({ source: "explicit", place: "configured path", path: configuredPath(options.explicit) }),
      async () => ({
        source: "env",
        place: `$${NATS_SERVER_ENV}`,
        path: configuredPath(system.env[NATS_SERVER_ENV]),
      }),
      async () => ({ source: "path", place: "PATH", path: await system.which(NATS_SERVER_BINARY) }),
      async () => ({
        source: "tools",
        place: "Holdfast tools dir",
        path: join(options.toolsDir ?? defaultToolsDir(), NATS_SERVER_BINARY),
      }),
    ];

  for (const next of candidates) {
    const { source, place, path } = await next();
    if (path === undefined) {
      const detail = source === "path" ? `no ${NATS_SERVER_BINARY} on PATH` : "not set";
      steps.push({ source, place, outcome: "not-set", detail });
      continue;
    }
    if (seen.has(path)) {
      steps.push({ source, place, path, outcome: "duplicate", detail: "already checked above" });
      continue;
    }
    seen.add(path);
    const step = await inspect(system, source, place, path, minVersion);
    steps.push(step);
    if (step.outcome === "usable" && step.version !== undefined) {
      return { minVersion, found: { path, version: step.version }, steps };
    }
  }
  return { minVersion, found: undefined, steps };
}

async function inspect(
  system: System,
  source: SearchSource,
  place: string,
  path: string,
  minVersion: string,
): Promise<SearchStep> {
  const at = { source, place, path };
  let output: string;
  try {
    const { stdout, stderr } = await system.exec(path, ["--version"], { timeoutMs: VERSION_TIMEOUT_MS });
    output = `${stdout}\n${stderr}`;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === "ENOENT") return { ...at, outcome: "missing", detail: "no such file" };
    if (code === "EACCES") return { ...at, outcome: "not-executable", detail: "not executable" };
    return { ...at, outcome: "failed", detail: `\`${path} --version\` failed: ${describeExecError(error)}` };
  }
  const parsed = parseVersion(output);
  if (!parsed) {
    return {
      ...at,
      outcome: "unknown-version",
      detail: `unrecognised --version output: ${tail(output, 200)}`,
    };
  }
  const version = formatVersion(parsed);
  if (!satisfiesMinimum(version, minVersion)) {
    return { ...at, outcome: "too-old", version, detail: `version ${version} is older than ${minVersion}` };
  }
  return { ...at, outcome: "usable", version, detail: `version ${version}` };
}

/** A human-readable account of a search, one line per place looked at. */
export function describeSearch(search: NatsServerSearch): string {
  const head = search.found
    ? `Using nats-server ${search.found.version} at ${search.found.path}.`
    : `No nats-server ${search.minVersion} or newer was found.`;
  const lines = search.steps.map((step, i) => {
    const where = step.path === undefined ? step.place : `${step.place} (${step.path})`;
    return `  ${i + 1}. ${where}: ${step.detail}`;
  });
  return [head, "Looked in:", ...lines].join("\n");
}

export function describeExecError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const details = error as Error & { code?: unknown; signal?: unknown; killed?: boolean; stderr?: unknown };
  const parts: string[] = [];
  if (details.killed)
    parts.push(`killed${details.signal ? ` by ${String(details.signal)}` : ""} (timed out?)`);
  else if (typeof details.code === "number") parts.push(`exit status ${details.code}`);
  else if (typeof details.code === "string") parts.push(details.code);
  const stderr = typeof details.stderr === "string" ? tail(details.stderr, 2000) : "";
  parts.push(stderr === "" ? error.message : stderr);
  return parts.join(": ");
}

/** Configured paths are made absolute so the result stays valid if the caller changes directory. */
function configuredPath(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : resolve(value);
}
