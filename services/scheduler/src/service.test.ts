import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { describe, expect, it } from "vitest";
import { startScheduler } from "./service.js";

// The runs API (gRPC and REST) submits, stops and serves durable runs: off loopback it needs
// a control token, as the control API does. Refused before anything is opened.
const log = createLogger({ name: "scheduler-test", level: "silent" });
const configWith = (overrides: DeepPartial<Config>) =>
  loadConfig({ env: {}, overrides: { data_dir: "/nonexistent-holdfast-test", ...overrides } });

describe("the scheduler's runs API off loopback", () => {
  it.each(["0.0.0.0", "::", "10.1.2.3"])(
    "refuses to start on %s without a token, saying what to set",
    async (host) => {
      const error = await startScheduler(configWith({ scheduler: { host } }), log).catch((e) => e);
      expect(error).toBeInstanceOf(Error);
      expect(error.message).toMatch(
        /^The scheduler will not start: the runs API would listen on .* without a token, so anyone who can reach it could submit, stop and read durable runs/,
      );
      expect(error.message).toMatch(/keep scheduler\.host on loopback.*control\.insecure: true/);
    },
  );

  it.each([
    ["a control token", { token: "control-secret" }],
    ["control.insecure", { insecure: true }],
  ])("goes on with %s (to the next thing it needs: NATS)", async (_case, control) => {
    const error = await startScheduler(configWith({ scheduler: { host: "0.0.0.0" }, control }), log).catch(
      (e) => e,
    );
    expect(error.message).toMatch(/nats\.url is not set/);
  });

  it("goes on without a token on loopback", async () => {
    const error = await startScheduler(configWith({ scheduler: { host: "127.0.0.1" } }), log).catch((e) => e);
    expect(error.message).toMatch(/nats\.url is not set/);
  });

  it.each([
    ["control.token", { token: "same-secret" }],
    ["control.read_token", { read_token: "same-secret" }],
  ])("refuses a worker token that is %s, before it connects", async (_key, control) => {
    const error = await startScheduler(
      configWith({ scheduler: { worker_token: "same-secret" }, control }),
      log,
    ).catch((e) => e);
    expect(error.message).toMatch(
      /scheduler\.worker_token is the same as control\.token or control\.read_token/,
    );
  });
});
