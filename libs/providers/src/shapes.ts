import { openAIChatShape } from "./openai-chat/shape.js";
import type { ApiShape, ShapeName } from "./shape.js";

/** Every API shape the gateway serves, one pipeline for all. */
export const SHAPES: readonly ApiShape[] = [openAIChatShape];

export function shapeNamed(name: ShapeName): ApiShape | undefined {
  return SHAPES.find((shape) => shape.name === name);
}
