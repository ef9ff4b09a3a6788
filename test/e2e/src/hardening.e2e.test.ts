import { request as httpRequest } from "node:http";
import { connect } from "node:net";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { callDirective } from "@holdfast/fake-provider";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "./stack.js";

// What a new user and an attacker found in the foundation: paths that dodged metering,
// keys echoed into what was recorded, Expect: 100-continue, header bytes, errors not in
// the provider's shape, compressed bodies, and provider errors inside a stream.

let stack: Stack;
let origin: string;
beforeAll(async () => {
  stack = await startStack({ config: { gateway: { max_body_bytes: 1_000_000 } } });
  origin = new URL(stack.gatewayUrl).origin;
});
afterAll(async () => {
  await stack?.close();
});

const CHAT = (content: string) =>
  JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content }] });

interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A request as written, path and all: node:http does not normalise the path it is given. */
function send(
  path: string,
  options: { headers?: Record<string, string>; body?: Buffer | string; method?: string } = {},
): Promise<RawAnswer> {
  const { port, hostname } = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: hostname,
        port,
        path,
        method: options.method ?? "POST",
        headers: {
          authorization: `Bearer ${API_KEY}`,
          "content-type": "application/json",
          ...options.headers,
        },
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Bytes on a socket, exactly as given: what no HTTP client library would send. */
function sendBytes(bytes: Buffer): Promise<{ status: number; body: string }> {
  const { port, hostname } = new URL(origin);
  return new Promise((resolve, reject) => {
    // Written, not ended: a half-closed socket reads as a client gone away. Connection: close ends it.
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    let text = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      text += chunk;
    });
    socket.on("error", reject);
    socket.on("close", () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const body = Buffer.from(text.slice(text.indexOf("\r\n\r\n") + 4), "latin1").toString("utf8");
      resolve({ status, body });
    });
  });
}

function rawRequest(headerLines: Buffer[], body: string): Buffer {
  const crlf = Buffer.from("\r\n");
  const lines = [
    Buffer.from("POST /v1/chat/completions HTTP/1.1"),
    Buffer.from(`Host: ${new URL(origin).host}`),
    Buffer.from(`Authorization: Bearer ${API_KEY}`),
    Buffer.from("Content-Type: application/json"),
    Buffer.from(`Content-Length: ${Buffer.byteLength(body)}`),
    Buffer.from("Connection: close"),
    ...headerLines,
  ];
  return Buffer.concat([...lines.flatMap((line) => [line, crlf]), crlf, Buffer.from(body)]);
}

function openAIError(text: string): { message: string; type: string; code: string | null } {
  const parsed = JSON.parse(text) as { error: { message: string; type: string; code: string | null } };
  expect(Object.keys(parsed)).toEqual(["error"]);
  expect(typeof parsed.error.message).toBe("string");
  return parsed.error;
}

const providerPaths = () => stack.provider.requests.map((r) => r.path);

describe("every spelling of a metered path is metered", () => {
  it.each([
    ["a trailing slash", "/v1/chat/completions/"],
    ["a doubled slash", "/v1/chat//completions"],
    ["an encoded letter", "/v1/chat/%63ompletions"],
  ])("meters %s", async (_case, path) => {
    const runId = `path-${path.replace(/[^a-z0-9]/gi, "")}`;
    const answer = await send(path, { headers: { "X-Holdfast-Run": runId }, body: CHAT("hi") });
    expect(answer.status).toBe(200);
    const run = await stack.settled(runId, 1);
    expect(run.steps[0]).toMatchObject({ status: "completed", api: "openai_chat_completions" });
    expect(providerPaths().at(-1)).toBe("/v1/chat/completions");
  });

  it("meters an SDK whose base URL ends in /v1//", async () => {
    const client = new OpenAI({
      apiKey: API_KEY,
      baseURL: `${stack.gatewayUrl}//`,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "path-sdk-slashes" },
    });
    await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "hi" }],
    });
    expect((await stack.settled("path-sdk-slashes", 1)).completed).toBe(1);
  });

  it.each([
    ["dot segments", "/v1/../../stats"],
    ["encoded dot segments", "/v1/%2e%2e/%2e%2e/stats"],
    ["an encoded slash", "/v1/chat%2Fcompletions"],
  ])("refuses %s in OpenAI's shape, forwarding nothing", async (_case, path) => {
    const before = stack.provider.requests.length;
    const answer = await send(path, { body: CHAT("hi") });
    expect(answer.status).toBe(400);
    expect(openAIError(answer.body).code).toBe("invalid_path");
    expect(stack.provider.requests.length).toBe(before);
  });
});

describe("the request's key is kept out of everything recorded", () => {
  const KEY = "sk-proj-ECHOkey7Qx9Zr2Lw4Mv8Nt6Kp3Wq9Z";

  it("when the provider echoes it in a successful answer, or names it by its last characters in a stream error", async () => {
    const client = stack.client({ apiKey: KEY, headers: { "X-Holdfast-Run": "echo-key" } });
    // The fake provider turns this into a call of the tool named after the key.
    const answer = await client.chat.completions.create({
      model: "gpt-4o-mini",
      tools: [{ type: "function", function: { name: KEY, parameters: { type: "object", properties: {} } } }],
      messages: [{ role: "user", content: callDirective(KEY) }],
    });
    expect(answer.choices[0]?.message.tool_calls?.[0]).toMatchObject({ function: { name: KEY } });
    const stream = await stack
      .client({ apiKey: KEY, headers: { "X-Holdfast-Run": "echo-key", "x-fake-fail": "error-after:2" } })
      .chat.completions.create({
        model: "gpt-4o-mini",
        stream: true,
        messages: [{ role: "user", content: "go" }],
      });
    await expect(
      (async () => {
        for await (const _ of stream) {
          // drain until the provider's error
        }
      })(),
    ).rejects.toThrow(/ending in Wq9Z/);

    const run = await stack.settled("echo-key", 2);
    expect(run.steps[0]?.toolCalls).toEqual(["[redacted]"]);
    expect(run.steps[1]?.failure?.message).toMatch(/key ending in \[redacted\]/);
    const recorded = JSON.stringify([
      run,
      ...(await waitForRows("SELECT * FROM events WHERE run_id = 'echo-key'", 4)),
      ...(await stack.sql("SELECT * FROM steps WHERE run_id = 'echo-key'")),
    ]);
    for (const form of [KEY, KEY.slice(8, 24), KEY.slice(-4)]) expect(recorded).not.toContain(form);
  });

  it("when it came in Azure's api-key header", async () => {
    const AZURE_KEY = "azkey0123456789ABCDEFGHIJKLMNOPQRSTUV";
    const client = stack.client({ headers: { "X-Holdfast-Run": "echo-azure-key", "api-key": AZURE_KEY } });
    await client.chat.completions.create({
      model: "gpt-4o-mini",
      tools: [
        { type: "function", function: { name: AZURE_KEY, parameters: { type: "object", properties: {} } } },
      ],
      messages: [{ role: "user", content: callDirective(AZURE_KEY) }],
    });
    // Forwarded to the provider, which needs it…
    expect(stack.provider.requests.at(-1)?.headers["api-key"]).toBe(AZURE_KEY);
    // …and nowhere in what Holdfast recorded.
    const run = await stack.settled("echo-azure-key", 1);
    expect(run.steps[0]?.toolCalls).toEqual(["[redacted]"]);
    const recorded = JSON.stringify([
      run,
      ...(await waitForRows("SELECT * FROM events WHERE run_id = 'echo-azure-key'", 2)),
      ...(await stack.sql("SELECT * FROM steps WHERE run_id = 'echo-azure-key'")),
    ]);
    expect(recorded).not.toContain(AZURE_KEY);
  });
});

describe("a provider error inside a stream", () => {
  it.each([
    ["and the stream ends", "stream-error", "error-after:3"],
    ["and the provider hangs up", "stream-error-reset", "error-after:3:reset"],
  ])(
    "is recorded with the provider's type, code and message, %s, and the client gets it as sent",
    async (_case, runId, fault) => {
      const client = stack.client({
        headers: { "X-Holdfast-Run": runId, "x-fake-fail": fault },
      });
      const stream = await client.chat.completions.create({
        model: "gpt-4o-mini",
        stream: true,
        messages: [{ role: "user", content: "long answer please" }],
      });
      const error = await (async () => {
        for await (const _ of stream) {
          // drain
        }
      })().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect((error as Error).message).toMatch(/error while generating/);
      const run = await stack.settled(runId, 1);
      expect(run.steps[0]).toMatchObject({
        status: "failed",
        upstreamStatus: 200,
        failure: {
          reason: "upstream_stream_error",
          errorType: "server_error",
          errorCode: "generation_failed",
        },
      });
      expect(run.steps[0]?.failure?.message).toMatch(/^The server had an error while generating/);
    },
  );
});

describe("Expect: 100-continue", () => {
  it("is answered by the gateway, not forwarded, and the call is metered", async () => {
    const { port, hostname } = new URL(origin);
    const body = CHAT("a large body, as curl sends with Expect");
    const answer = await new Promise<{ status: number; sawContinue: boolean }>((resolve, reject) => {
      let sawContinue = false;
      const req = httpRequest({
        host: hostname,
        port,
        path: "/v1/chat/completions",
        method: "POST",
        headers: {
          authorization: `Bearer ${API_KEY}`,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          expect: "100-continue",
          "X-Holdfast-Run": "expect-continue",
        },
      });
      req.on("continue", () => {
        sawContinue = true;
        req.end(body);
      });
      req.on("response", (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, sawContinue }));
      });
      req.on("error", reject);
    });
    expect(answer).toEqual({ status: 200, sawContinue: true });
    expect(stack.provider.requests.at(-1)?.headers.expect).toBeUndefined();
    expect((await stack.settled("expect-continue", 1)).completed).toBe(1);
  });
});

describe("header bytes", () => {
  it("reads a run id sent as raw UTF-8 bytes as the UTF-8 it is", async () => {
    const runId = "run-é日本🚀";
    const line = Buffer.concat([Buffer.from("X-Holdfast-Run: "), Buffer.from(runId, "utf8")]);
    const answer = await sendBytes(rawRequest([line], CHAT("unicode")));
    expect(answer.status).toBe(200);
    expect((await stack.settled(runId, 1)).runId).toBe(runId);
    const [row] = await waitForRows(`SELECT run_id FROM steps WHERE run_id = '${runId}'`, 1);
    expect(row).toEqual({ run_id: runId });
  });

  it("refuses a run id with a C1 control character, in OpenAI's shape", async () => {
    const line = Buffer.concat([Buffer.from("X-Holdfast-Run: "), Buffer.from("run-\u0085-x", "utf8")]);
    const answer = await sendBytes(rawRequest([line], CHAT("c1")));
    expect(answer.status).toBe(400);
    expect(openAIError(answer.body).message).toMatch(/control character/);
  });

  it("refuses two different X-Holdfast-Run headers, and takes one sent twice the same", async () => {
    const before = stack.provider.requests.length;
    const two = await sendBytes(
      rawRequest(
        [Buffer.from("X-Holdfast-Run: dup-one"), Buffer.from("X-Holdfast-Run: dup-two")],
        CHAT("dup"),
      ),
    );
    expect(two.status).toBe(400);
    expect(openAIError(two.body).message).toMatch(/X-Holdfast-Run was sent more than once/);
    expect(stack.provider.requests.length).toBe(before);
    const same = await sendBytes(
      rawRequest(
        [Buffer.from("X-Holdfast-Run: dup-same"), Buffer.from("X-Holdfast-Run: dup-same")],
        CHAT("dup"),
      ),
    );
    expect(same.status).toBe(200);
    expect((await stack.settled("dup-same", 1)).completed).toBe(1);
  });

  it("answers malformed header bytes in OpenAI's shape", async () => {
    const answer = await sendBytes(rawRequest([Buffer.from("X-Bad\u0001Name: x", "latin1")], CHAT("bad")));
    expect(answer.status).toBe(400);
    expect(openAIError(answer.body).code).toBe("invalid_http");
  });
});

describe("compressed request bodies", () => {
  it.each([
    ["gzip", gzipSync],
    ["deflate", deflateSync],
    ["br", brotliCompressSync],
  ] as const)("decodes a %s body, meters the call and forwards it decoded", async (encoding, encode) => {
    const run = `${encoding}-body`;
    const answer = await send("/v1/chat/completions", {
      headers: { "content-encoding": encoding, "X-Holdfast-Run": run },
      body: encode(CHAT(`compressed with ${encoding}`)),
    });
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body).choices[0].message.content).toBe(
      `Fake reply to: compressed with ${encoding}`,
    );
    expect(stack.provider.requests.at(-1)?.headers["content-encoding"]).toBeUndefined();
    expect((await stack.settled(run, 1)).completed).toBe(1);
  });

  it("refuses an encoding it cannot decode with a 415, a corrupt body with a 400 and a bomb with a 413", async () => {
    const before = stack.provider.requests.length;
    const zstd = await send("/v1/chat/completions", {
      headers: { "content-encoding": "zstd" },
      body: Buffer.from("\u0028\u00b5\u002f\u00fd"),
    });
    expect(zstd.status).toBe(415);
    expect(openAIError(zstd.body).message).toMatch(/'zstd'.*gzip, x-gzip, deflate, br/);
    const corrupt = await send("/v1/chat/completions", {
      headers: { "content-encoding": "gzip" },
      body: Buffer.from("not gzip at all"),
    });
    expect(corrupt.status).toBe(400);
    expect(openAIError(corrupt.body).message).toMatch(/gzip-encoded request body could not be decoded/);
    // 10 MB of JSON whitespace in about 10 KB: decoded, it is past gateway.max_body_bytes.
    const bomb = gzipSync(
      Buffer.concat([
        Buffer.from('{"model":"gpt-4o-mini","messages":[]'),
        Buffer.alloc(10_000_000, " "),
        Buffer.from("}"),
      ]),
    );
    const big = await send("/v1/chat/completions", { headers: { "content-encoding": "gzip" }, body: bomb });
    expect(big.status).toBe(413);
    expect(openAIError(big.body).code).toBe("request_too_large");
    expect(stack.provider.requests.length).toBe(before);
  });
});

async function waitForRows(query: string, count: number): Promise<Record<string, unknown>[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = await stack.sql(query);
    if (rows.length >= count || Date.now() > deadline) return rows;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
