import type { FastifyInstance } from "fastify";
import { shared } from "../pipeline/hooks.js";
import { KEY_HEADER, type TenantKeys } from "./keys.js";

declare module "fastify" {
  interface FastifyRequest {
    /**
     * The tenant of the gateway key the call carried, with `tenants` configured; undefined
     * without, when the call's tenant is what its tenant header says.
     */
    keyTenant: string | undefined;
  }
}

/**
 * With `tenants` configured, every /v1/* call (metered or passed through) must carry a
 * tenant's gateway key: one without, or with a key no tenant has, is answered 401 in its
 * API's error shape before its body is read, so nothing is forwarded or recorded.
 */
export function authenticate(keys: TenantKeys | undefined) {
  return shared(async (app: FastifyInstance) => {
    app.decorateRequest("keyTenant", undefined);
    if (keys === undefined) return;
    app.addHook("onRequest", (request, _reply, done) => {
      if (!request.url.startsWith("/v1/")) return done();
      try {
        request.keyTenant = keys.tenantOf(request.headers[KEY_HEADER]);
      } catch (error) {
        return done(error as Error);
      }
      done();
    });
  });
}
