import { describe, expect, it } from "vitest";
import { parsePortsFile } from "./start.js";

describe("parsePortsFile", () => {
  it("reads the client port and the monitoring URL", () => {
    expect(
      parsePortsFile('{"nats":["nats://127.0.0.1:41679"],"monitoring":["http://127.0.0.1:42625"]}'),
    ).toEqual({ port: 41679, monitorUrl: "http://127.0.0.1:42625" });
  });

  it("dials loopback when the server listens on every interface", () => {
    expect(parsePortsFile('{"nats":["nats://10.0.0.5:4222"],"monitoring":["http://0.0.0.0:8222"]}')).toEqual({
      port: 4222,
      monitorUrl: "http://127.0.0.1:8222",
    });
  });

  it("treats a half-written file as not there yet", () => {
    expect(parsePortsFile('{"nats":["nats://127.0.0.1:4')).toBeUndefined();
    expect(parsePortsFile("{}")).toBeUndefined();
  });
});
