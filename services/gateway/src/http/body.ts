import type { Readable, Transform } from "node:stream";
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib";

const DECODERS: Record<string, () => Transform> = {
  gzip: createGunzip,
  "x-gzip": createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

export const DECODABLE_ENCODINGS = Object.keys(DECODERS);

/** A request body's `Content-Encoding` the gateway cannot decode. */
export class UnsupportedContentEncodingError extends Error {
  override readonly name = "UnsupportedContentEncodingError";
  constructor(readonly encoding: string) {
    super(
      `The request body is encoded with '${encoding}'; Holdfast decodes ${DECODABLE_ENCODINGS.join(", ")} or an unencoded body.`,
    );
  }
}

/**
 * The request body as the client meant it: decompressed when it came with a
 * `Content-Encoding` (gzip, deflate, br), so the gateway reads and meters it like any
 * other. The body limit applies to the decompressed bytes (fastify counts what this
 * stream yields), so a small bomb does not become a large body; the compressed bytes are
 * reported as `receivedEncodedLength` for fastify's Content-Length check.
 */
export function decodedBody(payload: Readable, contentEncoding: string | string[] | undefined): Readable {
  const encoding = String(contentEncoding ?? "")
    .trim()
    .toLowerCase();
  if (encoding === "" || encoding === "identity") return payload;
  const decoder = DECODERS[encoding];
  if (decoder === undefined) throw new UnsupportedContentEncodingError(encoding);
  const decoded = decoder() as Transform & { receivedEncodedLength: number };
  decoded.receivedEncodedLength = 0;
  payload.on("data", (chunk: Buffer) => {
    decoded.receivedEncodedLength += chunk.length;
  });
  payload.on("error", (error) => decoded.destroy(error));
  // Registered before fastify's own listener, so the error it answers with says what failed.
  decoded.on("error", (error: Error & { code?: string }) => {
    payload.unpipe(decoded);
    error.message = `The ${encoding}-encoded request body could not be decoded: ${error.message}`;
    error.code = "request_body_undecodable";
  });
  payload.pipe(decoded);
  return decoded;
}
