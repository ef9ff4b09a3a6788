import { Readable } from "node:stream";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { AnswerTooLargeError } from "@holdfast/providers";
import { describe, expect, it } from "vitest";
import { decodedStream, readAnswer } from "./answer.js";

// A provider's answer is read within a bound, as it came and as it decompresses.

const TEXT = JSON.stringify({ id: "chatcmpl-1", choices: [{ message: { content: "hello" } }] });

/** A body arriving in pieces of `size` bytes. */
function body(bytes: Buffer, size = 1_024): Readable {
  const pieces: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) pieces.push(bytes.subarray(at, at + size));
  return Readable.from(pieces, { objectMode: false });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (error: unknown) => error,
  );
}

describe("readAnswer", () => {
  it("gives an answer within the bound as it came, and as text", async () => {
    const bytes = Buffer.from(TEXT);
    const read = await readAnswer(body(bytes, 7), {}, bytes.length);
    expect(read.bytes.equals(bytes)).toBe(true);
    expect(read.text).toBe(TEXT);
  });

  it.each([
    ["gzip", gzipSync],
    ["x-gzip", gzipSync],
    ["deflate", deflateSync],
    ["br", brotliCompressSync],
    [" GZIP ", gzipSync],
  ] as const)(
    "decompresses an answer sent %s: its text decompressed, its bytes as sent",
    async (encoding, compress) => {
      const bytes = compress(Buffer.from(TEXT));
      const read = await readAnswer(body(bytes, 5), { "content-encoding": encoding }, 4_096);
      expect(read.text).toBe(TEXT);
      expect(read.bytes.equals(bytes)).toBe(true);
    },
  );

  it("refuses an answer declared larger than the bound without reading it", async () => {
    const answer = body(Buffer.from(TEXT));
    const error = await rejection(readAnswer(answer, { "content-length": "2000" }, 1_999));
    expect(error).toBeInstanceOf(AnswerTooLargeError);
    expect(error).toMatchObject({ what: "answer", limitBytes: 1_999, receivedBytes: 0 });
    expect(answer.destroyed).toBe(true);
  });

  it("cuts off an answer that grows past the bound, and closes it", async () => {
    const answer = body(Buffer.alloc(64 * 1_024, 0x20));
    const error = await rejection(readAnswer(answer, {}, 10_000));
    expect(error).toMatchObject({ what: "answer", limitBytes: 10_000 });
    expect((error as AnswerTooLargeError).receivedBytes).toBe(10_240);
    expect(answer.destroyed).toBe(true);
  });

  it("takes an answer of exactly the bound", async () => {
    const bytes = Buffer.alloc(10_000, 0x20);
    expect((await readAnswer(body(bytes), { "content-length": "10000" }, 10_000)).bytes.length).toBe(10_000);
  });

  it("cuts off a gzip bomb where it decompresses past the bound, having read little of it", async () => {
    // 32 MiB of spaces is about 32 KiB of gzip.
    const bomb = gzipSync(Buffer.alloc(32 * 1_024 * 1_024, 0x20), { level: 9 });
    expect(bomb.length).toBeLessThan(64 * 1_024);
    const answer = body(bomb, 1_024);
    const error = await rejection(readAnswer(answer, { "content-encoding": "gzip" }, 1_024 * 1_024));
    expect(error).toBeInstanceOf(AnswerTooLargeError);
    expect((error as AnswerTooLargeError).receivedBytes).toBeLessThan(bomb.length);
    // What the cut-off output is charged from: the text it gave, not its compressed bytes.
    expect((error as AnswerTooLargeError).textBytes).toBeGreaterThan(1_024 * 1_024);
    expect(answer.destroyed).toBe(true);
  });

  it("reads an answer that is not what its encoding says to its end, as no text", async () => {
    const bytes = Buffer.from("not gzip at all, though it says so");
    const read = await readAnswer(body(bytes, 4), { "content-encoding": "gzip" }, 4_096);
    expect(read.text).toBe("");
    expect(read.bytes.equals(bytes)).toBe(true);
  });

  it("passes an encoding it does not know through as text", async () => {
    const read = await readAnswer(body(Buffer.from(TEXT)), { "content-encoding": "zstd-ish" }, 4_096);
    expect(read.text).toBe(TEXT);
  });

  it("rejects when the provider's connection breaks", async () => {
    const answer = new Readable({ read() {} });
    const read = readAnswer(answer, {}, 4_096);
    answer.push(Buffer.from("{"));
    answer.destroy(new Error("socket hang up"));
    expect(await rejection(read)).toMatchObject({ message: "socket hang up" });
  });
});

describe("decodedStream", () => {
  async function text(stream: Readable): Promise<string> {
    const parts: Buffer[] = [];
    for await (const part of stream) parts.push(part as Buffer);
    return Buffer.concat(parts).toString("utf8");
  }

  it("gives a stream sent as it is unchanged", () => {
    const answer = body(Buffer.from(TEXT));
    expect(decodedStream(answer, undefined)).toEqual({ stream: answer, decoded: false });
    expect(decodedStream(answer, "identity")).toEqual({ stream: answer, decoded: false });
  });

  it("decompresses a compressed stream as it streams in", async () => {
    const { stream, decoded } = decodedStream(body(gzipSync(Buffer.from(TEXT)), 3), "gzip");
    expect(decoded).toBe(true);
    expect(await text(stream)).toBe(TEXT);
  });

  it("closes the provider's connection when what it returned is destroyed", async () => {
    const answer = new Readable({ read() {} });
    const { stream } = decodedStream(answer, "br");
    stream.destroy();
    await new Promise((resolve) => setImmediate(resolve));
    expect(answer.destroyed).toBe(true);
  });
});
