import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type ShapeName, shapeNamed } from "@holdfast/providers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Upstreams, type UpstreamsConfig } from "./upstream.js";

// Where each API shape's calls go, by `gateway.upstream` and `gateway.upstreams`.

/** A provider that answers with the path it was asked for. */
async function provider(): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => res.end(req.url));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

let a: Awaited<ReturnType<typeof provider>>;
let b: Awaited<ReturnType<typeof provider>>;
beforeAll(async () => {
  [a, b] = await Promise.all([provider(), provider()]);
});
afterAll(() => {
  a.server.close();
  b.server.close();
});

function upstreams(config: Partial<UpstreamsConfig>): Upstreams {
  return new Upstreams({ upstream: "auto", byShape: {}, timeoutMs: 5_000, ...config });
}

/** What a call of `shape` reaches: the provider's origin and the path it is asked for. */
async function reached(routes: Upstreams, name: ShapeName): Promise<string> {
  const shape = shapeNamed(name)!;
  const upstream = routes.forShape(shape);
  const answer = await upstream.request({
    path: shape.upstreamPath,
    method: "POST",
    headers: {},
    signal: AbortSignal.timeout(5_000),
  });
  return `${upstream.origin}${await answer.body.text()}`;
}

describe("Upstreams", () => {
  it("given \"auto\", then Messages go to Anthropic's API and the OpenAI shapes to OpenAI's", async () => {
    const routes = upstreams({ upstream: "auto" });
    const origin = (name: ShapeName) => routes.forShape(shapeNamed(name)!);
    expect(origin("openai_chat_completions")).toMatchObject({
      origin: "https://api.openai.com",
      provider: "openai",
    });
    expect(origin("openai_responses")).toMatchObject({
      origin: "https://api.openai.com",
      provider: "openai",
    });
    expect(origin("anthropic_messages")).toMatchObject({
      origin: "https://api.anthropic.com",
      provider: "anthropic",
    });
    await routes.close();
  });

  it("given one URL, then every shape goes there, below its path", async () => {
    const routes = upstreams({ upstream: `${a.url}/v1` });
    expect(await reached(routes, "openai_chat_completions")).toBe(`${a.url}/v1/chat/completions`);
    expect(await reached(routes, "openai_responses")).toBe(`${a.url}/v1/responses`);
    expect(await reached(routes, "anthropic_messages")).toBe(`${a.url}/v1/messages`);
    await routes.close();
  });

  it("given a URL per shape, then that shape goes there and the rest to `upstream`", async () => {
    const routes = upstreams({
      upstream: `${a.url}/v1`,
      byShape: { anthropic_messages: `${b.url}/anthropic/v1/` },
    });
    expect(await reached(routes, "anthropic_messages")).toBe(`${b.url}/anthropic/v1/messages`);
    expect(await reached(routes, "openai_chat_completions")).toBe(`${a.url}/v1/chat/completions`);
    expect(await reached(routes, "openai_responses")).toBe(`${a.url}/v1/responses`);
    await routes.close();
  });

  it("given a path it does not meter, then one that speaks Anthropic goes to Anthropic's upstream", async () => {
    const routes = upstreams({
      byShape: { anthropic_messages: `${b.url}/v1`, openai_chat_completions: `${a.url}/v1` },
    });
    expect(routes.forPassthrough("/v1/messages/count_tokens", {}).origin).toBe(b.url);
    expect(
      routes.forPassthrough("/v1/models", { "anthropic-version": "2023-06-01", "x-api-key": "k" }).origin,
    ).toBe(b.url);
    expect(routes.forPassthrough("/v1/models", { authorization: "Bearer k" }).origin).toBe(a.url);
    await routes.close();
  });
});
