import { createHash } from "node:crypto";
import { HoldfastKeyRequiredError, HoldfastKeyUnknownError } from "../errors.js";

/** The header a tenant's agent sends its gateway key in, beside its provider's key. */
export const KEY_HEADER = "x-holdfast-key";

/** `tenants` as configured: each tenant's gateway keys, by their SHA-256 (hex, lower case). */
export type TenantsConfig = Readonly<Record<string, { readonly keys_sha256: readonly string[] }>>;

/**
 * Which tenant a gateway key is, from the keys' SHA-256 alone (the configuration holds no
 * usable key): one hash and one map lookup per call, however many tenants and keys.
 */
export class TenantKeys {
  private readonly byHash = new Map<string, string>();

  constructor(tenants: TenantsConfig) {
    for (const [tenant, { keys_sha256 }] of Object.entries(tenants)) {
      for (const hash of keys_sha256) this.byHash.set(hash.toLowerCase(), tenant);
    }
  }

  /** The tenant whose key `value` (the header as received) is; a 401 error when none is sent, or no tenant's. */
  tenantOf(value: string | string[] | undefined): string {
    // A header sent twice arrives joined with ", " (or as a list): no key is two keys.
    if (Array.isArray(value)) throw new HoldfastKeyUnknownError();
    const key = value?.trim() ?? "";
    if (key === "") throw new HoldfastKeyRequiredError();
    const tenant = this.byHash.get(sha256Hex(key));
    if (tenant === undefined) throw new HoldfastKeyUnknownError();
    return tenant;
  }
}

/** The SHA-256 of a key, in hex: what `tenants.<tenant>.keys_sha256` lists. */
export function sha256Hex(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}
