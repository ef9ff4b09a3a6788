import { randomFillSync } from "node:crypto";

/** Two hex digits of each byte value. */
const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, "0"));

/**
 * Returns a UUIDv7 generator (RFC 9562). Ids sort by creation time; within one
 * millisecond a 12-bit counter in `rand_a` keeps them strictly increasing per generator,
 * so events appended by one process sort in the order they were made.
 */
export function createIdGenerator(clock: () => number = Date.now): () => string {
  let lastMs = -1;
  let counter = 0;
  // One getrandom call per 409 ids instead of one per id: ids are made on the hot path.
  const pool = new Uint8Array(4096);
  let offset = pool.length;
  return () => {
    let ms = clock();
    if (ms <= lastMs) {
      counter += 1;
      if (counter > 0xfff) {
        // Counter exhausted: borrow the next millisecond rather than lose ordering.
        lastMs += 1;
        counter = 0;
      }
      ms = lastMs;
    } else {
      lastMs = ms;
      counter = 0;
    }
    if (offset + 10 > pool.length) {
      randomFillSync(pool);
      offset = 0;
    }
    const at = offset;
    offset += 10;
    const hex = ms.toString(16).padStart(12, "0");
    const randA = (0x7000 | counter).toString(16);
    const variant = HEX[(pool[at]! & 0x3f) | 0x80]!;
    return (
      `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${randA}-${variant}${HEX[pool[at + 1]!]}-` +
      `${HEX[pool[at + 2]!]}${HEX[pool[at + 3]!]}${HEX[pool[at + 4]!]}${HEX[pool[at + 5]!]}${HEX[pool[at + 6]!]}${HEX[pool[at + 7]!]}`
    );
  };
}

/** Milliseconds since the epoch encoded in a UUIDv7. */
export function timestampOfId(id: string): number {
  return Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
}
