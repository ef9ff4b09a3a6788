import * as z from "zod";
import { unwrap } from "./introspect.js";
import { configSchema } from "./schema.js";
import { envVarName } from "./sources.js";

export interface ConfigKeyDescription {
  /** Dotted key as written in YAML; `<model>` stands for any model name under prices, `<tag>` for a tag. */
  readonly key: string;
  /** The variable that overrides it. */
  readonly env: string;
  /** Default before path expansion (so "~/.holdfast", not the current user's home); undefined when unset. */
  readonly default: unknown;
  readonly description: string;
}

/** Every configurable key in schema order, for the README's config reference and `holdfast config`. */
export const describeConfig = (): ConfigKeyDescription[] => {
  const entries: ConfigKeyDescription[] = [];
  const walk = (schema: z.ZodType, path: readonly string[], defaultValue: unknown): void => {
    const { schema: inner, description } = unwrap(schema);
    if (inner instanceof z.ZodObject) {
      for (const [key, child] of Object.entries(inner.shape as Record<string, z.ZodType>)) {
        walk(child, [...path, key], childOf(defaultValue, key));
      }
      return;
    }
    const key = path.join(".");
    // Keys under a record are names (a model, a tag) no environment variable can spell.
    const env = path.some((part) => part.startsWith("<")) ? "—" : envVarName(key);
    entries.push({ key, env, default: defaultValue, description: description ?? "" });
    // A record's entries all share one shape, described once under a placeholder name.
    if (inner instanceof z.ZodRecord) {
      walk(
        inner.def.valueType as z.ZodType,
        [...path, PLACEHOLDER[path.at(-1) ?? ""] ?? "<name>"],
        undefined,
      );
    }
  };
  walk(configSchema, [], configSchema.parse({}));
  return entries;
};

const childOf = (value: unknown, key: string): unknown =>
  value !== null && typeof value === "object" && Object.hasOwn(value, key)
    ? (value as Record<string, unknown>)[key]
    : undefined;

/** What a record's keys are, as the README names them. */
const PLACEHOLDER: Record<string, string> = {
  prices: "<model>",
  limits_by_tag: "<tag>",
  budgets: "<tag>",
  tool_gate_by_tag: "<tag>",
  priority_by_tag: "<tag>",
  headers: "<origin>",
  routes: "<alias>",
  tenants: "<tenant>",
};
