import { describe, expect, it } from "vitest";
import { SHAPES, shapeNamed } from "./shapes.js";

describe("SHAPES", () => {
  it("given the shapes the gateway serves, then each has its own name, route and upstream path", () => {
    expect(
      SHAPES.map(({ name, family, path, upstreamPath }) => ({ name, family, path, upstreamPath })),
    ).toEqual([
      {
        name: "openai_chat_completions",
        family: "openai",
        path: "/v1/chat/completions",
        upstreamPath: "/chat/completions",
      },
      { name: "openai_responses", family: "openai", path: "/v1/responses", upstreamPath: "/responses" },
      { name: "anthropic_messages", family: "anthropic", path: "/v1/messages", upstreamPath: "/messages" },
    ]);
  });

  it.each([["openai_chat_completions"], ["openai_responses"], ["anthropic_messages"]] as const)(
    "given the name %s, then shapeNamed finds that shape",
    (name) => {
      expect(shapeNamed(name)?.name).toBe(name);
    },
  );
});
