import { createHash, randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { tenantDefect } from "@holdfast/events";
import { COMMON_OPTIONS } from "./common.js";
import { CliError } from "./errors.js";

export const TENANTS_USAGE = `holdfast tenants key <tenant> [--json] [--data-dir DIR] [--config FILE]

Makes a new gateway key for <tenant> and prints it once, with what to add to the
configuration: its SHA-256 under tenants.<tenant>.keys_sha256 (the file holds hashes only,
never a usable key). Writes nothing: add the line, restart the gateway (holdfast up), and
give the key to the tenant, whose agents send it in the X-Holdfast-Key header beside their
provider's key. Lose it and make another; remove its hash to revoke it. --data-dir and
--config are accepted, as by every command, and change nothing here: a key depends on no
configuration. See the README's "Tenants".`;

/** A new gateway key for a tenant: the key, once, and the hash the configuration lists. */
export interface TenantKey {
  readonly tenant: string;
  /** `hfk_` and 32 random bytes, base64url: what the tenant's agents send. */
  readonly key: string;
  /** Its SHA-256, hex: what `tenants.<tenant>.keys_sha256` lists. */
  readonly sha256: string;
}

/** A key for `tenant` from 32 random bytes. Throws CliError for a name no tenant may have. */
export function newTenantKey(tenant: string, random: Buffer = randomBytes(32)): TenantKey {
  const defect = tenantDefect(tenant);
  if (defect !== undefined) throw new CliError(`the tenant name ${JSON.stringify(tenant)} ${defect}`, 2);
  const key = `hfk_${random.toString("base64url")}`;
  return { tenant, key, sha256: createHash("sha256").update(key, "utf8").digest("hex") };
}

/** What `holdfast tenants key` prints: the key, and the configuration to add. */
export function describeTenantKey({ tenant, key, sha256 }: TenantKey): string {
  return `Gateway key for tenant ${JSON.stringify(tenant)} (shown once; Holdfast keeps only its hash):

  ${key}

Add its hash to the configuration (holdfast.yaml), then restart the gateway:

tenants:
  ${yamlKey(tenant)}:
    keys_sha256:
      - "${sha256}"

The tenant's agents send the key beside their provider's key, e.g.
  OpenAI(base_url="http://127.0.0.1:4141/v1", default_headers={"X-Holdfast-Key": "<the key>"})`;
}

export async function tenants(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    // The options every command takes, so a script that passes --data-dir or --config to
    // each command works here too; a key depends on neither.
    options: { ...COMMON_OPTIONS, help: { type: "boolean", default: false, short: "h" } },
  });
  if (values.help) return void console.log(TENANTS_USAGE);
  const [action, tenant, ...rest] = positionals;
  if (action !== "key" || tenant === undefined || rest.length > 0) {
    throw new CliError(`expected: tenants key <tenant>\n\n${TENANTS_USAGE}`, 2);
  }
  const made = newTenantKey(tenant);
  if (values.json) return void console.log(JSON.stringify({ tenant, key: made.key, sha256: made.sha256 }));
  console.log(describeTenantKey(made));
}

// A tenant's name as a YAML key: plain when it surely reads back as itself (no number, no
// boolean or null), else double-quoted (a JSON string is a YAML double-quoted scalar).
function yamlKey(name: string): string {
  const plain = /^[A-Za-z][A-Za-z0-9_-]*$/.test(name) && !/^(true|false|null|yes|no|on|off|y|n)$/i.test(name);
  return plain ? name : JSON.stringify(name);
}
