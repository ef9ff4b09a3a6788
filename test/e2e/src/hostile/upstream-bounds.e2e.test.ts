import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { APIError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// A provider's answer is read within gateway.max_answer_bytes (all of it, decompressed) and
// each event of its stream within gateway.max_event_bytes. Past either the answer is cut
// off: the agent gets an error in its API's shape (mid-stream, the stream's error event),
// the step is recorded failed (upstream_too_large) and charged from Holdfast's estimate, and
// the run goes on. Before, a stream line that never ended was buffered until the process
// ran out of memory, and a non-streamed answer was read whole, however large.

const MAX_ANSWER = 4 * 1024 * 1024;
const MAX_EVENT = 256 * 1024;

const chunk = (content: string, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({
    id: "chatcmpl-b",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-4o-mini",
    choices: [{ index: 0, delta: { content }, finish_reason: null }],
    ...extra,
  })}\n\n`;
const lastChunks = [
  chunk("", { choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
  chunk("", { choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }),
  "data: [DONE]\n\n",
].join("");
const answer = (content: string) =>
  JSON.stringify({
    id: "chatcmpl-b",
    object: "chat.completion",
    created: 1,
    model: "gpt-4o-mini",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
  });

/** Writes `text` in 64 KiB pieces, waiting whenever the socket is full; stops if it closes. */
async function writeSlowly(response: ServerResponse, text: string): Promise<void> {
  for (let at = 0; at < text.length && !response.destroyed; at += 64 * 1024) {
    if (!response.write(text.slice(at, at + 64 * 1024))) {
      await new Promise<void>((resolve) => {
        const go = () => {
          response.off("drain", go);
          response.off("close", go);
          resolve();
        };
        response.on("drain", go);
        response.on("close", go);
      });
    }
  }
}

let upstream: Server;
let stack: Stack;
beforeAll(async () => {
  // The provider, by the model asked for.
  upstream = createServer(async (request, response) => {
    let body = "";
    for await (const piece of request) body += piece;
    if (request.url === "/v1/files/big/content") {
      // A path passed through unmetered: an answer twice gateway.max_answer_bytes, compressed.
      response.writeHead(200, { "content-type": "application/octet-stream", "content-encoding": "gzip" });
      response.end(gzipSync(Buffer.alloc(2 * MAX_ANSWER, 0x61)));
      return;
    }
    const { model } = JSON.parse(body) as { model: string };
    const sse = { "content-type": "text/event-stream" };
    switch (model) {
      case "endless-line": {
        // One event, then a line 8 MiB long, and the stream ends without [DONE].
        response.writeHead(200, sse);
        response.write(chunk("Hello"));
        response.write("data: ");
        await writeSlowly(response, "x".repeat(8 * 1024 * 1024));
        response.end();
        return;
      }
      case "declared-too-large": {
        const big = answer("y".repeat(MAX_ANSWER + 1));
        response.writeHead(200, { "content-type": "application/json", "content-length": big.length });
        response.end(big);
        return;
      }
      case "chunked-too-large": {
        response.writeHead(200, { "content-type": "application/json" });
        await writeSlowly(response, answer("y".repeat(2 * MAX_ANSWER)));
        response.end();
        return;
      }
      case "gzip-stream": {
        // A stream the provider compressed though nobody asked it to.
        response.writeHead(200, { ...sse, "content-encoding": "gzip" });
        response.end(gzipSync(chunk("Hel") + chunk("lo") + lastChunks));
        return;
      }
      case "gzip-long-stream": {
        // 8 MiB of small events, 30 KiB or so on the wire.
        const events = chunk("z".repeat(1_000)).repeat(Math.ceil((8 * 1024 * 1024) / 1_100));
        response.writeHead(200, { ...sse, "content-encoding": "gzip" });
        response.end(gzipSync(events + lastChunks));
        return;
      }
      default:
        response.writeHead(200, { "content-type": "application/json" });
        response.end(answer("ok"));
    }
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const { port } = upstream.address() as AddressInfo;
  stack = await startStack({
    config: {
      gateway: {
        upstream: `http://127.0.0.1:${port}/v1`,
        max_answer_bytes: MAX_ANSWER,
        max_event_bytes: MAX_EVENT,
      },
      // Priced, so that what a cut-off call is charged shows as a cost.
      prices: {
        "declared-too-large": { input_per_mtok: 1, output_per_mtok: 1 },
        "chunked-too-large": { input_per_mtok: 1, output_per_mtok: 1 },
      },
    },
  });
});
afterAll(async () => {
  await stack?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

/** Streams a call to its end; what the client read, and the error the stream ended with. */
async function streamed(runId: string, model: string): Promise<{ text: string; error: unknown }> {
  const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
  let text = "";
  try {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    });
    for await (const part of stream) text += part.choices[0]?.delta.content ?? "";
    return { text, error: undefined };
  } catch (error) {
    return { text, error };
  }
}

/** The run's next call is answered: nothing of the cut answer is left in its way. */
async function goesOn(runId: string): Promise<void> {
  const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
  const next = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "and then?" }],
  });
  expect(next.choices[0]?.message.content).toBe("ok");
  expect((await stack.settled(runId, 2)).steps[1]?.status).toBe("completed");
}

describe("a streamed answer past the gateway's bounds", () => {
  it("an event past gateway.max_event_bytes ends the stream with its error event, recorded failed and charged", async () => {
    const { text, error } = await streamed("bounds-endless-line", "endless-line");
    expect(text).toBe("Hello");
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).message).toMatch(/larger than 262144 bytes \(gateway\.max_event_bytes\)/);
    const [step] = (await stack.settled("bounds-endless-line", 1)).steps;
    expect(step).toMatchObject({
      status: "failed",
      failure: { reason: "upstream_too_large", errorCode: "max_event_bytes" },
      estimated: true,
      usageEstimate: "partial",
    });
    expect(step?.costNanoUsd).toBeGreaterThan(0);
    await goesOn("bounds-endless-line");
  });

  it("a compressed stream is relayed decompressed and metered", async () => {
    const { text, error } = await streamed("bounds-gzip-stream", "gzip-stream");
    expect(error).toBeUndefined();
    expect(text).toBe("Hello");
    const [step] = (await stack.settled("bounds-gzip-stream", 1)).steps;
    expect(step).toMatchObject({ status: "completed", inputTokens: 5, outputTokens: 2, estimated: false });
  });

  it("a compressed stream past gateway.max_answer_bytes, decompressed, is cut off there", async () => {
    const { text, error } = await streamed("bounds-gzip-long", "gzip-long-stream");
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).message).toMatch(/\(gateway\.max_answer_bytes, decompressed\)/);
    // What came before the bound was relayed; nothing past it.
    expect(text.length).toBeGreaterThan(0);
    expect(text.length).toBeLessThan(MAX_ANSWER);
    const [step] = (await stack.settled("bounds-gzip-long", 1)).steps;
    expect(step).toMatchObject({
      status: "failed",
      failure: { reason: "upstream_too_large", errorCode: "max_answer_bytes" },
      usageEstimate: "partial",
    });
    await goesOn("bounds-gzip-long");
  });
});

describe("a non-streamed answer past gateway.max_answer_bytes", () => {
  it.each(["declared-too-large", "chunked-too-large"])(
    "%s: the agent gets a 502 in its API's shape, not retried, and the step is recorded failed and charged",
    async (model) => {
      const runId = `bounds-${model}`;
      const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
      const error = await client.chat.completions
        .create({ model, messages: [{ role: "user", content: "hi" }] })
        .then(
          () => undefined,
          (caught: unknown) => caught,
        );
      expect(error).toBeInstanceOf(APIError);
      expect(error).toMatchObject({ status: 502, code: "upstream_answer_too_large", type: "server_error" });
      expect((error as APIError).message).toMatch(/larger than 4194304 bytes \(gateway\.max_answer_bytes/);
      expect((error as APIError).headers?.get("x-should-retry")).toBe("false");
      const [step] = (await stack.settled(runId, 1)).steps;
      expect(step).toMatchObject({
        status: "failed",
        upstreamStatus: 200,
        failure: { reason: "upstream_too_large", errorCode: "max_answer_bytes" },
        estimated: true,
        usageEstimate: "missing",
      });
      expect(step?.costNanoUsd).toBeGreaterThan(0);
      await goesOn(runId);
    },
  );
});

describe("an answer on a path passed through unmetered", () => {
  it("is relayed whole as it came, compressed, whatever its size: never held, so never cut", async () => {
    const response = await fetch(`${stack.gatewayUrl}/files/big/content`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-encoding")).toBe("gzip");
    // fetch decompresses it: all of it arrived.
    expect((await response.arrayBuffer()).byteLength).toBe(2 * MAX_ANSWER);
  });
});

describe("a client's model name longer than Holdfast records", () => {
  it("is a 400 naming the field and the bound, and nothing is forwarded or recorded", async () => {
    const runId = "bounds-long-model";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const error = await client.chat.completions
      .create({ model: "m".repeat(1_100_000), messages: [{ role: "user", content: "hi" }] })
      .then(
        () => undefined,
        (caught: unknown) => caught,
      );
    expect(error).toMatchObject({ status: 400, code: "field_too_long", param: "model" });
    expect((error as APIError).message).toMatch(
      /model is 1100000 characters long; Holdfast accepts at most 256/,
    );
    expect((await stack.run(runId)).steps).toEqual([]);
  });
});
