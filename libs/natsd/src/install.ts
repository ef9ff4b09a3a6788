import { chmod, copyFile, mkdir, rename, rm, stat } from "node:fs/promises";
import { basename, join } from "node:path";
import { openDebianArchive } from "./debian.js";
import {
  DebianArchiveError,
  DebianArchiveUnsupportedError,
  NatsServerInstallError,
  NatsServerInstallUnsupportedError,
  NatsServerNotFoundError,
} from "./errors.js";
import {
  defaultToolsDir,
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

export const MANUAL_INSTALL_HINT = [
  `Install nats-server ${MIN_NATS_SERVER_VERSION} or newer by hand, for example:`,
  "  - a release archive from https://github.com/nats-io/nats-server/releases",
  "  - `brew install nats-server` (macOS) or `go install github.com/nats-io/nats-server/v2@latest`",
  `then put it on PATH or point ${NATS_SERVER_ENV} at the binary.`,
].join("\n");

/**
 * Takes nats-server from Debian's archive without touching the machine's apt setup (see
 * {@link openDebianArchive}): apt downloads the .deb into a temp dir and dpkg only unpacks
 * it. Debian stable lags behind (bookworm ships 2.9), so the default suite is sid. Running
 * it again with a good binary in place does nothing.
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

  try {
    await using archive = await openDebianArchive({
      suite: options.suite ?? DEFAULT_SUITE,
      ...(options.mirror === undefined ? {} : { mirror: options.mirror }),
      ...(options.system === undefined ? {} : { system: options.system }),
      log,
    });
    log("Downloading nats-server …");
    const [deb] = await archive.download([NATS_SERVER_BINARY]);
    log(`Downloaded ${basename(deb!)}`);
    const unpacked = join(archive.dir, "x");
    await archive.unpack(deb!, unpacked);
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
  } catch (error) {
    throw asInstallError(error);
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

function asInstallError(error: unknown): unknown {
  if (error instanceof DebianArchiveUnsupportedError) {
    return new NatsServerInstallUnsupportedError(
      `Cannot install nats-server automatically: ${error.missing.join(" and ")} not found on PATH ` +
        `(the installer unpacks Debian's package).\n${MANUAL_INSTALL_HINT}`,
      { cause: error },
    );
  }
  if (error instanceof DebianArchiveError) {
    return new NatsServerInstallError(`${error.message}\n${MANUAL_INSTALL_HINT}`, { cause: error });
  }
  return error;
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
