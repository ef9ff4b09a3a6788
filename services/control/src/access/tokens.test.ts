import { presentedToken, ServiceToken, tokenDigest } from "@holdfast/access";
import { ActorKind } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { PermissionDeniedError, UnauthenticatedError } from "../errors.js";
import { AccessPolicy, bindingProblem, isLoopback } from "./tokens.js";

const TOKENS = { host: "0.0.0.0", token: "change-me", read_token: "look-only", insecure: false };

describe("who may call the control API", () => {
  const policy = new AccessPolicy(TOKENS);

  it("lets the control token read and change, recorded as the control token", () => {
    for (const need of ["read", "change"] as const) {
      expect(policy.authorize("Bearer change-me", need)).toEqual({
        kind: ActorKind.ACTOR_KIND_OPERATOR,
        name: "control token",
      });
    }
  });

  it("lets the read-only token read, and refuses it every change with a 403 that says why", () => {
    expect(policy.authorize("bearer look-only", "read").name).toBe("read-only token");
    expect(() => policy.authorize("Bearer look-only", "change")).toThrow(PermissionDeniedError);
    expect(() => policy.authorize("Bearer look-only", "change")).toThrow(/read-only token.*control\.token/);
  });

  it("refuses a missing, malformed or unknown token with a 401", () => {
    for (const header of [undefined, "", "change-me", "Basic change-me", "Bearer", "Bearer change-me2"]) {
      expect(() => policy.authorize(header, "read"), String(header)).toThrow(UnauthenticatedError);
    }
  });

  it("lets everyone in when no token is configured, naming how in the actor", () => {
    const open = new AccessPolicy({ host: "127.0.0.1", insecure: false });
    expect(open.required).toBe(false);
    expect(open.authorize(undefined, "change").name).toBe("loopback, no token");
    const insecure = new AccessPolicy({ host: "0.0.0.0", insecure: true });
    expect(insecure.authorize("Bearer anything", "change").name).toBe("no token (control.insecure)");
  });

  it("needs tokens once only a read-only token is configured; nobody may change then", () => {
    const readOnly = new AccessPolicy({ host: "127.0.0.1", read_token: "look-only", insecure: false });
    expect(readOnly.authorize("Bearer look-only", "read").name).toBe("read-only token");
    expect(() => readOnly.authorize(undefined, "read")).toThrow(UnauthenticatedError);
    expect(() => readOnly.authorize("Bearer look-only", "change")).toThrow(PermissionDeniedError);
  });
});

describe("tokens given as digests, to services that only check them", () => {
  const digests = new AccessPolicy({
    host: "0.0.0.0",
    token: tokenDigest("change-me"),
    read_token: tokenDigest("look-only").toUpperCase().replace("SHA256:", "sha256:"),
    insecure: false,
  });

  it("accepts the tokens whose digests they hold, each with its own rights", () => {
    expect(digests.authorize("Bearer change-me", "change").name).toBe("control token");
    expect(digests.authorize("Bearer look-only", "read").name).toBe("read-only token");
    expect(() => digests.authorize("Bearer look-only", "change")).toThrow(PermissionDeniedError);
  });

  it("refuses the digest itself presented as a token, and any other", () => {
    for (const header of [
      `Bearer ${tokenDigest("change-me")}`,
      "Bearer change-mf",
      "Bearer sha256:change-me",
    ]) {
      expect(() => digests.authorize(header, "read"), header).toThrow(UnauthenticatedError);
    }
  });

  it("check a service's token the same way", () => {
    const budget = new ServiceToken(tokenDigest("hfb_secret"), {
      api: "the budget service",
      setting: "budget.token",
    });
    expect(() => budget.check("Bearer hfb_secret")).not.toThrow();
    expect(() => budget.check(`Bearer ${tokenDigest("hfb_secret")}`)).toThrow(
      /not one the budget service knows/,
    );
  });

  it("are refused where a service must present the token, naming the setting", () => {
    expect(presentedToken("hfb_secret", "budget.token", "calls the budget service")).toBe("hfb_secret");
    expect(() =>
      presentedToken(tokenDigest("hfb_secret"), "budget.token", "calls the budget service"),
    ).toThrow(/budget\.token is a digest .*calls the budget service and needs the token itself/);
  });

  it("refuses a read-only token equal to the control token, given as a digest or not", () => {
    expect(
      bindingProblem({ host: "127.0.0.1", token: "same", read_token: tokenDigest("same"), insecure: false }),
    ).toMatch(/must differ/);
  });
});

describe("where the control API may listen", () => {
  it("starts on loopback without a token", () => {
    for (const host of ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"]) {
      expect(bindingProblem({ host, insecure: false }), host).toBeUndefined();
    }
  });

  it("refuses to start elsewhere without a token, saying why and what to do", () => {
    const problem = bindingProblem({ host: "0.0.0.0", insecure: false });
    expect(problem).toMatch(/would listen on 0\.0\.0\.0 without a token/);
    expect(problem).toMatch(/control\.token/);
    expect(problem).toMatch(/control\.insecure: true/);
  });

  it("starts elsewhere with a token, or when told it is insecure", () => {
    expect(bindingProblem({ host: "0.0.0.0", token: "t", insecure: false })).toBeUndefined();
    expect(bindingProblem({ host: "10.0.0.5", insecure: true })).toBeUndefined();
  });

  it("refuses a read-only token equal to the control token", () => {
    expect(bindingProblem({ host: "127.0.0.1", token: "same", read_token: "same", insecure: false })).toMatch(
      /must differ/,
    );
  });

  it("tells loopback from other interfaces", () => {
    expect(isLoopback("127.0.0.1")).toBe(true);
    expect(isLoopback("0.0.0.0")).toBe(false);
    expect(isLoopback("::")).toBe(false);
    expect(isLoopback("128.0.0.1")).toBe(false);
    expect(isLoopback("example.com")).toBe(false);
  });
});
