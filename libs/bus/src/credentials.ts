import { readFile } from "node:fs/promises";
import { createUser, fromSeed } from "@nats-io/nkeys";
import { type Authenticator, credsAuthenticator, nkeyAuthenticator } from "@nats-io/transport-node";
import { BusConfigurationError } from "./errors.js";

/** A NATS user credential: an nkey pair. The seed is the secret; the server knows only the public key. */
export interface NatsCredential {
  /** "SU…": what the process holding the credential keeps, in a file only it can read. */
  seed: string;
  /** "U…": what nats-server's configuration names the user by. */
  publicKey: string;
}

/** A fresh nkey user. */
export function newNatsCredential(): NatsCredential {
  const pair = createUser();
  return { seed: new TextDecoder().decode(pair.getSeed()), publicKey: pair.getPublicKey() };
}

/** The public key of a seed ("SU…"). */
export function publicKeyOf(seed: string): string {
  return fromSeed(new TextEncoder().encode(seed.trim())).getPublicKey();
}

/**
 * How to authenticate with the credential file at `path`: an nkey seed (what `holdfast up`
 * writes, one "SU…" line), or a NATS `.creds` file (a user JWT and its seed, as `nsc`
 * writes them for a server in operator mode). The file's content never leaves this
 * function but as the authenticator's signature of the server's nonce.
 */
export async function authenticatorFrom(path: string): Promise<Authenticator> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (cause) {
    throw new BusConfigurationError(
      `cannot read the NATS credential file ${path} (nats.credentials): ${(cause as Error).message}`,
      { cause },
    );
  }
  if (text.includes("BEGIN NATS USER JWT")) return credsAuthenticator(new TextEncoder().encode(text));
  const seed = text.trim();
  if (!/^SU[A-Z2-7]{56}$/.test(seed)) {
    throw new BusConfigurationError(
      `the NATS credential file ${path} (nats.credentials) holds neither an nkey user seed (SU…) nor a .creds file`,
    );
  }
  return nkeyAuthenticator(new TextEncoder().encode(seed));
}
