import { chmod, copyFile, mkdir, mkdtemp, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  NatsServerInstallError,
  NatsServerInstallUnsupportedError,
  NatsServerNotFoundError,
} from "./errors.js";
import {
  defaultToolsDir,
  describeExecError,
  describeSearch,
  type FindNatsServerOptions,
  NATS_SERVER_BINARY,
  NATS_SERVER_ENV,
  type NatsServerBinary,
  searchNatsServer,
} from "./find.js";
import { resolveSystem, type System } from "./system.js";
import { formatVersion, MIN_NATS_SERVER_VERSION, parseVersion, satisfiesMinimum } from "./version.js";

export interface InstallNatsServerOptions {
  /** The binary lands at `<toolsDir>/nats-server`. */
  readonly toolsDir: string;
  /** Progress lines for a human; the installer is otherwise silent. */
  readonly log?: (line: string) => void;
  readonly minVersion?: string;
  /** Debian suite to take the package from; only sid carries a new enough nats-server today. */
  readonly suite?: string;
  readonly mirror?: string;
  readonly system?: Partial<System>;
}

export interface EnsureNatsServerOptions extends FindNatsServerOptions {
  readonly log?: (line: string) => void;
  readonly suite?: string;
  readonly mirror?: string;
}

const DEFAULT_SUITE = "sid";
const DEFAULT_MIRROR = "http://deb.debian.org/debian";
const KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg";
const APT_TIMEOUT_MS = 10 * 60_000;

export const MANUAL_INSTALL_HINT = [
  `Install nats-server ${MIN_NATS_SERVER_VERSION} or newer by hand, for example:`,
  "  - a release archive from https://github.com/nats-io/nats-server/releases",
  "  - `brew install nats-server` (macOS) or `go install github.com/nats-io/nats-server/v2@latest`",
  `then put it on PATH or point ${NATS_SERVER_ENV} at the binary.`,
].join("\n");

/**
 * Takes nats-server from Debian's archive without touching the machine's apt setup: apt
 * gets a private sources list, lists and cache in a temp dir, downloads the .deb, and
 * dpkg only unpacks it. Debian stable lags behind (bookworm ships 2.9), so the default
 * suite is sid. Running it again with a good binary in place does nothing.
 */
export async function installNatsServer(options: InstallNatsServerOptions): Promise<NatsServerBinary> {
  const system = resolveSystem(options.system);
  const log = options.log ?? (() => {});
  const minVersion = options.minVersion ?? MIN_NATS_SERVER_VERSION;
  const target = join(options.toolsDir, NATS_SERVER_BINARY);

  const existing = await versionOf(system, target);
  if (existing !== undefined && satisfiesMinimum(existing, minVersion)) {
    log(`nats-server ${existing} is already installed at ${target}`);
    return { path: target, version: existing };
  }

  const missing: string[] = [];
  for (const tool of ["apt-get", "dpkg"]) {
    if ((await system.which(tool)) === undefined) missing.push(tool);
  }
  if (missing.length > 0) {
    throw new NatsServerInstallUnsupportedError(
      `Cannot install nats-server automatically: ${missing.join(" and ")} not found on PATH ` +
        `(the installer unpacks Debian's package).\n${MANUAL_INSTALL_HINT}`,
    );
  }

  const work = await mkdtemp(join(tmpdir(), "holdfast-nats-install-"));
  try {
    const deb = await downloadDeb(system, work, options, log);
    const unpacked = join(work, "x");
    await run(system, "dpkg", ["-x", deb, unpacked], { what: "Unpacking the nats-server package" });
    const source = await findUnpackedBinary(unpacked);

    // Copy beside the target and rename, so a concurrent run or an interrupted copy never
    // leaves a half-written binary where the search would pick it up.
    await mkdir(options.toolsDir, { recursive: true });
    const staged = `${target}.${process.pid}.tmp`;
    await copyFile(source, staged);
    await chmod(staged, 0o755);
    const version = await versionOf(system, staged);
    if (version === undefined || !satisfiesMinimum(version, minVersion)) {
      await rm(staged, { force: true });
      throw new NatsServerInstallError(
        `The downloaded nats-server reports version ${version ?? "(unreadable)"}, but ${minVersion} or newer ` +
          `is needed; the Debian ${options.suite ?? DEFAULT_SUITE} package is too old or broken.\n${MANUAL_INSTALL_HINT}`,
      );
    }
    await rename(staged, target);
    log(`Installed nats-server ${version} at ${target}`);
    return { path: target, version };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Finds a usable nats-server, installing one into the tools dir when none is found. */
export async function ensureNatsServer(options: EnsureNatsServerOptions = {}): Promise<NatsServerBinary> {
  const search = await searchNatsServer(options);
  if (search.found) return search.found;
  const toolsDir = options.toolsDir ?? defaultToolsDir();
  options.log?.(`${describeSearch(search)}\nInstalling nats-server into ${toolsDir} …`);
  try {
    return await installNatsServer({ ...options, toolsDir });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new NatsServerNotFoundError(`${describeSearch(search)}\n\nInstalling one failed: ${reason}`, {
      cause: error,
    });
  }
}

async function downloadDeb(
  system: System,
  work: string,
  options: InstallNatsServerOptions,
  log: (line: string) => void,
): Promise<string> {
  const suite = options.suite ?? DEFAULT_SUITE;
  const mirror = options.mirror ?? DEFAULT_MIRROR;
  const sources = join(work, "sources.list");
  await Promise.all([
    mkdir(join(work, "lists", "partial"), { recursive: true }),
    mkdir(join(work, "cache", "archives", "partial"), { recursive: true }),
    mkdir(join(work, "preferences.d"), { recursive: true }),
  ]);
  await writeFile(sources, `deb [signed-by=${KEYRING}] ${mirror} ${suite} main\n`);

  // Every path apt would read or write is redirected into `work`, so the host's sources,
  // lists and pins neither leak in nor get changed. The host's proxy settings still apply.
  const aptOptions = [
    ["Dir::Etc::sourcelist", sources],
    ["Dir::Etc::sourceparts", "-"],
    ["Dir::Etc::preferences", join(work, "preferences")],
    ["Dir::Etc::preferencesparts", join(work, "preferences.d")],
    ["Dir::State::Lists", join(work, "lists")],
    ["Dir::Cache", join(work, "cache")],
    ["APT::Get::List-Cleanup", "0"],
    ["Acquire::Languages", "none"],
    // Without this apt-get update exits 0 after a failed fetch, and the error only shows up
    // later as a puzzling "Unable to locate package".
    ["APT::Update::Error-Mode", "any"],
  ].flatMap(([key, value]) => ["-o", `${key}=${value}`]);

  log(`Fetching the package index of Debian ${suite} from ${mirror} …`);
  const hint = `Check that this machine can reach ${mirror}.`;
  await run(system, "apt-get", [...aptOptions, "update"], {
    what: `apt-get update for Debian ${suite}`,
    hint,
  });
  log("Downloading nats-server …");
  await run(system, "apt-get", [...aptOptions, "download", NATS_SERVER_BINARY], {
    what: "apt-get download nats-server",
    hint,
    cwd: work,
  });

  const deb = (await readdir(work)).find(
    (name) => name.startsWith(`${NATS_SERVER_BINARY}_`) && name.endsWith(".deb"),
  );
  if (deb === undefined) {
    throw new NatsServerInstallError(
      `apt-get download reported success but left no ${NATS_SERVER_BINARY}_*.deb in ${work}.\n${MANUAL_INSTALL_HINT}`,
    );
  }
  log(`Downloaded ${deb}`);
  return join(work, deb);
}

async function findUnpackedBinary(root: string): Promise<string> {
  for (const dir of ["usr/sbin", "usr/bin"]) {
    const candidate = join(root, dir, NATS_SERVER_BINARY);
    if (await isFile(candidate)) return candidate;
  }
  throw new NatsServerInstallError(
    `The nats-server package unpacked without a usr/sbin/${NATS_SERVER_BINARY} binary.\n${MANUAL_INSTALL_HINT}`,
  );
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

async function versionOf(system: System, binary: string): Promise<string | undefined> {
  try {
    const { stdout, stderr } = await system.exec(binary, ["--version"], { timeoutMs: 10_000 });
    const parsed = parseVersion(`${stdout}\n${stderr}`);
    return parsed && formatVersion(parsed);
  } catch {
    return undefined;
  }
}

async function run(
  system: System,
  file: string,
  args: readonly string[],
  step: { what: string; hint?: string; cwd?: string },
): Promise<void> {
  try {
    await system.exec(file, args, { cwd: step.cwd, timeoutMs: APT_TIMEOUT_MS });
  } catch (error) {
    const hint = step.hint === undefined ? "" : `${step.hint}\n`;
    throw new NatsServerInstallError(
      `${step.what} failed: ${describeExecError(error)}\n${hint}${MANUAL_INSTALL_HINT}`,
      { cause: error },
    );
  }
}
