import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { isNode, LineCounter, parseDocument, parse as parseYaml } from "yaml";
import { ConfigError, type ConfigIssue } from "./errors.js";
import { schemaAt } from "./introspect.js";
import { isMapping, type Mapping, type Origin, put } from "./layers.js";

const ENV_PREFIX = "HOLDFAST_";

/** HOLDFAST_ variables that are read elsewhere, not config keys. */
const NOT_CONFIG_KEYS = new Set(["HOLDFAST_CONFIG", "HOLDFAST_NATS_SERVER", "HOLDFAST_LOG_PRETTY"]);
const isConfigVar = (name: string): boolean =>
  name.startsWith(ENV_PREFIX) && !NOT_CONFIG_KEYS.has(name) && !name.startsWith("HOLDFAST_TEST_");

/** "gateway.port" → "HOLDFAST_GATEWAY__PORT". */
export const envVarName = (key: string): string => ENV_PREFIX + key.split(".").join("__").toUpperCase();

/** `~` and `~/…` mean the home directory; anything else relative is taken from `baseDir`. */
export const resolvePath = (path: string, baseDir: string, homeDir: string): string => {
  if (path === "~") return homeDir;
  if (path.startsWith("~/") || path.startsWith("~\\")) return join(homeDir, path.slice(2));
  return resolve(baseDir, path);
};

const issue = (source: string, key: string | undefined, text: string): ConfigIssue => ({
  key,
  source,
  line: undefined,
  message: key === undefined ? `${source}: ${text}` : `${source}: ${key}: ${text}`,
});

/**
 * Reads the YAML file as one layer. `display` is the path as the user gave it, which is what
 * the user will recognise in an error.
 */
export const readConfigFile = (
  display: string,
  namedBy: string | undefined,
  cwd: string,
  homeDir: string,
): { layer: Mapping; origin: Origin } => {
  const path = resolvePath(display, cwd, homeDir);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "config file not found" : `cannot read config file (${code ?? cause})`;
    const named = namedBy === undefined ? "" : `, named by ${namedBy}`;
    throw new ConfigError([issue(display, undefined, `${why} (looked for ${path}${named})`)], { cause });
  }

  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const [firstSyntaxError, ...moreSyntaxErrors] = doc.errors.map((error): ConfigIssue => {
    const { line, col } = lineCounter.linePos(error.pos[0]);
    return {
      key: undefined,
      source: display,
      line,
      message: `${display}:${line}:${col}: invalid YAML: ${error.message}`,
    };
  });
  if (firstSyntaxError !== undefined) {
    throw new ConfigError([firstSyntaxError, ...moreSyntaxErrors], { cause: doc.errors[0] });
  }

  let value: unknown;
  try {
    value = doc.toJS();
  } catch (cause) {
    // toJS refuses documents whose aliases expand past a safety limit.
    throw new ConfigError([issue(display, undefined, `unusable YAML: ${(cause as Error).message}`)], {
      cause,
    });
  }
  if (value === null || value === undefined) value = {};
  if (!isMapping(value)) {
    throw new ConfigError([
      issue(display, undefined, "expected a mapping of keys to values at the top level"),
    ]);
  }

  const lineOf = (keyPath: readonly PropertyKey[]): number | undefined => {
    for (let length = keyPath.length; length >= 0; length--) {
      const node = doc.getIn(keyPath.slice(0, length), true);
      if (isNode(node) && node.range) return lineCounter.linePos(node.range[0]).line;
    }
    return undefined;
  };
  return { layer: value, origin: { source: display, baseDir: dirname(path), lineOf } };
};

export interface EnvLayer {
  readonly name: string;
  readonly layer: Mapping;
}

/**
 * Turns HOLDFAST_A__B=v into { a: { b: v } }, one layer per variable, the more specific
 * variables last so HOLDFAST_GATEWAY__PORT wins over a port inside HOLDFAST_GATEWAY.
 */
export const readEnv = (env: NodeJS.ProcessEnv): { layers: EnvLayer[]; issues: ConfigIssue[] } => {
  const layers: { name: string; depth: number; layer: Mapping }[] = [];
  const issues: ConfigIssue[] = [];
  for (const [name, raw] of Object.entries(env)) {
    // Compose files and shells often export an empty variable to mean "not set".
    if (!isConfigVar(name) || raw === undefined || raw === "") continue;
    const path = name.slice(ENV_PREFIX.length).toLowerCase().split("__");
    if (path.some((segment) => segment === "")) {
      issues.push(issue(name, undefined, "not a config key; nested keys are joined by a double underscore"));
      continue;
    }
    const key = path.join(".");
    let value: unknown;
    try {
      value = envValue(raw, path);
    } catch (cause) {
      issues.push(
        issue(name, key, `expected a YAML value (${(cause as Error).message}), got ${JSON.stringify(raw)}`),
      );
      continue;
    }
    layers.push({ name, depth: path.length, layer: nest(path, value) });
  }
  layers.sort((a, b) => a.depth - b.depth || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { layers: layers.map(({ name, layer }) => ({ name, layer })), issues };
};

const nest = (path: readonly string[], value: unknown): Mapping => {
  let node: unknown = value;
  for (const segment of path.toReversed()) {
    const parent: Mapping = {};
    put(parent, segment, node);
    node = parent;
  }
  return node as Mapping;
};

const envValue = (raw: string, path: readonly string[]): unknown => {
  const target = schemaAt(path);
  // A password such as "12345" or "#x" must stay the string it is, not become YAML.
  if (target?.def.type === "string" || target?.def.type === "enum") return raw;
  const value: unknown = parseYaml(raw, { prettyErrors: false });
  if (target?.def.type === "array" && typeof value === "string") {
    return value
      .split(",")
      .map((item) => item.trim())
      .filter((item) => item !== "");
  }
  return value;
};
