import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type AccessOptions,
  type AccountSpec,
  type Bus,
  connectBus,
  natsAccounts,
  newNatsCredential,
  PRINCIPALS,
  type Principal,
} from "@holdfast/bus";

/** A credential per principal, in files as `holdfast up` writes them, and the server's accounts for them. */
export interface TestCredentials {
  readonly files: Readonly<Record<Principal, string>>;
  readonly accounts: readonly AccountSpec[];
}

/** Makes a credential for every principal under `dir`, with the accounts and permissions of this prefix. */
export async function makeCredentials(dir: string, access: AccessOptions): Promise<TestCredentials> {
  const files = {} as Record<Principal, string>;
  const keys = {} as Record<Principal, string>;
  for (const principal of PRINCIPALS) {
    const credential = newNatsCredential();
    files[principal] = join(dir, `nats-${principal}.nk`);
    keys[principal] = credential.publicKey;
    await writeFile(files[principal], `${credential.seed}\n`, { mode: 0o600 });
  }
  return { files, accounts: natsAccounts(keys, access) };
}

/** A connection to the log as one principal, with its credential. */
export function connectAs(
  principal: Principal,
  options: { servers: string; prefix: string; replicas?: number; credentials: TestCredentials | undefined },
): Promise<Bus> {
  return connectBus({
    servers: options.servers,
    prefix: options.prefix,
    name: `e2e ${principal}`,
    ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
    ...(options.credentials === undefined
      ? {}
      : { credentials: options.credentials.files[principal], principal }),
  });
}
