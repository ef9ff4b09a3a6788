import { createHash, timingSafeEqual } from "node:crypto";
import { type Actor, ActorKind } from "@holdfast/events";

/** What a route needs: to read (runs, rules) or to change (hold, resume, stop, lift). */
export type Access = "read" | "change";

/**
 * Why a caller was turned away: `unauthenticated`, no token or an unknown one;
 * `permission_denied`, the read-only token asking to change. Each API answers it in its
 * own shape (HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED).
 */
export class AccessDeniedError extends Error {
  override readonly name = "AccessDeniedError";
  constructor(
    readonly reason: "unauthenticated" | "permission_denied",
    message: string,
  ) {
    super(message);
  }
}

export interface ControlAccessConfig {
  readonly host: string;
  readonly token?: string | undefined;
  readonly read_token?: string | undefined;
  readonly insecure: boolean;
}

/**
 * Who may call the control API, decided from the `Authorization` header (or gRPC
 * metadata) alone. With control.token set, every call needs a token: the read-only token
 * reads, the control token reads and changes. With no token configured, every caller is
 * let in: the service only starts that way on loopback, or when told it is insecure.
 */
export class AccessPolicy {
  private readonly control: Buffer | undefined;
  private readonly read: Buffer | undefined;
  private readonly open: Actor;

  constructor(
    config: ControlAccessConfig,
    /** How errors name the API, and what its read-only token may do there. */
    private readonly api: { name: string; readOnly: string },
  ) {
    this.control = config.token === undefined ? undefined : verifierOf(config.token);
    this.read = config.read_token === undefined ? undefined : verifierOf(config.read_token);
    this.open = {
      kind: ActorKind.ACTOR_KIND_OPERATOR,
      name: isLoopback(config.host) ? "loopback, no token" : "no token (control.insecure)",
    };
  }

  /** Whether callers must present a token. */
  get required(): boolean {
    return this.control !== undefined || this.read !== undefined;
  }

  /**
   * The actor recorded on what the caller changes. Throws AccessDeniedError for a missing
   * or unknown token, and for the read-only token asking to change.
   */
  authorize(authorization: string | undefined, need: Access): Actor {
    if (!this.required) return this.open;
    const token = bearer(authorization);
    if (token === undefined) {
      throw new AccessDeniedError(
        "unauthenticated",
        `this ${this.api.name} needs a token: send \`Authorization: Bearer <token>\` (control.token, or control.read_token to read)`,
      );
    }
    const presented = digest(token);
    if (this.control !== undefined && timingSafeEqual(presented, this.control)) {
      return { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };
    }
    if (this.read !== undefined && timingSafeEqual(presented, this.read)) {
      if (need === "read") return { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "read-only token" };
      throw new AccessDeniedError(
        "permission_denied",
        `the read-only token (control.read_token) may ${this.api.readOnly}: use control.token`,
      );
    }
    throw new AccessDeniedError("unauthenticated", `the bearer token is not one this ${this.api.name} knows`);
  }

  /**
   * Whether `authorization` may do what `need` asks, for a route that answers everyone but
   * shows more to those allowed (a health route: liveness to anyone, details to a reader).
   */
  allows(authorization: string | undefined, need: Access): boolean {
    try {
      this.authorize(authorization, need);
      return true;
    } catch (error) {
      if (error instanceof AccessDeniedError) return false;
      throw error;
    }
  }
}

/** A listener the tokens guard, as bindingProblem names it. */
export interface GuardedListener {
  /** "control API", "analytics API", … */
  readonly name: string;
  /** The key of the interface it listens on: "control.host", "projector.host", … */
  readonly hostKey: string;
  /** What anyone who reaches it could do without a token. */
  readonly exposes: string;
}

const CONTROL_API: GuardedListener = {
  name: "control API",
  hostKey: "control.host",
  exposes: "hold, resume and stop runs",
};

/** The scheduler's runs API (gRPC and REST): durable runs and the agents they run. */
export const RUNS_API: GuardedListener = {
  name: "runs API",
  hostKey: "scheduler.host",
  exposes: "submit, stop and read durable runs, and deploy agents",
};

/** The projector's analytics API: operator SQL over everything recorded, and the runs. */
export const ANALYTICS_API: GuardedListener = {
  name: "analytics API",
  hostKey: "projector.host",
  exposes: "read every run's recorded calls with SQL",
};

/**
 * Why a listener guarded by the control tokens (by default the control API) must not start
 * with this configuration, or undefined when it may: off loopback without a token, anyone
 * who reaches it could do what it `exposes`.
 */
export function bindingProblem(
  config: ControlAccessConfig,
  listener: GuardedListener = CONTROL_API,
): string | undefined {
  if (
    config.token !== undefined &&
    config.read_token !== undefined &&
    verifierOf(config.token).equals(verifierOf(config.read_token))
  ) {
    return "control.read_token is the same as control.token: a read-only token must differ from the one that may change runs";
  }
  return listenerProblem({
    ...listener,
    host: config.host,
    authenticated: config.token !== undefined || config.read_token !== undefined,
    insecure: config.insecure,
    setting: "control.token (and control.read_token; `holdfast up` makes both)",
    insecureSetting: "control.insecure: true",
  });
}

/**
 * Why a listener must not start, or undefined when it may: off loopback without its
 * credential, anyone who reaches it could do what it `exposes`. `insecure` allows it knowingly.
 */
export function listenerProblem(
  listener: GuardedListener & {
    readonly host: string;
    /** A credential is required of every caller. */
    readonly authenticated: boolean;
    readonly insecure: boolean;
    /** What to set, and what allows it anyway ("budget.token", "budget.insecure: true"). */
    readonly setting: string;
    readonly insecureSetting: string;
  },
): string | undefined {
  if (listener.authenticated || listener.insecure || isLoopback(listener.host)) return undefined;
  return (
    `the ${listener.name} would listen on ${listener.host} without a token, so anyone who can reach it could ${listener.exposes}. ` +
    `Set ${listener.setting}, or keep ${listener.hostKey} on loopback (127.0.0.1), or allow it knowingly with ${listener.insecureSetting}.`
  );
}

/** 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (bare === "localhost" || bare === "::1" || bare === "0:0:0:0:0:0:0:1") return true;
  return (
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare) || /^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare)
  );
}

function bearer(authorization: string | undefined): string | undefined {
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? "");
  return match?.[1];
}

// Equal-length digests, so comparing them takes the same time whatever was sent.
function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

const DIGEST = /^sha256:([0-9a-f]{64})$/i;

/**
 * A token as a service that only checks it is given it: `sha256:` and the hex SHA-256 of
 * the token. A service holding the digest accepts the token and cannot present it, so
 * taking the process over yields no credential to call anything else with.
 */
export function tokenDigest(token: string): string {
  return `sha256:${digest(token).toString("hex")}`;
}

/** Whether a configured token is a digest (`sha256:<hex>`), which can be checked but never presented. */
export function isTokenDigest(value: string): boolean {
  return DIGEST.test(value);
}

/** What a presented token's digest is compared with: the digest given, or the token's. */
/** Whether two token settings name the same token, each given as itself or as its digest. */
export function sameToken(a: string, b: string): boolean {
  return verifierOf(a).equals(verifierOf(b));
}

function verifierOf(value: string): Buffer {
  const hex = DIGEST.exec(value)?.[1];
  return hex === undefined ? digest(value) : Buffer.from(hex, "hex");
}

/**
 * The token itself, for a service that presents it to another (the control service's read
 * token to the projector, a gateway's budget token): a digest there is a configuration
 * mistake named by `setting`, reported at start rather than as 401s from the other service.
 */
export function presentedToken(value: string | undefined, setting: string, use: string): string | undefined {
  if (value === undefined || !isTokenDigest(value)) return value;
  throw new Error(
    `${setting} is a digest (sha256:…), which can only check a token: this service ${use} and needs the token itself`,
  );
}

/**
 * The one bearer token every caller of an internal service presents (gateways calling the
 * budget service, say): the service's own credential, not an operator's. Without one set,
 * every caller is let in, which `listenerProblem` allows on loopback only.
 */
export class ServiceToken {
  private readonly expected: Buffer | undefined;

  constructor(
    token: string | undefined,
    /** How errors name the API and the setting that holds its token ("the budget service", "budget.token"). */
    private readonly what: { api: string; setting: string },
  ) {
    this.expected = token === undefined ? undefined : verifierOf(token);
  }

  get required(): boolean {
    return this.expected !== undefined;
  }

  /** Throws AccessDeniedError (unauthenticated) unless `authorization` is `Bearer <the token>`. */
  check(authorization: string | undefined): void {
    if (this.expected === undefined) return;
    const token = bearer(authorization);
    if (token === undefined) {
      throw new AccessDeniedError(
        "unauthenticated",
        `${this.what.api} needs a token: send \`authorization: Bearer <token>\` (${this.what.setting})`,
      );
    }
    if (!timingSafeEqual(digest(token), this.expected)) {
      throw new AccessDeniedError("unauthenticated", `the bearer token is not one ${this.what.api} knows`);
    }
  }
}
