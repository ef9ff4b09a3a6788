import { readFile } from "node:fs/promises";
import { type Authenticator, credsAuthenticator, nkeyAuthenticator } from "@nats-io/transport-node";
import { BusConfigurationError } from "./errors.js";

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
