import { describe, expect, it } from "vitest";
import { CENSOR, createLogger, type LogLevel } from "./index.js";

const SECRET = "sk-live-7f3a9c-DO-NOT-LEAK";

/** A logger writing into memory, and the lines it wrote. */
const givenLogger = (level: LogLevel = "trace") => {
  const lines: string[] = [];
  const logger = createLogger({
    name: "gateway",
    level,
    destination: { write: (line) => void lines.push(line) },
  });
  const output = () => lines.join("");
  const records = () => lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  return { logger, output, records };
};

describe("createLogger", () => {
  it("writes one JSON object per line with the service bound", () => {
    const { logger, records } = givenLogger();

    logger.info({ runId: "run-1" }, "step started");

    expect(records()).toEqual([
      expect.objectContaining({ level: "info", service: "gateway", runId: "run-1", msg: "step started" }),
    ]);
  });

  it("drops lines below its level", () => {
    const { logger, output } = givenLogger("warn");

    logger.info("quiet");
    logger.warn("loud");

    expect(output()).not.toContain("quiet");
    expect(output()).toContain("loud");
  });

  describe("never writes a secret", () => {
    const shapes: [string, (logger: ReturnType<typeof givenLogger>["logger"]) => void][] = [
      [
        "req.headers.authorization",
        (l) => l.info({ req: { method: "POST", headers: { authorization: `Bearer ${SECRET}` } } }),
      ],
      [
        "res.headers set-cookie",
        (l) => l.info({ res: { statusCode: 200, headers: { "set-cookie": `sid=${SECRET}` } } }),
      ],
      ["headers.authorization", (l) => l.info({ headers: { authorization: `Bearer ${SECRET}` } })],
      ["headers['x-api-key']", (l) => l.info({ headers: { "x-api-key": SECRET } })],
      [
        "headers['proxy-authorization']",
        (l) => l.info({ headers: { "proxy-authorization": `Basic ${SECRET}` } }),
      ],
      ["headers.cookie", (l) => l.info({ headers: { cookie: `session=${SECRET}` } })],
      [
        "upstream.headers.Authorization",
        (l) => l.info({ upstream: { headers: { Authorization: `Bearer ${SECRET}` } } }),
      ],
      ["X-API-Key spelt in capitals", (l) => l.info({ request: { headers: { "X-API-Key": SECRET } } })],
      ["a top-level authorization", (l) => l.info({ authorization: `Bearer ${SECRET}` })],
      ["*.authorization", (l) => l.info({ call: { authorization: `Bearer ${SECRET}` } })],
      ["apiKey", (l) => l.info({ apiKey: SECRET })],
      ["api_key", (l) => l.info({ provider: { api_key: SECRET } })],
      ["password", (l) => l.info({ clickhouse: { password: SECRET } })],
      ["token", (l) => l.info({ token: SECRET })],
      [
        "deep inside a list",
        (l) => l.info({ attempts: [{ upstream: { request: { headers: { authorization: SECRET } } } }] }),
      ],
      [
        "a child logger's bindings",
        (l) => l.child({ headers: { authorization: `Bearer ${SECRET}` } }).info("bound"),
      ],
      [
        "an interpolated %o argument",
        (l) => l.info("calling upstream with %o", { headers: { "x-api-key": SECRET } }),
      ],
      ["an interpolated %j argument", (l) => l.info("calling upstream with %j", { apiKey: SECRET })],
      [
        "a raw Node request passed as the object",
        (l) =>
          l.info({ method: "POST", url: "/v1/responses", headers: { authorization: SECRET }, socket: {} }),
      ],
      [
        "a grandchild logger's nested bindings",
        (l) =>
          l
            .child({ runId: "r" })
            .child({ upstream: { headers: { Authorization: SECRET } } })
            .info("bound"),
      ],
      [
        "an interpolated argument, nested and capitalised",
        (l) => l.info("calling upstream with %o", { upstream: { headers: { "X-Api-Key": SECRET } } }),
      ],
      [
        "an error's enumerable fields",
        (l) =>
          l.error(
            Object.assign(new Error("upstream refused"), { headers: { authorization: `Bearer ${SECRET}` } }),
          ),
      ],
      [
        "an error nested in an object",
        (l) =>
          l.warn({
            attempt: 2,
            failure: Object.assign(new Error("429"), { response: { headers: { "set-cookie": SECRET } } }),
          }),
      ],
    ];

    it.each(shapes)("%s", (_shape, logIt) => {
      const { logger, output } = givenLogger();

      logIt(logger);

      expect(output()).not.toBe("");
      expect(output()).not.toContain(SECRET);
      expect(output()).toContain(CENSOR);
    });

    it("while keeping every other field", () => {
      const { logger, records } = givenLogger();

      logger.info(
        {
          runId: "run-7",
          req: {
            method: "POST",
            url: "/v1/chat/completions",
            headers: { authorization: SECRET, "x-holdfast-run": "run-7" },
          },
          usage: { input_tokens: 12, max_tokens: 100 },
        },
        "forwarded",
      );

      const [record] = records();
      expect(record).toMatchObject({
        runId: "run-7",
        msg: "forwarded",
        req: {
          method: "POST",
          url: "/v1/chat/completions",
          headers: { authorization: CENSOR, "x-holdfast-run": "run-7" },
        },
        usage: { input_tokens: 12, max_tokens: 100 },
      });
    });

    it("and does not alter the object the caller logged", () => {
      const { logger } = givenLogger();
      const headers = { authorization: `Bearer ${SECRET}` };

      logger.info({ headers });

      expect(headers.authorization).toBe(`Bearer ${SECRET}`);
    });
  });

  it("still logs an error's type, message and stack", () => {
    const { logger, records } = givenLogger();

    logger.error(new TypeError("bad body"));

    expect(records()).toEqual([
      expect.objectContaining({
        msg: "bad body",
        err: expect.objectContaining({
          type: "TypeError",
          message: "bad body",
          stack: expect.stringContaining("TypeError: bad body"),
        }),
      }),
    ]);
  });

  it("keeps an error's cause message but none of the cause's fields", () => {
    const { logger, output } = givenLogger();
    const cause = Object.assign(new Error("401 from upstream"), { apiKey: SECRET });

    logger.error({ err: new Error("step failed", { cause }) }, "step failed");

    expect(output()).toContain("401 from upstream");
    expect(output()).not.toContain(SECRET);
  });

  it("survives a circular object", () => {
    const { logger, output } = givenLogger();
    const loop: Record<string, unknown> = { token: SECRET };
    loop.self = loop;

    logger.info({ loop });

    expect(output()).toContain("[Circular]");
    expect(output()).not.toContain(SECRET);
  });
});
