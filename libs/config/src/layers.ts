/** Where a value came from: enough to name it in an error and to resolve a relative path. */
export interface Origin {
  /** The file path as given, the env var name, or "flag". */
  readonly source: string;
  /** Directory a relative path written in this source is resolved against. */
  readonly baseDir: string;
  readonly lineOf?: (path: readonly PropertyKey[]) => number | undefined;
}

export type Mapping = Record<string, unknown>;

export const isMapping = (value: unknown): value is Mapping => {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
};

// defineProperty rather than assignment: a YAML key "__proto__" must stay an ordinary
// (and therefore unknown, and reported) key instead of replacing the prototype.
export const put = (target: Mapping, key: string, value: unknown): void => {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
};

const idOf = (path: readonly PropertyKey[]): string => JSON.stringify(path.map(String));

/**
 * The raw configuration merged layer over layer (defaults < file < env < flags), remembering
 * which layer last wrote each key so a schema error can name its source.
 */
export class LayeredTree {
  readonly root: Mapping = {};
  readonly #origins = new Map<string, Origin>();

  /** Mappings merge key by key; anything else (scalars, lists) replaces what was there. */
  apply(layer: Mapping, origin: Origin): void {
    this.#merge(this.root, layer, [], origin);
  }

  /** The origin of `path`, or of its nearest ancestor that some layer wrote. */
  originOf(path: readonly PropertyKey[]): Origin | undefined {
    for (let length = path.length; length > 0; length--) {
      const origin = this.#origins.get(idOf(path.slice(0, length)));
      if (origin !== undefined) return origin;
    }
    return undefined;
  }

  valueAt(path: readonly PropertyKey[]): unknown {
    let node: unknown = this.root;
    for (const segment of path) {
      if (node === null || typeof node !== "object") return undefined;
      const key = String(segment);
      if (!Object.hasOwn(node, key)) return undefined;
      node = (node as Mapping)[key];
    }
    return node;
  }

  #merge(target: Mapping, layer: Mapping, path: readonly string[], origin: Origin): void {
    for (const [key, value] of Object.entries(layer)) {
      // An unset flag arrives as `undefined`; it must not hide the env or file value.
      if (value === undefined) continue;
      const here = [...path, key];
      this.#origins.set(idOf(here), origin);
      if (isMapping(value)) {
        const existing = Object.hasOwn(target, key) ? target[key] : undefined;
        const child = isMapping(existing) ? existing : {};
        put(target, key, child);
        this.#merge(child, value, here, origin);
      } else {
        put(target, key, Array.isArray(value) ? [...value] : value);
      }
    }
  }
}
