import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { describe, expect, it } from "vitest";
import { InsecureBindError } from "./errors.js";
import { startProjector } from "./service.js";

// The analytics API answers operator SQL over everything recorded: off loopback it needs
// a control token, as the control API does. Refused before anything is opened.
const log = createLogger({ name: "projector-test", level: "silent" });
const configWith = (overrides: DeepPartial<Config>) =>
  loadConfig({ env: {}, overrides: { data_dir: "/nonexistent-holdfast-test", ...overrides } });

describe("the projector's analytics API off loopback", () => {
  it("refuses to start without a token, saying what to set", async () => {
    const error = await startProjector(configWith({ projector: { host: "0.0.0.0" } }), log).catch((e) => e);
    expect(error).toBeInstanceOf(InsecureBindError);
    expect(error.message).toMatch(
      /^The projector will not start: the analytics API would listen on 0\.0\.0\.0 without a token/,
    );
    expect(error.message).toMatch(/keep projector\.host on loopback.*control\.insecure: true/);
  });

  it.each([
    ["a read-only token", { read_token: "read-secret" }],
    ["control.insecure", { insecure: true }],
  ])("goes on with %s (to the next thing it needs: NATS)", async (_case, control) => {
    const error = await startProjector(configWith({ projector: { host: "0.0.0.0" }, control }), log).catch(
      (e) => e,
    );
    expect(error).not.toBeInstanceOf(InsecureBindError);
    expect(error.message).toMatch(/nats\.url is not set/);
  });
});
