import type { InjectOptions } from "fastify";

// Requests as an agent's SDK sends them, one builder per API shape the gateway serves.

export const API_KEY = "sk-spec-0123456789abcdefghijklmnop";

export interface CallOptions {
  /** The run, as X-Holdfast-Run names it. */
  run: string;
  /** The user's message (the fake provider quotes it; `[[call:NAME {args}]]` asks for a tool). */
  content?: string;
  model?: string;
  stream?: boolean;
  maxTokens?: number;
  tag?: string;
  apiKey?: string;
  /** Tools the agent declares (by name, any arguments). */
  tools?: readonly string[];
  /** More headers (the fake provider's x-fake-* controls, …). */
  headers?: Record<string, string>;
}

function headersOf(options: CallOptions, key: Record<string, string>): Record<string, string> {
  return {
    "content-type": "application/json",
    "x-holdfast-run": options.run,
    ...(options.tag === undefined ? {} : { "x-holdfast-tag": options.tag }),
    ...key,
    ...options.headers,
  };
}

const ANY_ARGUMENTS = { type: "object", properties: {}, additionalProperties: true };

/** OpenAI Chat Completions: POST /v1/chat/completions. */
export function chat(options: CallOptions): InjectOptions {
  return {
    method: "POST",
    url: "/v1/chat/completions",
    headers: headersOf(options, { authorization: `Bearer ${options.apiKey ?? API_KEY}` }),
    payload: {
      model: options.model ?? "gpt-4o-mini",
      messages: [{ role: "user", content: options.content ?? "hello" }],
      ...(options.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      ...(options.maxTokens === undefined ? {} : { max_tokens: options.maxTokens }),
      ...(options.tools === undefined
        ? {}
        : {
            tools: options.tools.map((name) => ({
              type: "function",
              function: { name, parameters: ANY_ARGUMENTS },
            })),
          }),
    },
  };
}

/** OpenAI Responses: POST /v1/responses. */
export function responses(options: CallOptions): InjectOptions {
  return {
    method: "POST",
    url: "/v1/responses",
    headers: headersOf(options, { authorization: `Bearer ${options.apiKey ?? API_KEY}` }),
    payload: {
      model: options.model ?? "gpt-4o-mini",
      input: options.content ?? "hello",
      ...(options.stream ? { stream: true } : {}),
      ...(options.maxTokens === undefined ? {} : { max_output_tokens: options.maxTokens }),
      ...(options.tools === undefined
        ? {}
        : { tools: options.tools.map((name) => ({ type: "function", name, parameters: ANY_ARGUMENTS })) }),
    },
  };
}

/** Anthropic Messages: POST /v1/messages. */
export function messages(options: CallOptions): InjectOptions {
  return {
    method: "POST",
    url: "/v1/messages",
    headers: headersOf(options, {
      "x-api-key": options.apiKey ?? API_KEY,
      "anthropic-version": "2023-06-01",
    }),
    payload: {
      model: options.model ?? "claude-sonnet-4-5",
      max_tokens: options.maxTokens ?? 256,
      messages: [{ role: "user", content: options.content ?? "hello" }],
      ...(options.stream ? { stream: true } : {}),
      ...(options.tools === undefined
        ? {}
        : { tools: options.tools.map((name) => ({ name, input_schema: ANY_ARGUMENTS })) }),
    },
  };
}
