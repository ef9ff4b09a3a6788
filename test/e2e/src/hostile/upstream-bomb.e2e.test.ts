import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createGzip } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An attack run found that a provider's answer is read without bound. A non-streamed
// answer is buffered whole, and one sent with `Content-Encoding: gzip` is decompressed
// with gunzipSync, on the gateway's event loop, with no limit on what it yields: a
// provider (a hostile or compromised upstream, or anything on an http:// path to it) that
// answers one call with 1 MiB of gzip makes the gateway allocate over a GiB, and every
// other agent's call waits while it does (on this machine, about half a minute). A few
// such answers at once exhaust the host's memory. The gateway runs in this process
// (startStack), so its memory is this process's: its peak resident size (VmHWM) is what
// the answer cost.

const BOMB_MIB = 1024;

const answer = JSON.stringify({
  id: "chatcmpl-bomb",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
});

/** A valid answer followed by `mib` MiB of JSON whitespace, gzipped: about 1 KiB of gzip per MiB. */
async function gzipBomb(mib: number): Promise<Buffer> {
  const gzip = createGzip({ level: 9 });
  const parts: Buffer[] = [];
  gzip.on("data", (part: Buffer) => parts.push(part));
  const ended = new Promise((resolve) => gzip.on("end", resolve));
  gzip.write(answer);
  const spaces = Buffer.alloc(1024 * 1024, 0x20);
  for (let i = 0; i < mib; i++) {
    if (!gzip.write(spaces)) await new Promise((resolve) => gzip.once("drain", resolve));
  }
  gzip.end();
  await ended;
  return Buffer.concat(parts);
}

/** The most this process has held resident so far, in bytes (Linux). */
function peakResident(): number {
  const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))?.[1];
  return Number(kb) * 1024;
}

let bomb: Buffer;
let upstream: Server;
let stack: Stack;
beforeAll(async () => {
  bomb = await gzipBomb(BOMB_MIB);
  // The provider: a bomb for model "bomb", a plain answer for anything else.
  upstream = createServer(async (request, response) => {
    let body = "";
    for await (const chunk of request) body += chunk;
    if ((JSON.parse(body) as { model: string }).model === "bomb") {
      response.writeHead(200, {
        "content-type": "application/json",
        "content-encoding": "gzip",
        "content-length": bomb.length,
      });
      response.end(bomb);
      return;
    }
    response.writeHead(200, { "content-type": "application/json" });
    response.end(answer);
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const { port } = upstream.address() as AddressInfo;
  stack = await startStack({ config: { gateway: { upstream: `http://127.0.0.1:${port}/v1` } } });
}, 180_000);
afterAll(async () => {
  await stack?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

const ask = (runId: string, model: string) =>
  fetch(`${stack.gatewayUrl}/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: "Bearer sk-bomb-0123456789abcdef",
      "x-holdfast-run": runId,
    },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
  }).then(async (response) => {
    await response.arrayBuffer();
    return response.status;
  });

describe("a provider that answers with a gzip bomb", () => {
  it("costs the gateway no more memory than a bounded answer, its step is recorded, and the gateway goes on", async () => {
    expect(bomb.length).toBeLessThan(2 * 1024 * 1024);
    await ask("before-the-bomb", "gpt-4o-mini");
    const before = peakResident();

    await ask("bombed", "bomb");

    const grew = peakResident() - before;
    expect(
      grew,
      `the gateway took ${Math.round(grew / 2 ** 20)} MiB for a ${bomb.length}-byte answer`,
    ).toBeLessThan(256 * 1024 * 1024);
    const bombed = await stack.settled("bombed", 1);
    expect(bombed.inFlight).toBe(0);
    expect(await ask("after-the-bomb", "gpt-4o-mini")).toBe(200);
    expect((await stack.settled("after-the-bomb", 1)).completed).toBe(1);
  }, 180_000);
});
