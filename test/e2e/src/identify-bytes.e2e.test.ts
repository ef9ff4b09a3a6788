import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "./stack.js";

// Run ids and tags as bytes and code units: what reaches the gateway must be one string
// that becomes one subject token and one stored id, or a 400 that says why, in the
// provider's own error shape, with nothing forwarded.

let stack: Stack;
let origin: URL;
beforeAll(async () => {
  stack = await startStack();
  origin = new URL(stack.gatewayUrl);
});
afterAll(async () => {
  await stack?.close();
});

/** A request written byte for byte: header values no HTTP client library would send. */
function sendBytes(
  path: string,
  headerLines: Buffer[],
  body: string,
): Promise<{ status: number; body: string }> {
  const crlf = Buffer.from("\r\n");
  const lines = [
    Buffer.from(`POST ${path} HTTP/1.1`),
    Buffer.from(`Host: ${origin.host}`),
    Buffer.from(`Authorization: Bearer ${API_KEY}`),
    Buffer.from(`x-api-key: ${API_KEY}`),
    Buffer.from("anthropic-version: 2023-06-01"),
    Buffer.from("Content-Type: application/json"),
    Buffer.from(`Content-Length: ${Buffer.byteLength(body)}`),
    Buffer.from("Connection: close"),
    ...headerLines,
  ];
  const bytes = Buffer.concat([...lines.flatMap((line) => [line, crlf]), crlf, Buffer.from(body)]);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(origin.port), origin.hostname, () => socket.write(bytes));
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      resolve({ status, body: text.slice(text.indexOf("\r\n\r\n") + 4) });
    });
  });
}

const header = (name: string, value: Buffer) => Buffer.concat([Buffer.from(`${name}: `), value]);

// Written as JSON text, so `\ud800` reaches the gateway as the escape, as a client would send it.
const chat = (metadata = "") =>
  `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"bytes"}]${metadata ? `,"metadata":${metadata}` : ""}}`;
const messages = (metadata = "") =>
  `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"bytes"}]${metadata ? `,"metadata":${metadata}` : ""}}`;

function openAIError(text: string): { message: string; type: string } {
  return (JSON.parse(text) as { error: { message: string; type: string } }).error;
}

function anthropicError(text: string): { message: string; type: string } {
  const body = JSON.parse(text) as { type: string; error: { message: string; type: string } };
  expect(body.type).toBe("error");
  return body.error;
}

describe("run ids that are not well-formed Unicode", () => {
  it("refuses ids with an unpaired surrogate, which UTF-8 would merge into one run, in OpenAI's shape", async () => {
    const before = stack.provider.requests.length;
    for (const id of ["run-\\ud800", "run-\\udbff"]) {
      const answer = await sendBytes("/v1/chat/completions", [], chat(`{"run_id":"${id}"}`));
      expect(answer.status).toBe(400);
      expect(openAIError(answer.body)).toMatchObject({
        type: "invalid_request_error",
        message: expect.stringMatching(/run id in body field metadata\.run_id .*unpaired UTF-16 surrogate/),
      });
    }
    expect(stack.provider.requests.length).toBe(before);
  });

  it("refuses a tag with an unpaired surrogate", async () => {
    const answer = await sendBytes("/v1/chat/completions", [], chat(`{"tag":"team-\\udc00"}`));
    expect(answer.status).toBe(400);
    expect(openAIError(answer.body).message).toMatch(/tag in body field metadata\.tag .*unpaired/);
  });

  it("refuses them in Anthropic's shape on the Messages API", async () => {
    const answer = await sendBytes("/v1/messages", [], messages(`{"user_id":"run-\\ud800"}`));
    expect(answer.status).toBe(400);
    expect(anthropicError(answer.body)).toMatchObject({
      type: "invalid_request_error",
      message: expect.stringMatching(/run id in body field metadata\.user_id .*unpaired/),
    });
  });

  it("counts the 256-character limit in characters, an emoji once", async () => {
    const longest = "🚀".repeat(256);
    const fits = await sendBytes(
      "/v1/chat/completions",
      [header("X-Holdfast-Run", Buffer.from(longest))],
      chat(),
    );
    expect(fits.status).toBe(200);
    expect((await stack.settled(longest, 1)).runId).toBe(longest);
    const over = await sendBytes(
      "/v1/chat/completions",
      [header("X-Holdfast-Run", Buffer.from(`${longest}x`))],
      chat(),
    );
    expect(over.status).toBe(400);
    expect(openAIError(over.body).message).toMatch(/X-Holdfast-Run is 257 characters long; the limit is 256/);
  });
});

describe("header values that are not UTF-8", () => {
  it("refuses a value that is UTF-8 and then not, naming the header, in OpenAI's shape", async () => {
    const before = stack.provider.requests.length;
    // "hdr-é" in UTF-8, then 0xFF: read as Latin-1 it would be recorded as "hdr-Ã©ÿ".
    const value = Buffer.concat([Buffer.from("hdr-é", "utf8"), Buffer.from([0xff])]);
    const answer = await sendBytes("/v1/chat/completions", [header("X-Holdfast-Run", value)], chat());
    expect(answer.status).toBe(400);
    expect(openAIError(answer.body)).toMatchObject({
      type: "invalid_request_error",
      message: expect.stringContaining("The header X-Holdfast-Run is not valid UTF-8"),
    });
    expect(stack.provider.requests.length).toBe(before);
  });

  it("refuses it in Anthropic's shape on the Messages API", async () => {
    const value = Buffer.concat([Buffer.from("tag-日", "utf8"), Buffer.from([0xe9])]);
    const answer = await sendBytes("/v1/messages", [header("X-Holdfast-Tag", value)], messages());
    expect(answer.status).toBe(400);
    expect(anthropicError(answer.body).message).toContain("The header X-Holdfast-Tag is not valid UTF-8");
  });

  it("reads a value with no UTF-8 in it as Latin-1, as Python's http.client sends it", async () => {
    const answer = await sendBytes(
      "/v1/chat/completions",
      [header("X-Holdfast-Run", Buffer.from("run-café", "latin1"))],
      chat(),
    );
    expect(answer.status).toBe(200);
    expect((await stack.settled("run-café", 1)).runId).toBe("run-café");
  });
});
