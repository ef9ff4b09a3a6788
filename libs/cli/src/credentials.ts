import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  type AccountSpec,
  natsAccounts,
  newNatsCredential,
  PRINCIPALS,
  type Principal,
  publicKeyOf,
} from "@holdfast/bus";
import { renderAccounts } from "@holdfast/natsd";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";

/**
 * The secrets a stack on this machine runs with, kept in `<data_dir>/credentials/` (a
 * directory only its owner may enter, each file readable by its owner alone): a NATS nkey
 * seed per principal, and the bearer tokens of the control API (read and change), of the
 * budget service (gateways) and of workers. `holdfast up` makes what is missing and keeps
 * what is there, so a restart changes nothing; `holdfast credentials --rotate` replaces
 * them all (the running stack keeps the old ones until it is restarted).
 */
export interface LocalCredentials {
  readonly dir: string;
  /** Each principal's NATS credential file and its public key (the server's user). */
  readonly nats: Readonly<Record<Principal, { readonly file: string; readonly publicKey: string }>>;
  readonly tokens: Readonly<Record<TokenName, string>>;
  readonly tokenFiles: Readonly<Record<TokenName, string>>;
}

/** The bearer tokens: who presents each, and its file. */
export const TOKENS = {
  /** The operator's: reads and changes runs (control.token). */
  control: { file: "control.token", prefix: "hfc_" },
  /** The operator's read-only token (control.read_token). */
  read: { file: "read.token", prefix: "hfr_" },
  /** Gateways', to the budget service (budget.token). */
  budget: { file: "budget.token", prefix: "hfb_" },
  /** Workers', to serve durable runs and nothing else (scheduler.worker_token). */
  worker: { file: "worker.token", prefix: "hfw_" },
} as const;

export type TokenName = keyof typeof TOKENS;

export const credentialsDir = (dataDir: string) => join(dataDir, "credentials");

const natsFile = (dir: string, principal: Principal) => join(dir, `nats-${principal}.nk`);

/**
 * The credentials under `dataDir`, made where missing (and all of them anew with
 * `rotate`). A directory or file others may read is brought to the owner alone.
 */
export function ensureCredentials(dataDir: string, options: { rotate?: boolean } = {}): LocalCredentials {
  return ensureCredentialsIn(credentialsDir(dataDir), options);
}

/** As `ensureCredentials`, in a directory of your own (a deployment's secrets, say). */
export function ensureCredentialsIn(dir: string, options: { rotate?: boolean } = {}): LocalCredentials {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // A directory made before (or by another tool) is brought to 700 as well.
  chmodSync(dir, 0o700);
  const rotate = options.rotate === true;
  const nats = {} as Record<Principal, { file: string; publicKey: string }>;
  for (const principal of PRINCIPALS) {
    const file = natsFile(dir, principal);
    if (rotate || !existsSync(file)) writeSecret(file, newNatsCredential().seed);
    nats[principal] = { file, publicKey: publicKeyOf(readSecret(file)) };
  }
  const tokens = {} as Record<TokenName, string>;
  const tokenFiles = {} as Record<TokenName, string>;
  for (const [name, { file, prefix }] of Object.entries(TOKENS) as [
    TokenName,
    (typeof TOKENS)[TokenName],
  ][]) {
    const path = join(dir, file);
    if (rotate || !existsSync(path)) writeSecret(path, `${prefix}${randomBytes(32).toString("base64url")}`);
    tokens[name] = readSecret(path);
    tokenFiles[name] = path;
  }
  return { dir, nats, tokens, tokenFiles };
}

/**
 * The credentials a stack on this data dir made, for a command run by the same user, or
 * undefined where there are none (a stack configured by hand). Nothing is made here.
 */
export function readCredentials(dataDir: string): LocalCredentials | undefined {
  const dir = credentialsDir(dataDir);
  if (!existsSync(dir)) return undefined;
  try {
    const nats = {} as Record<Principal, { file: string; publicKey: string }>;
    for (const principal of PRINCIPALS) {
      const file = natsFile(dir, principal);
      nats[principal] = { file, publicKey: publicKeyOf(readSecret(file)) };
    }
    const tokens = {} as Record<TokenName, string>;
    const tokenFiles = {} as Record<TokenName, string>;
    for (const [name, { file }] of Object.entries(TOKENS) as [TokenName, (typeof TOKENS)[TokenName]][]) {
      tokenFiles[name] = join(dir, file);
      tokens[name] = readSecret(tokenFiles[name]);
    }
    return { dir, nats, tokens, tokenFiles };
  } catch (error) {
    const { code, path } = error as NodeJS.ErrnoException;
    if (code === "EACCES") {
      throw new CliError(
        `cannot read Holdfast's credentials in ${dir}: they belong to the user who ran holdfast up`,
      );
    }
    if (code === "ENOENT") {
      throw new CliError(
        `Holdfast's credentials in ${dir} are incomplete (${path ?? "a file"} is missing): \`${holdfastCommand()} credentials\` makes what is missing (restart holdfast up to use it)`,
      );
    }
    throw new CliError(`cannot read Holdfast's credentials in ${dir}: ${(error as Error).message}`);
  }
}

/** nats-server's accounts for these credentials: every principal's, with its permissions. */
export function natsAccountsOf(
  credentials: LocalCredentials,
  options: { prefix: string; projectorConsumer: string },
): AccountSpec[] {
  const keys = Object.fromEntries(PRINCIPALS.map((p) => [p, credentials.nats[p].publicKey])) as Record<
    Principal,
    string
  >;
  return natsAccounts(keys, options);
}

/**
 * The `accounts` block for a nats-server of your own (include it in its config): every
 * principal's account and user, with its permissions, exports and imports. Public keys only:
 * no secret.
 */
export function natsAuthorization(
  credentials: LocalCredentials,
  options: { prefix: string; projectorConsumer: string },
): string {
  return `${renderAccounts(natsAccountsOf(credentials, options))}\n`;
}

function writeSecret(path: string, secret: string): void {
  // Written whole under another name, then renamed: never seen half written, never with a
  // mode wider than the owner's.
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, `${secret}\n`, { mode: 0o600 });
  chmodSync(temporary, 0o600);
  renameSync(temporary, path);
}

function readSecret(path: string): string {
  const mode = statSync(path).mode & 0o077;
  if (mode !== 0) chmodSync(path, 0o600);
  return readFileSync(path, "utf8").trim();
}

/**
 * The tokens a command on this machine presents: the configuration's, else those `holdfast
 * up` made on the data dir (read by the user who ran it).
 */
export function localTokens(config: {
  data_dir: string;
  control: { token?: string | undefined; read_token?: string | undefined };
  scheduler: { worker_token?: string | undefined };
}): { control: string | undefined; read: string | undefined; worker: string | undefined } {
  const made =
    config.control.token === undefined ||
    config.control.read_token === undefined ||
    config.scheduler.worker_token === undefined
      ? readCredentials(config.data_dir)
      : undefined;
  return {
    control: config.control.token ?? made?.tokens.control,
    read: config.control.read_token ?? made?.tokens.read,
    worker: config.scheduler.worker_token ?? made?.tokens.worker,
  };
}
