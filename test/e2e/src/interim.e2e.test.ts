/**
 * What real HTTP clients do with 1xx interim responses while a request is parked: the
 * facts the gateway relies on when it keeps a held, non-streaming request alive with
 * 100 Continue, 102 Processing or 103 Early Hints. A plain node:http server answers 200
 * after 2.5 s and meanwhile sends one kind of 1xx every 200 ms; each client's own timeout
 * is set to 1 s (shorter than the hold) or 10 s (longer).
 *
 * | client, timeout knob                      | 100     | 102     | 103     | 1xx extend the timeout? |
 * | ----------------------------------------- | ------- | ------- | ------- | ----------------------- |
 * | Node 20 fetch, AbortSignal.timeout()      | fails   | ignored | ignored | no (1)                  |
 * | Node 20 fetch, dispatcher headersTimeout  | fails   | ignored | ignored | yes (2)                 |
 * | undici 7 request(), headersTimeout        | fails   | ignored | ignored | yes (2)                 |
 * | openai (JS) SDK, timeout                  | fails   | ignored | ignored | no (3)                  |
 * | @anthropic-ai/sdk (JS), timeout           | fails   | ignored | ignored | no (3)                  |
 * | Python httpx 0.23 (bookworm), timeout=    | ignored | ignored | ignored | yes (4)                 |
 * | curl, --max-time / -m                     | ignored | ignored | ignored | no (1)                  |
 * | curl, --speed-limit 1 --speed-time N      | ignored | ignored | ignored | no (5)                  |
 *
 * fails: the request errors as soon as the first 100 arrives (undici's `SocketError: bad
 * response`, UND_ERR_SOCKET; the SDKs wrap it in APIConnectionError). Node's bundled undici
 * (6.x) and undici 7 behave alike.
 * (1) A whole-request deadline.
 * (2) An idle timer that every 102/103 restarts (restarts, not disarms: one 1xx followed by
 *     silence still times out). Node's default is 300 s, so plain fetch with no deadline of
 *     its own waits as long as 1xx keep coming more often than that.
 * (3) A deadline for the response headers (an AbortController armed for `timeout`), on top
 *     of fetch's 300 s idle timer of (2). The SDKs then retry (`maxRetries`, 2 by default).
 * (4) It bounds each socket read, and every 1xx is a read: the same restart as (2).
 * (5) The bytes of 1xx responses do not count as transfer progress.
 *
 * User-Agent, for choosing the 1xx per client: Node fetch sends `node`, undici's request()
 * none, the SDKs `OpenAI/JS <version>` / `Anthropic/JS <version>` with `x-stainless-lang:
 * js`, httpx `python-httpx/<version>`, curl `curl/<version>`.
 *
 * Not measured here: the Python SDKs (Debian does not package them; they run over httpx,
 * so its row should apply, and reportedly send `OpenAI/Python <version>`) and Go's net/http.
 */
import { execFile } from "node:child_process";
import { createServer, type IncomingHttpHeaders } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import { VERSION as ANTHROPIC_VERSION } from "@anthropic-ai/sdk/version";
import { ensurePythonHttpx, type PythonHttpx, PythonUnavailableError } from "@holdfast/test-harness";
import OpenAI from "openai";
import { VERSION as OPENAI_VERSION } from "openai/version";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const HOLD_MS = 2_500;
const INTERIM_EVERY_MS = 200;
/** Shorter than the hold, much longer than the gap between two 1xx. */
const SHORT_TIMEOUT_MS = 1_000;
const LONG_TIMEOUT_MS = 10_000;

type Interim = 100 | 102 | 103;
const INTERIMS: readonly Interim[] = [100, 102, 103];
/** `every`: a 1xx every 200 ms until the answer; `once`: one 1xx, then silence; `now`: answer at once. */
type Pattern = "every" | "once" | "now";
type Outcome = "answered" | "timed out" | "failed on the 1xx";

const CHAT_COMPLETION = {
  id: "chatcmpl-interim",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o-mini",
  choices: [
    { index: 0, finish_reason: "stop", logprobs: null, message: { role: "assistant", content: "ok" } },
  ],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
};
const MESSAGE = {
  id: "msg_interim",
  type: "message",
  role: "assistant",
  model: "claude-sonnet-4-5",
  content: [{ type: "text", text: "ok" }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 1, output_tokens: 1 },
};

// undici is not a dependency of this package yet: this borrows the gateway's copy, the version
// Holdfast itself ships.
interface Undici {
  Agent: new () => Closeable;
  request(
    url: string,
    options: {
      method: string;
      headers: Record<string, string>;
      body: string;
      headersTimeout: number;
      dispatcher: Closeable;
    },
  ): Promise<{ statusCode: number; body: { text(): Promise<string> } }>;
}
interface Closeable {
  close(): Promise<void>;
}
const undici = createRequire(new URL("../../../services/gateway/package.json", import.meta.url))(
  "undici",
) as Undici;

/** The Agent class of the undici bundled in Node, which only its global dispatcher exposes. */
type BundledAgent = new (options: { headersTimeout: number }) => NonNullable<RequestInit["dispatcher"]>;

const seen = new Map<string, IncomingHttpHeaders>();
const server = createServer((req, res) => {
  // /<id>/<interim or "none">/<pattern>/<whatever path the client appends>
  const [, id = "", interim = "none", pattern = "now"] = (req.url ?? "").split("/");
  seen.set(id, req.headers);
  req.resume();
  let sent = 0;
  const sendInterim = () => {
    if (res.destroyed || (pattern === "once" && sent > 0)) return;
    sent++;
    if (interim === "100") res.writeContinue();
    else if (interim === "102") res.writeProcessing();
    else if (interim === "103") res.writeEarlyHints({ link: "</style.css>; rel=preload; as=style" });
  };
  const body = req.url?.endsWith("/chat/completions")
    ? CHAT_COMPLETION
    : req.url?.endsWith("/messages")
      ? MESSAGE
      : { ok: true };
  const ticker = setInterval(sendInterim, INTERIM_EVERY_MS);
  const answer = setTimeout(
    () => {
      clearInterval(ticker);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    },
    pattern === "now" ? 0 : HOLD_MS,
  );
  res.on("close", () => {
    clearInterval(ticker);
    clearTimeout(answer);
  });
});

let base: string;
let nextId = 0;
let bundledAgent: BundledAgent;
let python: PythonHttpx | undefined;
let pythonMissing: string | undefined;

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  // Node creates its global dispatcher on the first fetch; its class is the bundled Agent.
  await (await fetch(target("none", "now").url)).text();
  const global = (globalThis as Record<symbol, unknown>)[Symbol.for("undici.globalDispatcher.1")];
  bundledAgent = (global as { constructor: BundledAgent }).constructor;

  try {
    python = await ensurePythonHttpx();
  } catch (error) {
    if (!(error instanceof PythonUnavailableError)) throw error;
    pythonMissing = error.message;
  }
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

function target(interim: Interim | "none", pattern: Pattern): { id: string; url: string } {
  const id = `r${nextId++}`;
  return { id, url: `${base}/${id}/${interim}/${pattern}` };
}

/** Node fetch and undici errors: the ones this test expects become outcomes, anything else fails it. */
function undiciOutcome(error: unknown): Outcome {
  if (error instanceof Error && error.name === "TimeoutError") return "timed out";
  const cause = (error instanceof Error && error.cause instanceof Error ? error.cause : error) as {
    code?: unknown;
    message?: unknown;
  };
  if (cause.code === "UND_ERR_HEADERS_TIMEOUT") return "timed out";
  if (cause.code === "UND_ERR_SOCKET" && cause.message === "bad response") return "failed on the 1xx";
  throw error;
}

function sdkOutcome(error: unknown): Outcome {
  if (
    error instanceof OpenAI.APIConnectionTimeoutError ||
    error instanceof Anthropic.APIConnectionTimeoutError
  ) {
    return "timed out";
  }
  if (error instanceof OpenAI.APIConnectionError || error instanceof Anthropic.APIConnectionError) {
    return undiciOutcome(error.cause);
  }
  throw error;
}

function run(file: string, args: readonly string[], env?: NodeJS.ProcessEnv) {
  return new Promise<{ exitCode: number; stdout: string; stderr: string }>((resolve, reject) => {
    execFile(file, args, { env: env ?? process.env, encoding: "utf8" }, (error, stdout, stderr) => {
      if (error !== null && typeof error.code !== "number") reject(error);
      else resolve({ exitCode: typeof error?.code === "number" ? error.code : 0, stdout, stderr });
    });
  });
}

const HTTPX_SCRIPT = `
import sys, httpx
url, timeout = sys.argv[1], float(sys.argv[2])
try:
    with httpx.Client(timeout=timeout) as client:
        response = client.post(url, json={})
    print("answered" if response.status_code == 200 and response.json() == {"ok": True} else f"status {response.status_code}")
except httpx.ReadTimeout:
    print("timed out")
except httpx.RemoteProtocolError as error:
    print(f"protocol error: {error}")
`;

interface Client {
  readonly name: string;
  /** Sends one request with the client's own timeout set to `timeoutMs`. */
  call(url: string, timeoutMs: number): Promise<Outcome>;
  readonly unavailable?: () => string | undefined;
}

const nodeFetchWithSignal: Client = {
  name: "Node fetch, AbortSignal.timeout",
  async call(url, timeoutMs) {
    try {
      const response = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
        signal: AbortSignal.timeout(timeoutMs),
      });
      await response.json();
      return "answered";
    } catch (error) {
      return undiciOutcome(error);
    }
  },
};

const nodeFetchWithHeadersTimeout: Client = {
  name: "Node fetch, dispatcher headersTimeout",
  async call(url, timeoutMs) {
    const dispatcher = new bundledAgent({ headersTimeout: timeoutMs });
    try {
      const response = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
        dispatcher,
      });
      await response.json();
      return "answered";
    } catch (error) {
      return undiciOutcome(error);
    } finally {
      await dispatcher.close();
    }
  },
};

const undiciRequest: Client = {
  name: "undici.request, headersTimeout",
  async call(url, timeoutMs) {
    // Its own Agent: undici's default would be whichever global dispatcher Node made first.
    const dispatcher = new undici.Agent();
    try {
      const response = await undici.request(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
        headersTimeout: timeoutMs,
        dispatcher,
      });
      await response.body.text();
      return "answered";
    } catch (error) {
      return undiciOutcome(error);
    } finally {
      await dispatcher.close();
    }
  },
};

const openaiSdk: Client = {
  name: "openai SDK, timeout",
  async call(url, timeoutMs) {
    const client = new OpenAI({
      baseURL: `${url}/v1`,
      apiKey: "sk-interim",
      timeout: timeoutMs,
      maxRetries: 0,
    });
    try {
      const completion = await client.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "hello" }],
      });
      expect(completion.choices[0]?.message.content).toBe("ok");
      return "answered";
    } catch (error) {
      return sdkOutcome(error);
    }
  },
};

const anthropicSdk: Client = {
  name: "@anthropic-ai/sdk, timeout",
  async call(url, timeoutMs) {
    const client = new Anthropic({
      baseURL: url,
      apiKey: "sk-ant-interim",
      timeout: timeoutMs,
      maxRetries: 0,
    });
    try {
      const message = await client.messages.create({
        model: "claude-sonnet-4-5",
        max_tokens: 16,
        messages: [{ role: "user", content: "hello" }],
      });
      expect(message.content[0]).toMatchObject({ type: "text", text: "ok" });
      return "answered";
    } catch (error) {
      return sdkOutcome(error);
    }
  },
};

const pythonHttpx: Client = {
  name: "Python httpx, timeout=",
  unavailable: () => pythonMissing,
  async call(url, timeoutMs) {
    const { python: interpreter, pythonPath } = python!;
    const { stdout, stderr } = await run(interpreter, ["-c", HTTPX_SCRIPT, url, String(timeoutMs / 1000)], {
      ...process.env,
      PYTHONPATH: pythonPath,
    });
    const outcome = stdout.trim();
    if (outcome === "answered" || outcome === "timed out") return outcome;
    if (outcome.startsWith("protocol error")) return "failed on the 1xx";
    throw new Error(`httpx printed ${JSON.stringify(outcome)}; stderr: ${stderr}`);
  },
};

function curl(name: string, timeoutArgs: (seconds: string) => string[], method: "GET" | "POST"): Client {
  return {
    name,
    async call(url, timeoutMs) {
      const body = method === "POST" ? ["-H", "content-type: application/json", "--data", "{}"] : [];
      const args = [
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        ...body,
        ...timeoutArgs(String(timeoutMs / 1000)),
      ];
      const { exitCode, stdout, stderr } = await run("curl", [...args, url]);
      if (exitCode === 0 && stdout === "200") return "answered";
      // 28 is curl's "operation timed out", for both --max-time and the low-speed limit.
      if (exitCode === 28) return "timed out";
      throw new Error(`curl exited ${exitCode} with status ${stdout}: ${stderr}`);
    },
  };
}

// A GET, because curl counts uploaded bytes towards the low-speed check as well.
const curlSpeedLimit = curl(
  "curl --speed-limit 1 --speed-time",
  (s) => ["--speed-limit", "1", "--speed-time", s],
  "GET",
);
const curlMaxTime = curl("curl --max-time", (s) => ["--max-time", s], "POST");

interface Finding {
  readonly client: Client;
  /** The 1xx the client skips over; any other fails the request when it arrives. */
  readonly ignores: readonly Interim[];
  /** Whether 1xx arriving faster than the client's timeout keep the request alive past it. */
  readonly timeoutExtended: boolean;
}

const FINDINGS: readonly Finding[] = [
  { client: nodeFetchWithSignal, ignores: [102, 103], timeoutExtended: false },
  { client: nodeFetchWithHeadersTimeout, ignores: [102, 103], timeoutExtended: true },
  { client: undiciRequest, ignores: [102, 103], timeoutExtended: true },
  { client: openaiSdk, ignores: [102, 103], timeoutExtended: false },
  { client: anthropicSdk, ignores: [102, 103], timeoutExtended: false },
  { client: pythonHttpx, ignores: [100, 102, 103], timeoutExtended: true },
  { client: curlMaxTime, ignores: [100, 102, 103], timeoutExtended: false },
  { client: curlSpeedLimit, ignores: [100, 102, 103], timeoutExtended: false },
];

interface Case {
  readonly title: string;
  readonly client: Client;
  readonly interim: Interim | "none";
  readonly pattern: Pattern;
  readonly timeoutMs: number;
  readonly expected: Outcome;
}

const CASES: Case[] = FINDINGS.flatMap(({ client, ignores, timeoutExtended }) => [
  ...INTERIMS.map((interim) => ({
    title: `${interim} every ${INTERIM_EVERY_MS} ms, timeout beyond the hold`,
    client,
    interim,
    pattern: "every" as const,
    timeoutMs: LONG_TIMEOUT_MS,
    expected: ignores.includes(interim) ? ("answered" as const) : ("failed on the 1xx" as const),
  })),
  {
    title: "no 1xx, timeout shorter than the hold",
    client,
    interim: "none" as const,
    pattern: "every" as const,
    timeoutMs: SHORT_TIMEOUT_MS,
    expected: "timed out" as const,
  },
  ...ignores.map((interim) => ({
    title: `${interim} every ${INTERIM_EVERY_MS} ms, timeout shorter than the hold`,
    client,
    interim,
    pattern: "every" as const,
    timeoutMs: SHORT_TIMEOUT_MS,
    expected: timeoutExtended ? ("answered" as const) : ("timed out" as const),
  })),
  ...(timeoutExtended ? ignores : []).map((interim) => ({
    title: `one ${interim}, then silence, timeout shorter than the hold`,
    client,
    interim,
    pattern: "once" as const,
    timeoutMs: SHORT_TIMEOUT_MS,
    expected: "timed out" as const,
  })),
]);

describe("1xx interim responses while a request is held", () => {
  for (const { client } of FINDINGS) {
    describe(client.name, () => {
      for (const c of CASES.filter((each) => each.client === client)) {
        it.concurrent(`${c.title}: ${c.expected}`, async (ctx) => {
          const missing = client.unavailable?.();
          if (missing !== undefined) return ctx.skip(missing);
          ctx.expect(await client.call(target(c.interim, c.pattern).url, c.timeoutMs)).toBe(c.expected);
        });
      }
    });
  }
});

describe("User-Agent of each client, for choosing its 1xx", () => {
  async function userAgentOf(client: Client): Promise<IncomingHttpHeaders> {
    const { id, url } = target("none", "now");
    expect(await client.call(url, LONG_TIMEOUT_MS)).toBe("answered");
    return seen.get(id)!;
  }

  it("Node fetch sends `node`, undici.request none", async () => {
    expect((await userAgentOf(nodeFetchWithSignal))["user-agent"]).toBe("node");
    expect((await userAgentOf(undiciRequest))["user-agent"]).toBeUndefined();
  });

  it("the Node SDKs name themselves and their version, and say they are JavaScript", async () => {
    expect(await userAgentOf(openaiSdk)).toMatchObject({
      "user-agent": `OpenAI/JS ${OPENAI_VERSION}`,
      "x-stainless-lang": "js",
      "x-stainless-package-version": OPENAI_VERSION,
    });
    expect(await userAgentOf(anthropicSdk)).toMatchObject({
      "user-agent": `Anthropic/JS ${ANTHROPIC_VERSION}`,
      "x-stainless-lang": "js",
      "x-stainless-package-version": ANTHROPIC_VERSION,
    });
  });

  it("httpx sends python-httpx/<version>", async (ctx) => {
    if (python === undefined) return ctx.skip(pythonMissing);
    const version = python.packages["python3-httpx"]?.replace(/-[^-]+$/, "");
    expect((await userAgentOf(pythonHttpx))["user-agent"]).toBe(`python-httpx/${version}`);
  });

  it("curl sends curl/<version>", async () => {
    expect((await userAgentOf(curlMaxTime))["user-agent"]).toMatch(/^curl\/\d+\.\d+\.\d+/);
  });
});
