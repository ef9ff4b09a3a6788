import * as z from "zod";
import { configSchema } from "./schema.js";

/** Strips default/optional/transform wrappers, keeping the first description met on the way. */
export const unwrap = (schema: z.ZodType): { schema: z.ZodType; description: string | undefined } => {
  let current = schema;
  let description = current.description;
  for (;;) {
    if (
      current instanceof z.ZodDefault ||
      current instanceof z.ZodPrefault ||
      current instanceof z.ZodOptional
    ) {
      current = current.def.innerType as z.ZodType;
    } else if (current instanceof z.ZodPipe) {
      current = current.def.in as z.ZodType;
    } else {
      return { schema: current, description };
    }
    description ??= current.description;
  }
};

/** The schema a key's value must satisfy, or undefined for a key the schema does not have. */
export const schemaAt = (path: readonly string[]): z.ZodType | undefined => {
  let current: z.ZodType = configSchema;
  for (const segment of path) {
    const { schema } = unwrap(current);
    if (schema instanceof z.ZodObject) {
      const shape = schema.shape as Record<string, z.ZodType>;
      if (!Object.hasOwn(shape, segment)) return undefined;
      current = shape[segment]!;
    } else if (schema instanceof z.ZodRecord) {
      current = schema.def.valueType as z.ZodType;
    } else {
      return undefined;
    }
  }
  return unwrap(current).schema;
};
