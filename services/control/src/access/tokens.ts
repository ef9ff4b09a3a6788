import {
  type Access,
  AccessDeniedError,
  type ControlAccessConfig,
  AccessPolicy as TokenPolicy,
} from "@holdfast/access";
import type { Actor } from "@holdfast/events";
import { PermissionDeniedError, UnauthenticatedError } from "../errors.js";

export { type Access, bindingProblem, isLoopback } from "@holdfast/access";

/** Who may call the control API (the tokens of @holdfast/access), refused in this API's errors. */
export class AccessPolicy {
  private readonly tokens: TokenPolicy;

  constructor(config: ControlAccessConfig) {
    this.tokens = new TokenPolicy(config, {
      name: "control API",
      readOnly: "list and show runs and rules, not hold, resume, stop or lift",
    });
  }

  /** Whether callers must present a token. */
  get required(): boolean {
    return this.tokens.required;
  }

  /** The actor recorded on what the caller changes; UnauthenticatedError or PermissionDeniedError when refused. */
  authorize(authorization: string | undefined, need: Access): Actor {
    try {
      return this.tokens.authorize(authorization, need);
    } catch (error) {
      if (!(error instanceof AccessDeniedError)) throw error;
      throw error.reason === "unauthenticated"
        ? new UnauthenticatedError(error.message)
        : new PermissionDeniedError(error.message);
    }
  }

  /** Whether `authorization` may do what `need` asks (the health details: a reader's). */
  allows(authorization: string | undefined, need: Access): boolean {
    return this.tokens.allows(authorization, need);
  }
}
