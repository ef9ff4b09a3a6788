/**
 * Holdfast's appends rely on the expected-last-subject-sequence-subject header, which
 * nats-server only understands from 2.11 on. An older server would treat it as an ordinary
 * header and skip the check, so an older binary is refused rather than tolerated.
 */
export const MIN_NATS_SERVER_VERSION = "2.11.0";

export interface Version {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
  /** "RC.1" in "2.12.0-RC.1"; absent for a release. */
  readonly prerelease?: string;
}

const VERSION = /v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?/;

/** Parses "2.11.0", "v2.11.0-RC.1" or a whole `nats-server --version` line ("nats-server: v2.15.1"). */
export function parseVersion(text: string): Version | undefined {
  const match = VERSION.exec(text);
  if (!match) return undefined;
  const [, major, minor, patch, prerelease] = match;
  const version = { major: Number(major), minor: Number(minor), patch: Number(patch) };
  return prerelease === undefined ? version : { ...version, prerelease };
}

export function formatVersion(version: Version): string {
  const core = `${version.major}.${version.minor}.${version.patch}`;
  return version.prerelease === undefined ? core : `${core}-${version.prerelease}`;
}

/** Semver precedence: negative when a < b. A prerelease sorts before its release. */
export function compareVersions(a: Version, b: Version): number {
  const core = a.major - b.major || a.minor - b.minor || a.patch - b.patch;
  if (core !== 0) return Math.sign(core);
  if (a.prerelease === b.prerelease) return 0;
  if (a.prerelease === undefined) return 1;
  if (b.prerelease === undefined) return -1;
  return comparePrerelease(a.prerelease, b.prerelease);
}

function comparePrerelease(a: string, b: string): number {
  const left = a.split(".");
  const right = b.split(".");
  for (let i = 0; i < Math.max(left.length, right.length); i++) {
    const x = left[i];
    const y = right[i];
    if (x === undefined) return -1;
    if (y === undefined) return 1;
    const xNum = /^\d+$/.test(x);
    const yNum = /^\d+$/.test(y);
    if (xNum && yNum) {
      const diff = Number(x) - Number(y);
      if (diff !== 0) return Math.sign(diff);
    } else if (xNum !== yNum) {
      return xNum ? -1 : 1;
    } else if (x !== y) {
      return x < y ? -1 : 1;
    }
  }
  return 0;
}

/** True when `actual` is at least `minimum`; both are version strings. Unparseable input is never enough. */
export function satisfiesMinimum(actual: string, minimum: string): boolean {
  const a = parseVersion(actual);
  const m = parseVersion(minimum);
  if (!a || !m) return false;
  return compareVersions(a, m) >= 0;
}
