import { createUser, fromSeed } from "@nats-io/nkeys";

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
