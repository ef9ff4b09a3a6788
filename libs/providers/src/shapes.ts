import { anthropicMessagesShape } from "./anthropic-messages/shape.js";
import { openAIChatShape } from "./openai-chat/shape.js";
import { openAIResponsesShape } from "./openai-responses/shape.js";
import type { ApiShape, ShapeName } from "./shape.js";

/** Every API shape the gateway serves, one pipeline for all. */
export const SHAPES: readonly ApiShape[] = [openAIChatShape, openAIResponsesShape, anthropicMessagesShape];

export function shapeNamed(name: ShapeName): ApiShape | undefined {
  return SHAPES.find((shape) => shape.name === name);
}
