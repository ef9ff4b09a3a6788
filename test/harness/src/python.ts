import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { delimiter, dirname, join, sep } from "node:path";
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
/** grpcio's and protobuf's compiled modules are bookworm's, built for its Python 3.11 alone. */
export const PYTHON_GRPC_SUITE = "bookworm";
export const PYTHON_GRPC_VERSION = "3.11";
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

export interface PythonGrpc extends PythonHttpx {
  /**
   * Set as LD_LIBRARY_PATH (see {@link pythonEnv}): the shared libraries grpcio's and
   * protobuf's compiled modules need that this machine lacks (c-ares, re2, libprotobuf).
   */
  readonly libraryPath: string;
}

export interface EnsurePythonHttpxOptions {
  /** Where the packages are unpacked; `<repo>/.tools/python-httpx` (`python-grpc`) by default. */
  readonly toolsDir?: string;
  /** Interpreters to try, first usable wins. */
  readonly pythons?: readonly string[];
  readonly suite?: string;
  readonly mirror?: string;
  /** Progress lines for a human; otherwise silent. */
  readonly log?: (line: string) => void;
}

export type EnsurePythonGrpcOptions = EnsurePythonHttpxOptions;

interface Installed {
  readonly suite: string;
  readonly packages: Record<string, string>;
  /** Directories of unpacked shared libraries, relative to the tools dir. */
  readonly libraryDirs?: string[];
}

/** What one of the Python tool sets is made of, and how to tell it works. */
interface PythonTool {
  /** As messages name it: "httpx". */
  readonly label: string;
  /** The package whose version messages quote; the first root. */
  readonly roots: readonly [string, ...string[]];
  /** `<repo>/.tools/<dir>`. */
  readonly dir: string;
  /** Modules that must import from the unpack (their files are checked to be under it). */
  readonly modules: readonly string[];
  /** Files under dist-packages whose presence says an unpack is complete. */
  readonly files: readonly string[];
  readonly pythons: readonly string[];
  /** Why an interpreter of this version cannot run them; undefined when it can. */
  readonly unfit: (version: string) => string | undefined;
  /** Compiled modules: packages for this machine's architecture, with the libraries it lacks. */
  readonly native: boolean;
}

const HTTPX: PythonTool = {
  label: "httpx",
  roots: ["python3-httpx"],
  dir: "python-httpx",
  modules: ["httpx"],
  files: [join("httpx", "__init__.py")],
  pythons: DEFAULT_PYTHONS,
  unfit: (version) =>
    compareDotted(version, MIN_PYTHON_VERSION) >= 0
      ? undefined
      : `Python ${version} is older than ${MIN_PYTHON_VERSION}`,
  native: false,
};

const GRPC: PythonTool = {
  label: "grpcio",
  roots: ["python3-grpcio", "python3-protobuf", "python3-grpc-tools"],
  dir: "python-grpc",
  modules: ["grpc", "google.protobuf", "grpc_tools.protoc"],
  files: [
    join("grpc", "__init__.py"),
    join("google", "protobuf", "__init__.py"),
    join("grpc_tools", "protoc.py"),
  ],
  pythons: ["/usr/bin/python3", "/usr/bin/python3.11", "python3.11", "python3"],
  unfit: (version) =>
    /^3\.11(\.|$)/.test(version)
      ? undefined
      : `Python ${version} is not ${PYTHON_GRPC_VERSION}, which Debian bookworm's grpcio is built for`,
  native: true,
};

/**
 * Python's httpx for tests that need a real Python HTTP client, on a machine with no PyPI:
 * Debian's `python3-httpx` and the Python packages it depends on are downloaded through a
 * private apt (the machine's apt setup is left alone) and unpacked, not installed, into
 * the tools dir. Spawn `python` with `PYTHONPATH=pythonPath`. When a complete unpack from
 * the same suite is already there, only the interpreter is probed.
 */
export async function ensurePythonHttpx(options: EnsurePythonHttpxOptions = {}): Promise<PythonHttpx> {
  const { python, pythonPath, packages } = await ensureTool(HTTPX, {
    ...options,
    suite: options.suite ?? PYTHON_HTTPX_SUITE,
  });
  return { python, pythonPath, packages };
}

/**
 * Python's gRPC for tests that drive a gRPC client generated from `proto/` alone: Debian
 * bookworm's `python3-grpcio`, `python3-protobuf` and `python3-grpc-tools` (whose
 * `python -m grpc_tools.protoc` generates the modules), unpacked like httpx into
 * `<repo>/.tools/python-grpc`, with the shared libraries they link that this machine does
 * not have (its dpkg says which). Their compiled modules are built for Python 3.11, so
 * only a 3.11 interpreter will do. Spawn `python` with {@link pythonEnv}.
 */
export async function ensurePythonGrpc(options: EnsurePythonGrpcOptions = {}): Promise<PythonGrpc> {
  const { python, pythonPath, packages, libraryPath } = await ensureTool(GRPC, {
    ...options,
    suite: options.suite ?? PYTHON_GRPC_SUITE,
  });
  return { python, pythonPath, libraryPath, packages };
}

/**
 * The environment to spawn `python` in so that it imports the unpacked packages:
 * `base` (the process's own by default) with PYTHONPATH, and LD_LIBRARY_PATH for the
 * compiled ones, put in front of what it had.
 */
export function pythonEnv(
  tools: PythonHttpx | PythonGrpc,
  base: NodeJS.ProcessEnv = process.env,
): NodeJS.ProcessEnv {
  const prepend = (value: string, rest: string | undefined) =>
    rest === undefined || rest === "" ? value : `${value}${delimiter}${rest}`;
  const env: NodeJS.ProcessEnv = { ...base, PYTHONPATH: prepend(tools.pythonPath, base.PYTHONPATH) };
  if ("libraryPath" in tools && tools.libraryPath !== "") {
    env.LD_LIBRARY_PATH = prepend(tools.libraryPath, base.LD_LIBRARY_PATH);
  }
  return env;
}

async function ensureTool(
  tool: PythonTool,
  options: EnsurePythonHttpxOptions & { suite: string },
): Promise<PythonGrpc> {
  const log = options.log ?? (() => {});
  const { suite } = options;
  const toolsDir = options.toolsDir ?? defaultPythonToolsDir(undefined, tool.dir);
  const python = await findPython(options.pythons ?? tool.pythons, tool);
  const pythonPath = join(toolsDir, DIST_PACKAGES);

  let installed = await readInstalled(toolsDir, suite, tool);
  if (installed !== undefined) {
    log(`${tool.label} (${installed.packages[tool.roots[0]]}) is already unpacked in ${toolsDir}`);
  } else {
    log(`Unpacking Debian ${suite}'s ${tool.roots.join(", ")} into ${toolsDir} …`);
    installed = await install(toolsDir, python, tool, options, log);
    log(
      `Installed ${tool.label} ${installed.packages[tool.roots[0]]} for Python ${python.version} in ${toolsDir}`,
    );
  }
  const libraryPath = (installed.libraryDirs ?? []).map((dir) => join(toolsDir, dir)).join(delimiter);
  return { python: python.path, pythonPath, libraryPath, packages: installed.packages };
}

/** `<repo>/.tools/python-httpx` (or `dir`), beside the nats-server that setup installs. */
export function defaultPythonToolsDir(
  moduleDir: string = dirname(fileURLToPath(import.meta.url)),
  dir = HTTPX.dir,
): string {
  const root = findWorkspaceRoot(moduleDir);
  if (root === undefined) {
    throw new PythonUnavailableError(`No Holdfast checkout above ${moduleDir}; pass toolsDir.`);
  }
  return join(root, ".tools", dir);
}

/** For packages with compiled modules: the machine's architecture, and what it has installed. */
export interface NativePackages {
  /** dpkg's name for it: "amd64", "arm64". */
  readonly architecture: string;
  /** Whether the machine has a package installed that satisfies the relation (its dpkg says). */
  readonly installed: (relation: DebianRelation) => Promise<boolean>;
}

/**
 * The packages to unpack so that `roots` import: the closure of their Depends and
 * Pre-Depends over Debian's Python packages. A group of alternatives is left to the host
 * when any alternative is the interpreter itself in a version that fits `pythonVersion`
 * (`python3-typing-extensions | python3 (>> 3.8)`) or is not a Python package at all
 * (`ca-certificates`): only importable modules matter here, and the host's interpreter is
 * the one that runs them. Otherwise the first Python package of the group is taken.
 *
 * Packages built for an architecture are refused unless `native` is given; with it, those
 * built for `native.architecture` are taken, and the libraries they depend on that the
 * machine has not installed are unpacked with them (but never the C library itself).
 */
export async function resolvePythonPackages(
  roots: readonly string[],
  show: (names: readonly string[]) => Promise<readonly ControlStanza[]>,
  pythonVersion: string,
  native?: NativePackages,
): Promise<ControlStanza[]> {
  const resolved = new Map<string, ControlStanza>();
  let wanted = [...new Set(roots)];
  while (wanted.length > 0) {
    const next = new Set<string>();
    for (const stanza of await show(wanted)) {
      const name = stanza.Package ?? "(unnamed package)";
      const compiled = stanza.Architecture !== "all";
      if (compiled && native === undefined) {
        throw new PythonHttpxInstallError(
          `${name} is built for ${stanza.Architecture ?? "an unknown architecture"}, not "all": ` +
            "its compiled modules are tied to Debian's interpreter, so it cannot be unpacked for another.",
        );
      }
      if (compiled && native !== undefined && stanza.Architecture !== native.architecture) {
        throw new PythonHttpxInstallError(
          `${name} is built for ${stanza.Architecture ?? "an unknown architecture"}, not this machine's ${native.architecture}.`,
        );
      }
      resolved.set(name, stanza);
      for (const group of [...parseRelations(stanza["Pre-Depends"]), ...parseRelations(stanza.Depends)]) {
        let pick: DebianRelation | undefined;
        if (compiled && native !== undefined) {
          if (group.some((relation) => isInterpreter(relation) && interpreterFits(relation, pythonVersion)))
            continue;
          const libraries = group.filter((relation) => !isPython(relation));
          if (await someInstalled(libraries, native)) continue;
          pick =
            group.find((relation) => relation.name.startsWith("python3-")) ??
            libraries.find((relation) => relation.name !== "libc6");
          if (pick === undefined && libraries.length > 0) {
            throw new PythonUnavailableError(
              `${name} depends on ${formatGroup(group)}, which this machine does not have (its C library is not unpacked beside the packages).`,
            );
          }
        } else {
          if (group.some((relation) => providedByHost(relation, pythonVersion))) continue;
          pick = group.find((relation) => relation.name.startsWith("python3-"));
        }
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

function isInterpreter(relation: DebianRelation): boolean {
  return relation.name === "python3";
}

function isPython(relation: DebianRelation): boolean {
  return isInterpreter(relation) || relation.name.startsWith("python3-");
}

async function someInstalled(relations: readonly DebianRelation[], native: NativePackages): Promise<boolean> {
  for (const relation of relations) if (await native.installed(relation)) return true;
  return false;
}

function providedByHost(relation: DebianRelation, pythonVersion: string): boolean {
  if (relation.name.startsWith("python3-")) return false;
  return !isInterpreter(relation) || interpreterFits(relation, pythonVersion);
}

function interpreterFits(relation: DebianRelation, pythonVersion: string): boolean {
  if (relation.operator === undefined || relation.version === undefined) return true;
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

/** This machine's packages, as its own dpkg knows them (not the private apt's empty status). */
async function hostPackages(): Promise<NativePackages> {
  const { stdout } = await execFileAsync("dpkg", ["--print-architecture"], {
    timeout: PROBE_TIMEOUT_MS,
    encoding: "utf8",
  });
  const installed = async (relation: DebianRelation): Promise<boolean> => {
    let versions: string[];
    try {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own format, not a template
      const format = "${Status}\t${Version}\n";
      const { stdout: listed } = await execFileAsync("dpkg-query", ["-W", "-f", format, relation.name], {
        timeout: PROBE_TIMEOUT_MS,
        encoding: "utf8",
      });
      versions = listed
        .split("\n")
        .map((line) => line.split("\t"))
        .filter(([status]) => status?.endsWith(" installed"))
        .map(([, version]) => version ?? "");
    } catch {
      return false; // dpkg-query exits 1 for a package it has never heard of
    }
    if (relation.operator === undefined || relation.version === undefined) return versions.length > 0;
    for (const version of versions) {
      try {
        await execFileAsync("dpkg", ["--compare-versions", version, relation.operator, relation.version], {
          timeout: PROBE_TIMEOUT_MS,
        });
        return true;
      } catch {
        // Too old (or too new): try the next, if another architecture's is installed too.
      }
    }
    return false;
  };
  return { architecture: stdout.trim(), installed };
}

async function findPython(
  candidates: readonly string[],
  tool: PythonTool,
): Promise<{ path: string; version: string }> {
  const rejected: string[] = [];
  for (const candidate of candidates) {
    try {
      const { stdout } = await execFileAsync(
        candidate,
        ["-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"],
        { timeout: PROBE_TIMEOUT_MS, encoding: "utf8" },
      );
      const [path = "", version = ""] = stdout.trim().split("\n");
      const unfit = tool.unfit(version);
      if (unfit === undefined) return { path: path || candidate, version };
      rejected.push(`${candidate}: ${unfit}`);
    } catch (error) {
      rejected.push(`${candidate}: ${error instanceof Error ? error.message.split("\n")[0] : String(error)}`);
    }
  }
  const wanted = tool.native ? PYTHON_GRPC_VERSION : `${MIN_PYTHON_VERSION} or newer`;
  throw new PythonUnavailableError(
    `No Python ${wanted} to run ${tool.label} with:\n${rejected.map((line) => `  - ${line}`).join("\n")}`,
  );
}

async function readInstalled(
  toolsDir: string,
  suite: string,
  tool: PythonTool,
): Promise<Installed | undefined> {
  try {
    const installed = JSON.parse(await readFile(join(toolsDir, MARKER), "utf8")) as Installed;
    const complete =
      installed.suite === suite &&
      tool.roots.every((root) => typeof installed.packages?.[root] === "string") &&
      tool.files.every((file) => existsSync(join(toolsDir, DIST_PACKAGES, file))) &&
      (installed.libraryDirs ?? []).every((dir) => existsSync(join(toolsDir, dir)));
    return complete ? installed : undefined;
  } catch {
    return undefined;
  }
}

/** Where the unpacked shared libraries are: `usr/lib/x86_64-linux-gnu` and the like. */
async function libraryDirs(root: string): Promise<string[]> {
  const found: string[] = [];
  for (const parent of [join("usr", "lib"), "lib"]) {
    let entries: string[];
    try {
      entries = await readdir(join(root, parent));
    } catch {
      continue;
    }
    for (const entry of entries.sort()) if (/-linux-/.test(entry)) found.push(join(parent, entry));
  }
  return found;
}

async function install(
  toolsDir: string,
  python: { path: string; version: string },
  tool: PythonTool,
  options: EnsurePythonHttpxOptions & { suite: string },
  log: (line: string) => void,
): Promise<Installed> {
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
      tool.roots,
      (names) => archive.show(names),
      python.version,
      tool.native ? await hostPackages() : undefined,
    );
    const packages = Object.fromEntries(stanzas.map((stanza) => [stanza.Package!, stanza.Version ?? "?"]));
    log(`Downloading ${Object.keys(packages).join(", ")} …`);
    for (const deb of await archive.download(Object.keys(packages))) await archive.unpack(deb, staging);

    const libraries = tool.native ? await libraryDirs(staging) : [];
    await verifyImport(python.path, tool, staging, libraries);
    const installed: Installed = {
      suite: options.suite,
      packages,
      ...(tool.native ? { libraryDirs: libraries } : {}),
    };
    await writeFile(join(staging, MARKER), `${JSON.stringify(installed, null, 2)}\n`);
    await mkdir(dirname(toolsDir), { recursive: true });
    await rm(toolsDir, { recursive: true, force: true });
    try {
      await rename(staging, toolsDir);
    } catch (error) {
      // A concurrent run got there first; its unpack is as good as this one.
      const theirs = await readInstalled(toolsDir, options.suite, tool);
      if (theirs === undefined) throw error;
      return theirs;
    }
    return installed;
  } catch (error) {
    if (error instanceof DebianArchiveUnsupportedError) {
      throw new PythonUnavailableError(
        `Cannot provide ${tool.label}: ${error.missing.join(" and ")} not found on PATH (Debian's packages are unpacked with them).`,
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

async function verifyImport(
  python: string,
  tool: PythonTool,
  root: string,
  libraries: readonly string[],
): Promise<void> {
  const pythonPath = join(root, DIST_PACKAGES);
  const env = pythonEnv({
    python,
    pythonPath,
    libraryPath: libraries.map((dir) => join(root, dir)).join(delimiter),
    packages: {},
  });
  const script =
    "import importlib, sys\nfor name in sys.argv[1:]: print(importlib.import_module(name).__file__)";
  let stdout: string;
  try {
    ({ stdout } = await execFileAsync(python, ["-c", script, ...tool.modules], {
      env,
      timeout: PROBE_TIMEOUT_MS,
      encoding: "utf8",
    }));
  } catch (error) {
    const stderr = (error as { stderr?: unknown }).stderr;
    throw new PythonHttpxInstallError(
      `The unpacked ${tool.label} does not import with ${python}: ${typeof stderr === "string" && stderr !== "" ? stderr.trim() : String(error)}`,
      { cause: error },
    );
  }
  // A host-wide copy would also import; make sure each is the unpacked one.
  const files = stdout.trim().split("\n");
  tool.modules.forEach((name, i) => {
    const file = files[i] ?? "";
    if (!file.startsWith(pythonPath + sep)) {
      throw new PythonHttpxInstallError(`${python} imported ${name} from ${file}, not from ${pythonPath}.`);
    }
  });
}
