import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type AccessOptions,
  type Bus,
  connectBus,
  newNatsCredential,
  PRINCIPALS,
  type Principal,
  permissionsFor,
} from "@holdfast/bus";
import type { NatsUser } from "@holdfast/natsd";

/** A credential per principal, in files as `holdfast up` writes them, and the server's users for them. */
export interface TestCredentials {
  readonly files: Readonly<Record<Principal, string>>;
  readonly users: readonly NatsUser[];
}

/** Makes a credential for every principal under `dir`, with the permissions of this prefix. */
export async function makeCredentials(dir: string, access: AccessOptions): Promise<TestCredentials> {
  const files = {} as Record<Principal, string>;
  const users: NatsUser[] = [];
  for (const principal of PRINCIPALS) {
    const credential = newNatsCredential();
    files[principal] = join(dir, `nats-${principal}.nk`);
    await writeFile(files[principal], `${credential.seed}\n`, { mode: 0o600 });
    users.push({ nkey: credential.publicKey, permissions: permissionsFor(principal, access) });
  }
  return { files, users };
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
