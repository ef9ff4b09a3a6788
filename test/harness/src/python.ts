import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  type ControlStanza,
  DebianArchiveError,
  DebianArchiveUnsupportedError,
  type DebianRelation,
  type DebianRelationGroup,
  findWorkspaceRoot,
  openDebianArchive,
  parseRelations,
} from "@holdfast/natsd";
import { PythonHttpxInstallError, PythonUnavailableError } from "./errors.js";

const execFileAsync = promisify(execFile);

/** The packages are pure Python, so one suite serves any Python 3.11 or newer; bookworm's is 3.11. */
export const PYTHON_HTTPX_SUITE = "bookworm";
export const MIN_PYTHON_VERSION = "3.11";
const ROOT_PACKAGE = "python3-httpx";
const DIST_PACKAGES = join("usr", "lib", "python3", "dist-packages");
const MARKER = "holdfast-installed.json";
// Debian's own interpreter first: a pyenv or venv shim earlier on PATH may be any version.
const DEFAULT_PYTHONS = ["/usr/bin/python3", "python3"];
const PROBE_TIMEOUT_MS = 30_000;

export interface PythonHttpx {
  /** Absolute path of the interpreter to spawn. */
  readonly python: string;
  /** Set as PYTHONPATH so that `import httpx` finds the unpacked packages. */
  readonly pythonPath: string;
  /** Debian package name → version, as unpacked. */
  readonly packages: Readonly<Record<string, string>>;
}

export interface EnsurePythonHttpxOptions {
  /** Where the packages are unpacked; `<repo>/.tools/python-httpx` by default. */
  readonly toolsDir?: string;
  /** Interpreters to try, first usable wins. */
  readonly pythons?: readonly string[];
  readonly suite?: string;
  readonly mirror?: string;
  /** Progress lines for a human; otherwise silent. */
  readonly log?: (line: string) => void;
}

interface Installed {
  readonly suite: string;
  readonly packages: Record<string, string>;
}

/**
 * Python's httpx for tests that need a real Python HTTP client, on a machine with no PyPI:
 * Debian's `python3-httpx` and the Python packages it depends on are downloaded through a
 * private apt (the machine's apt setup is left alone) and unpacked, not installed, into
 * the tools dir. Spawn `python` with `PYTHONPATH=pythonPath`. When a complete unpack from
 * the same suite is already there, only the interpreter is probed.
 */
export async function ensurePythonHttpx(options: EnsurePythonHttpxOptions = {}): Promise<PythonHttpx> {
  const log = options.log ?? (() => {});
  const suite = options.suite ?? PYTHON_HTTPX_SUITE;
  const toolsDir = options.toolsDir ?? defaultPythonToolsDir();
  const python = await findPython(options.pythons ?? DEFAULT_PYTHONS);
  const pythonPath = join(toolsDir, DIST_PACKAGES);

  const installed = await readInstalled(toolsDir, suite);
  if (installed !== undefined) {
    log(`httpx (${installed.packages[ROOT_PACKAGE]}) is already unpacked in ${toolsDir}`);
    return { python: python.path, pythonPath, packages: installed.packages };
  }

  log(`Unpacking Debian ${suite}'s ${ROOT_PACKAGE} into ${toolsDir} …`);
  const packages = await install(toolsDir, python, { ...options, suite }, log);
  log(`Installed httpx ${packages[ROOT_PACKAGE]} for Python ${python.version} in ${toolsDir}`);
  return { python: python.path, pythonPath, packages };
}

/** `<repo>/.tools/python-httpx`, beside the nats-server that setup installs. */
export function defaultPythonToolsDir(moduleDir: string = dirname(fileURLToPath(import.meta.url))): string {
  const root = findWorkspaceRoot(moduleDir);
  if (root === undefined) {
    throw new PythonUnavailableError(`No Holdfast checkout above ${moduleDir}; pass toolsDir.`);
  }
  return join(root, ".tools", "python-httpx");
}

/**
 * The packages to unpack so that `roots` import: the closure of their Depends and
 * Pre-Depends over Debian's Python packages. A group of alternatives is left to the host
 * when any alternative is the interpreter itself in a version that fits `pythonVersion`
 * (`python3-typing-extensions | python3 (>> 3.8)`) or is not a Python package at all
 * (`ca-certificates`): only importable modules matter here, and the host's interpreter is
 * the one that runs them. Otherwise the first Python package of the group is taken.
 */
export async function resolvePythonPackages(
  roots: readonly string[],
  show: (names: readonly string[]) => Promise<readonly ControlStanza[]>,
  pythonVersion: string,
): Promise<ControlStanza[]> {
  const resolved = new Map<string, ControlStanza>();
  let wanted = [...new Set(roots)];
  while (wanted.length > 0) {
    const next = new Set<string>();
    for (const stanza of await show(wanted)) {
      const name = stanza.Package ?? "(unnamed package)";
      if (stanza.Architecture !== "all") {
        throw new PythonHttpxInstallError(
          `${name} is built for ${stanza.Architecture ?? "an unknown architecture"}, not "all": ` +
            "its compiled modules are tied to Debian's interpreter, so it cannot be unpacked for another.",
        );
      }
      resolved.set(name, stanza);
      for (const group of [...parseRelations(stanza["Pre-Depends"]), ...parseRelations(stanza.Depends)]) {
        if (group.some((relation) => providedByHost(relation, pythonVersion))) continue;
        const pick = group.find((relation) => relation.name.startsWith("python3-"));
        if (pick === undefined) {
          throw new PythonUnavailableError(
            `${name} depends on ${formatGroup(group)}, which Python ${pythonVersion} does not satisfy.`,
          );
        }
        if (!resolved.has(pick.name) && !wanted.includes(pick.name)) next.add(pick.name);
      }
    }
    wanted = [...next];
  }
  return [...resolved.values()];
}

function providedByHost(relation: DebianRelation, pythonVersion: string): boolean {
  if (relation.name.startsWith("python3-")) return false;
  if (relation.name !== "python3" || relation.operator === undefined || relation.version === undefined) {
    return true;
  }
  const order = compareDotted(pythonVersion, relation.version);
  switch (relation.operator) {
    case "<<":
      return order < 0;
    case "<=":
      return order <= 0;
    case "=":
      return order === 0;
    case ">=":
      return order >= 0;
    case ">>":
      return order > 0;
  }
}

/** Numeric comparison of the leading `3.11.2` part; Debian's `~` and revision are ignored. */
function compareDotted(a: string, b: string): number {
  const parts = (version: string) =>
    (/^[0-9.]*/.exec(version)?.[0] ?? "").split(".").filter(Boolean).map(Number);
  const [left, right] = [parts(a), parts(b)];
  for (let i = 0; i < Math.max(left.length, right.length); i++) {
    const difference = (left[i] ?? 0) - (right[i] ?? 0);
    if (difference !== 0) return Math.sign(difference);
  }
  return 0;
}

function formatGroup(group: DebianRelationGroup): string {
  return group
    .map((relation) => {
      const name =
        relation.qualifier === undefined ? relation.name : `${relation.name}:${relation.qualifier}`;
      return relation.operator === undefined ? name : `${name} (${relation.operator} ${relation.version})`;
    })
    .join(" | ");
}

async function findPython(candidates: readonly string[]): Promise<{ path: string; version: string }> {
  const rejected: string[] = [];
  for (const candidate of candidates) {
    try {
      const { stdout } = await execFileAsync(
        candidate,
        ["-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"],
        { timeout: PROBE_TIMEOUT_MS, encoding: "utf8" },
      );
      const [path = "", version = ""] = stdout.trim().split("\n");
      if (compareDotted(version, MIN_PYTHON_VERSION) >= 0) return { path: path || candidate, version };
      rejected.push(`${candidate}: Python ${version} is older than ${MIN_PYTHON_VERSION}`);
    } catch (error) {
      rejected.push(`${candidate}: ${error instanceof Error ? error.message.split("\n")[0] : String(error)}`);
    }
  }
  throw new PythonUnavailableError(
    `No Python ${MIN_PYTHON_VERSION} or newer to run httpx with:\n${rejected.map((line) => `  - ${line}`).join("\n")}`,
  );
}

async function readInstalled(toolsDir: string, suite: string): Promise<Installed | undefined> {
  try {
    const installed = JSON.parse(await readFile(join(toolsDir, MARKER), "utf8")) as Installed;
    const complete =
      installed.suite === suite &&
      typeof installed.packages?.[ROOT_PACKAGE] === "string" &&
      existsSync(join(toolsDir, DIST_PACKAGES, "httpx", "__init__.py"));
    return complete ? installed : undefined;
  } catch {
    return undefined;
  }
}

async function install(
  toolsDir: string,
  python: { path: string; version: string },
  options: EnsurePythonHttpxOptions & { suite: string },
  log: (line: string) => void,
): Promise<Record<string, string>> {
  // Unpacked beside the target and renamed into place, so an interrupted run never leaves
  // a half-filled dir that the marker check would take for complete.
  const staging = `${toolsDir}.${process.pid}.tmp`;
  await rm(staging, { recursive: true, force: true });
  try {
    await using archive = await openDebianArchive({
      suite: options.suite,
      ...(options.mirror === undefined ? {} : { mirror: options.mirror }),
      log,
    });
    const stanzas = await resolvePythonPackages(
      [ROOT_PACKAGE],
      (names) => archive.show(names),
      python.version,
    );
    const packages = Object.fromEntries(stanzas.map((stanza) => [stanza.Package!, stanza.Version ?? "?"]));
    log(`Downloading ${Object.keys(packages).join(", ")} …`);
    for (const deb of await archive.download(Object.keys(packages))) await archive.unpack(deb, staging);

    await verifyImport(python.path, join(staging, DIST_PACKAGES));
    const installed: Installed = { suite: options.suite, packages };
    await writeFile(join(staging, MARKER), `${JSON.stringify(installed, null, 2)}\n`);
    await mkdir(dirname(toolsDir), { recursive: true });
    await rm(toolsDir, { recursive: true, force: true });
    try {
      await rename(staging, toolsDir);
    } catch (error) {
      // A concurrent run got there first; its unpack is as good as this one.
      const theirs = await readInstalled(toolsDir, options.suite);
      if (theirs === undefined) throw error;
      return theirs.packages;
    }
    return packages;
  } catch (error) {
    if (error instanceof DebianArchiveUnsupportedError) {
      throw new PythonUnavailableError(
        `Cannot provide httpx: ${error.missing.join(" and ")} not found on PATH (Debian's packages are unpacked with them).`,
        { cause: error },
      );
    }
    if (error instanceof DebianArchiveError)
      throw new PythonHttpxInstallError(error.message, { cause: error });
    throw error;
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

async function verifyImport(python: string, pythonPath: string): Promise<void> {
  let stdout: string;
  try {
    ({ stdout } = await execFileAsync(python, ["-c", "import httpx; print(httpx.__file__)"], {
      env: { ...process.env, PYTHONPATH: pythonPath },
      timeout: PROBE_TIMEOUT_MS,
      encoding: "utf8",
    }));
  } catch (error) {
    const stderr = (error as { stderr?: unknown }).stderr;
    throw new PythonHttpxInstallError(
      `The unpacked httpx does not import with ${python}: ${typeof stderr === "string" && stderr !== "" ? stderr.trim() : String(error)}`,
      { cause: error },
    );
  }
  // A host-wide httpx would also import; make sure it is the unpacked one.
  if (!stdout.trim().startsWith(pythonPath + sep)) {
    throw new PythonHttpxInstallError(
      `${python} imported httpx from ${stdout.trim()}, not from ${pythonPath}.`,
    );
  }
}
