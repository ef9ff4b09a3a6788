import type { IncomingHttpHeaders } from "node:http";
import type { Readable, Transform } from "node:stream";
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib";
import { AnswerTooLargeError } from "@holdfast/providers";

// Compression a provider may apply though the gateway asks for none (it sends no
// Accept-Encoding). Each decoder runs off the event loop, in libuv's pool.
const DECODERS: Readonly<Record<string, () => Transform>> = {
  gzip: createGunzip,
  "x-gzip": createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** A non-streamed answer as read: its bytes as they came, and its text. */
export interface ReadAnswer {
  /** The body as the provider sent it (compressed, if it was): what the client is sent. */
  readonly bytes: Buffer;
  /** The body as text, decompressed; "" when it could not be decompressed. */
  readonly text: string;
}

/**
 * Reads a provider's whole answer, within `maxBytes` as it came and as it decompresses: an
 * answer declared larger is not read at all, and one that grows past the bound is cut off
 * there (its connection closed), with AnswerTooLargeError. A gzip bomb costs the gateway
 * `maxBytes` at most, decompressed as it streams in, never on the event loop.
 */
export function readAnswer(
  body: Readable,
  headers: IncomingHttpHeaders,
  maxBytes: number,
): Promise<ReadAnswer> {
  const encoding = encodingOf(headers["content-encoding"]);
  const declared = Number(headers["content-length"]);
  if (declared > maxBytes) {
    body.destroy();
    return Promise.reject(new AnswerTooLargeError("answer", maxBytes));
  }
  const decoder = encoding === undefined ? undefined : DECODERS[encoding]?.();
  return new Promise<ReadAnswer>((resolve, reject) => {
    const received: Buffer[] = [];
    let receivedBytes = 0;
    const decoded: Buffer[] = [];
    let decodedBytes = 0;
    let undecodable = false;
    let settled = false;
    const fail = (error: unknown): void => {
      if (settled) return;
      settled = true;
      body.destroy();
      decoder?.destroy();
      reject(error);
    };
    const tooLarge = () =>
      fail(
        new AnswerTooLargeError(
          "answer",
          maxBytes,
          receivedBytes,
          decoder === undefined ? receivedBytes : decodedBytes,
        ),
      );
    const done = (): void => {
      if (settled) return;
      settled = true;
      const bytes = Buffer.concat(received, receivedBytes);
      let text: string;
      if (undecodable) text = "";
      else if (decoder === undefined) text = bytes.toString("utf8");
      else text = Buffer.concat(decoded, decodedBytes).toString("utf8");
      resolve({ bytes, text });
    };
    if (decoder !== undefined) {
      decoder.on("data", (chunk: Buffer) => {
        decodedBytes += chunk.length;
        if (decodedBytes > maxBytes) return tooLarge();
        decoded.push(chunk);
      });
      // Not what it says it is: the answer is read to its end all the same, and is as
      // unreadable as an answer that is not JSON.
      decoder.once("error", () => {
        undecodable = true;
        body.resume();
      });
    }
    body.on("data", (chunk: Buffer) => {
      receivedBytes += chunk.length;
      if (receivedBytes > maxBytes) return tooLarge();
      received.push(chunk);
      if (decoder === undefined || undecodable) return;
      if (!decoder.write(chunk)) {
        body.pause();
        decoder.once("drain", () => body.resume());
      }
    });
    body.once("error", fail);
    body.once("end", () => {
      if (decoder === undefined || undecodable) return done();
      decoder.once("end", done);
      decoder.once("error", done);
      decoder.end();
    });
  });
}

/**
 * A streamed answer's body as text bytes: decompressed as it streams when the provider
 * compressed it (`decoded`: then the client is sent it decompressed), as it came otherwise.
 * Destroying what is returned closes the provider's connection.
 */
export function decodedStream(
  body: Readable,
  contentEncoding: string | string[] | undefined,
): { stream: Readable; decoded: boolean } {
  const encoding = encodingOf(contentEncoding);
  const decoder = encoding === undefined ? undefined : DECODERS[encoding]?.();
  if (decoder === undefined) return { stream: body, decoded: false };
  body.once("error", (error) => decoder.destroy(error));
  decoder.once("close", () => body.destroy());
  body.pipe(decoder);
  return { stream: decoder, decoded: true };
}

/** The one encoding a body was sent with; undefined for none (or identity). */
function encodingOf(header: string | string[] | undefined): string | undefined {
  const encoding = String(header ?? "")
    .trim()
    .toLowerCase();
  return encoding === "" || encoding === "identity" ? undefined : encoding;
}
