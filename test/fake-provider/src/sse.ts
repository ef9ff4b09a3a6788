/**
 * One server-sent event. Chat Completions sends bare `data:` lines; the Responses and Messages
 * APIs name each event as well, and their SDKs dispatch on that name.
 */
export function sse(data: unknown, event?: string): string {
  const line = `data: ${JSON.stringify(data)}\n\n`;
  return event === undefined ? line : `event: ${event}\n${line}`;
}
