/**
 * Whether a parsed JSON value nests objects and arrays more than `max` levels deep (a
 * top-level object is one level). V8's JSON.parse reads any depth, but JSON.stringify and
 * every recursive walk of ours overflow the stack a few thousand levels down: a body is
 * checked here, once, before anything walks it.
 *
 * The walk recurses at most `max` frames and stops at the first level too deep. It visits
 * each object and array once and only looks at the type of the rest, so on a model call
 * (a few hundred values, most of its bytes in strings) it costs a small fraction of the
 * parse it follows.
 */
export function jsonDepthExceeds(value: unknown, max: number): boolean {
  return typeof value === "object" && value !== null && deeper(value, max);
}

// Only objects and arrays are recursed into: a scalar (most of a body's values) costs a
// typeof, not a call.
function deeper(value: object, room: number): boolean {
  if (room === 0) return true;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      if (typeof item === "object" && item !== null && deeper(item, room - 1)) return true;
    }
    return false;
  }
  for (const key in value) {
    const item: unknown = (value as Record<string, unknown>)[key];
    if (typeof item === "object" && item !== null && deeper(item, room - 1)) return true;
  }
  return false;
}
