import { describe, expect, it } from "vitest";
import { withoutSecrets } from "./up.js";

describe("the environment holdfast up passes its services", () => {
  it("leaves out the shell's Holdfast secrets, and keeps every setting that only names tokens", () => {
    const kept = withoutSecrets({
      PATH: "/usr/bin",
      HOLDFAST_CONTROL__TOKEN: "hfc_x",
      HOLDFAST_CONTROL__READ_TOKEN: "hfr_x",
      HOLDFAST_BUDGET__TOKEN: "hfb_x",
      HOLDFAST_SCHEDULER__WORKER_TOKEN: "hfw_x",
      HOLDFAST_NATS__CREDENTIALS: "/x.nk",
      HOLDFAST_CLICKHOUSE__PASSWORD: "pw",
      HOLDFAST_CLICKHOUSE__READER_PASSWORD: "pw",
      HOLDFAST_LIMITS__MAX_TOKENS_PER_MINUTE: "50000",
      HOLDFAST_GATEWAY__PORT: "4141",
    });
    expect(kept).toEqual({
      PATH: "/usr/bin",
      HOLDFAST_LIMITS__MAX_TOKENS_PER_MINUTE: "50000",
      HOLDFAST_GATEWAY__PORT: "4141",
    });
  });
});
