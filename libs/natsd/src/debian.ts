import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DebianArchiveError, DebianArchiveUnsupportedError } from "./errors.js";
import { describeExecError } from "./find.js";
import { resolveSystem, type System } from "./system.js";

export const DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian";
const KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg";
const APT_TIMEOUT_MS = 10 * 60_000;

export interface OpenDebianArchiveOptions {
  /** "bookworm", "sid", …; only its `main` component is used. */
  readonly suite: string;
  readonly mirror?: string;
  readonly log?: (line: string) => void;
  readonly system?: Partial<System>;
}

/** One package's record in the archive's index, as `apt-cache show` prints it. */
export type ControlStanza = Readonly<Record<string, string>>;

/** One name in a Depends field: `python3 (>> 3.8)` or `python3:any`. */
export interface DebianRelation {
  readonly name: string;
  /** The `:any` / `:native` qualifier, when present. */
  readonly qualifier?: string;
  readonly operator?: "<<" | "<=" | "=" | ">=" | ">>";
  readonly version?: string;
}

/** Any one of the alternatives (`a | b`) satisfies the group. */
export type DebianRelationGroup = readonly DebianRelation[];

/**
 * A private view of one Debian suite: apt gets its own sources list, package lists, cache
 * and (empty) dpkg status in a temp dir, so the machine's apt setup is neither read nor
 * changed and nothing is installed; packages are only downloaded and unpacked where asked.
 * The host's proxy settings still apply. Close it to remove the temp dir.
 */
export interface DebianArchive extends AsyncDisposable {
  readonly suite: string;
  readonly mirror: string;
  /** Scratch space, removed on close. */
  readonly dir: string;
  /** The candidate version's record of each package, in the order asked; throws on a name the suite lacks. */
  show(packages: readonly string[]): Promise<ControlStanza[]>;
  /** Downloads the candidate `.deb` of each package; returns their paths in the order asked. */
  download(packages: readonly string[]): Promise<string[]>;
  /** `dpkg -x`: unpacks a package's files under `into` without running its scripts. */
  unpack(deb: string, into: string): Promise<void>;
  close(): Promise<void>;
}

/** Creates the private apt state and fetches the suite's package index. */
export async function openDebianArchive(options: OpenDebianArchiveOptions): Promise<DebianArchive> {
  const system = resolveSystem(options.system);
  const log = options.log ?? (() => {});
  const { suite } = options;
  const mirror = options.mirror ?? DEFAULT_DEBIAN_MIRROR;

  const missing: string[] = [];
  for (const tool of ["apt-get", "dpkg"]) {
    if ((await system.which(tool)) === undefined) missing.push(tool);
  }
  if (missing.length > 0) {
    throw new DebianArchiveUnsupportedError(`${missing.join(" and ")} not found on PATH`, missing);
  }

  const dir = await mkdtemp(join(tmpdir(), "holdfast-debian-"));
  const close = () => rm(dir, { recursive: true, force: true });
  try {
    const sources = join(dir, "sources.list");
    const status = join(dir, "status");
    await Promise.all([
      mkdir(join(dir, "lists", "partial"), { recursive: true }),
      mkdir(join(dir, "cache", "archives", "partial"), { recursive: true }),
      mkdir(join(dir, "preferences.d"), { recursive: true }),
      mkdir(join(dir, "debs")),
      writeFile(sources, `deb [signed-by=${KEYRING}] ${mirror} ${suite} main\n`),
      writeFile(status, ""),
    ]);

    // Every path apt would read or write is redirected into `dir`, so the host's sources,
    // lists, pins and installed versions neither leak in nor get changed.
    const aptOptions = [
      ["Dir::Etc::sourcelist", sources],
      ["Dir::Etc::sourceparts", "-"],
      ["Dir::Etc::preferences", join(dir, "preferences")],
      ["Dir::Etc::preferencesparts", join(dir, "preferences.d")],
      ["Dir::State::Lists", join(dir, "lists")],
      ["Dir::State::status", status],
      ["Dir::Cache", join(dir, "cache")],
      ["APT::Get::List-Cleanup", "0"],
      ["Acquire::Languages", "none"],
      // Without this apt-get update exits 0 after a failed fetch, and the error only shows up
      // later as a puzzling "Unable to locate package".
      ["APT::Update::Error-Mode", "any"],
    ].flatMap(([key, value]) => ["-o", `${key}=${value}`]);
    const hint = `Check that this machine can reach ${mirror}.`;

    const run = async (file: string, args: readonly string[], what: string, cwd?: string) => {
      try {
        return await system.exec(file, args, { cwd, timeoutMs: APT_TIMEOUT_MS });
      } catch (error) {
        throw new DebianArchiveError(`${what} failed: ${describeExecError(error)}\n${hint}`, {
          cause: error,
        });
      }
    };

    log(`Fetching the package index of Debian ${suite} from ${mirror} …`);
    await run("apt-get", [...aptOptions, "update"], `apt-get update for Debian ${suite}`);

    const archive: DebianArchive = {
      suite,
      mirror,
      dir,
      async show(packages) {
        const { stdout } = await run(
          "apt-cache",
          [...aptOptions, "show", "--no-all-versions", ...packages],
          `apt-cache show ${packages.join(" ")}`,
        );
        const byName = new Map(parseControl(stdout).map((stanza) => [stanza.Package, stanza]));
        return packages.map((name) => {
          const stanza = byName.get(name);
          if (stanza === undefined) {
            throw new DebianArchiveError(
              `Debian ${suite} has no package named ${name} (or it is purely virtual).`,
            );
          }
          return stanza;
        });
      },
      async download(packages) {
        const into = join(dir, "debs");
        await run(
          "apt-get",
          [...aptOptions, "download", ...packages],
          `apt-get download ${packages.join(" ")}`,
          into,
        );
        const files = await readdir(into);
        return packages.map((name) => {
          const deb = files.find((file) => file.startsWith(`${name}_`) && file.endsWith(".deb"));
          if (deb === undefined) {
            throw new DebianArchiveError(
              `apt-get download reported success but left no ${name}_*.deb in ${into}.`,
            );
          }
          return join(into, deb);
        });
      },
      async unpack(deb, into) {
        await run("dpkg", ["-x", deb, into], `Unpacking ${deb}`);
      },
      close,
      [Symbol.asyncDispose]: close,
    };
    return archive;
  } catch (error) {
    await close();
    throw error;
  }
}

/** Splits Debian control text (a Packages file, `apt-cache show`) into stanzas of fields. */
export function parseControl(text: string): ControlStanza[] {
  const stanzas: Record<string, string>[] = [];
  let current: Record<string, string> | undefined;
  let last: string | undefined;
  for (const line of text.split("\n")) {
    if (line.trim() === "") {
      current = undefined;
      last = undefined;
    } else if (/^[ \t]/.test(line)) {
      if (current !== undefined && last !== undefined) current[last] += `\n${line.trim()}`;
    } else {
      const colon = line.indexOf(":");
      if (colon <= 0) continue;
      if (current === undefined) {
        current = {};
        stanzas.push(current);
      }
      last = line.slice(0, colon);
      current[last] = line.slice(colon + 1).trim();
    }
  }
  return stanzas;
}

const RELATION = /^([a-z0-9][a-z0-9+.-]*)(?::([a-z0-9-]+))?\s*(?:\(\s*(<<|<=|=|>=|>>)\s*([^)\s]+)\s*\))?$/;

/**
 * Parses a binary package's relationship field (Depends, Pre-Depends, Recommends) into
 * groups of alternatives. Architecture restrictions (`[amd64]`), which only source
 * packages use, are dropped.
 */
export function parseRelations(field: string | undefined): DebianRelationGroup[] {
  if (field === undefined || field.trim() === "") return [];
  return field.split(",").map((group) =>
    group.split("|").map((alternative) => {
      const text = alternative.replace(/\[[^\]]*\]/g, "").trim();
      const match = RELATION.exec(text);
      if (match === null) throw new DebianArchiveError(`Unreadable package relation "${alternative.trim()}"`);
      const [, name, qualifier, operator, version] = match;
      return {
        name: name!,
        ...(qualifier === undefined ? {} : { qualifier }),
        ...(operator === undefined ? {} : { operator: operator as DebianRelation["operator"], version }),
      };
    }),
  );
}
