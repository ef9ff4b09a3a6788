import { isRecord } from "./json.js";

/**
 * The text of a message's content: a string as it is; in an array of parts, the text of
 * each part whose type is one of `textTypes`, joined by "\n". Parts that are not text
 * (images, audio, files, tool results) stand in as their JSON, so the same request always
 * reads the same and different attachments read differently.
 */
export function contentText(content: unknown, textTypes: ReadonlySet<string>): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  const texts: string[] = [];
  for (const part of content) {
    if (
      isRecord(part) &&
      typeof part.type === "string" &&
      textTypes.has(part.type) &&
      typeof part.text === "string"
    ) {
      texts.push(part.text);
    } else {
      texts.push(JSON.stringify(part) ?? "null");
    }
  }
  return texts.join("\n");
}
