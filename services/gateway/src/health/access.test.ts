import { describe, expect, it } from "vitest";
import { healthReaders } from "./access.js";

const loopback = { host: "127.0.0.1", insecure: false };

describe("who may read the gateway's health details", () => {
  it("with tokens: the read-only or the control token, and no one else", () => {
    const may = healthReaders({ ...loopback, token: "control-secret", read_token: "read-secret" });
    expect(may("Bearer read-secret")).toBe(true);
    expect(may("Bearer control-secret")).toBe(true);
    expect(may(undefined)).toBe(false);
    expect(may("Bearer sk-an-agents-provider-key")).toBe(false);
  });

  it("without a token: anyone on loopback or where control.insecure allows it, nobody elsewhere", () => {
    expect(healthReaders(loopback)(undefined)).toBe(true);
    expect(healthReaders({ host: "0.0.0.0", insecure: true })(undefined)).toBe(true);
    expect(healthReaders({ host: "0.0.0.0", insecure: false })(undefined)).toBe(false);
    expect(healthReaders({ host: "0.0.0.0", insecure: false })("Bearer anything")).toBe(false);
  });
});
