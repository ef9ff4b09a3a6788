import { describe, expect, it } from "vitest";
import { SnapshotReader } from "./reader.js";
import { redactStrings } from "./redact.js";
import { MIN_PIECE_CHARS, pieceEnds, pieceEndsAfter, splitPieces } from "./split.js";
import { CHUNK_CHARS, contentKey, manifestKey } from "./store.js";
import { MAX_PIECES, SnapshotWriter } from "./writer.js";

/** A bucket as a map, with every put counted (the codec's own test: the buckets' are integration tests). */
function bucket() {
  const values = new Map<string, string>();
  let puts = 0;
  return {
    values,
    get puts() {
      return puts;
    },
    put: async (key: string, value: string) => {
      puts += 1;
      // Through UTF-8, as NATS carries it.
      values.set(key, Buffer.from(value, "utf8").toString("utf8"));
    },
    get: async (key: string) => values.get(key),
  };
}

function conversation(steps: number, pad = 200): string[] {
  const messages: unknown[] = [{ role: "system", content: "You are terse." }];
  const bodies: string[] = [];
  for (let i = 1; i <= steps; i++) {
    messages.push({ role: "user", content: `question ${i} ${"x".repeat(pad)}` });
    bodies.push(JSON.stringify({ model: "gpt-4o-mini", messages, max_tokens: 50 }));
    messages.push({ role: "assistant", content: `answer ${i} ${"y".repeat(pad)}` });
  }
  return bodies;
}

describe("splitPieces", () => {
  it("cuts where each element of the growing arrays starts, and gives the bytes back exactly", () => {
    const long = "w".repeat(MIN_PIECE_CHARS);
    const text = `{ "model" : "m",\n "messages": [ {"role":"user","content":"a \\" ] ,${long}"} ,{"content":[1,2]} ,{"content":"${long}"}],"tools":[],"n":1e3 }\n`;
    const pieces = splitPieces(text);
    expect(pieces.join("")).toBe(text);
    expect(pieces).toEqual([
      // Short: joined with the first element.
      `{ "model" : "m",\n "messages": [ {"role":"user","content":"a \\" ] ,${long}"} `,
      // Short too: joined with the one after it.
      `,{"content":[1,2]} ,{"content":"${long}"}`,
      '],"tools":[],"n":1e3 }\n',
    ]);
  });

  it("cuts a text read on from a shared beginning exactly as read whole", () => {
    const bodies = conversation(60, 700).map((body, i) =>
      // Some steps add tools after the messages, as agents that gain tools do.
      i % 7 === 3 ? body.replace(/}$/, `,"tools":[{"type":"function","function":{"name":"t${i}"}}]}`) : body,
    );
    for (let i = 1; i < bodies.length; i++) {
      const before = pieceEnds(bodies[i - 1]!);
      const whole = pieceEnds(bodies[i]!);
      // Every cut the two share (all but the last piece's, when the text grew by its end).
      let shared = 0;
      while (shared < before.length - 1 && bodies[i]!.startsWith(bodies[i - 1]!.slice(0, before[shared])))
        shared += 1;
      expect(pieceEndsAfter(bodies[i]!, before, shared)).toEqual(whole);
    }
  });

  it("keeps a text that is not a JSON object whole", () => {
    for (const text of ["", "[1,2]", '{"messages":[1,', "not json", '{"a":"unterminated}']) {
      expect(splitPieces(text).join("")).toBe(text);
      expect(splitPieces(text)).toHaveLength(1);
    }
  });
});

describe("SnapshotWriter and SnapshotReader", () => {
  it("gives back every step of a long conversation byte for byte, storing it with its unique content", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    // About 1 kB a message, as an agent's tool results and answers run.
    const bodies = conversation(200, 1_000);
    for (const [i, body] of bodies.entries()) {
      expect(
        await writer.request("run-1", `step-${i + 1}`, "chat", Buffer.from(body), undefined, ["sk-x"]),
      ).toBe(true);
    }
    const reader = new SnapshotReader(parts.get, manifests.get);
    for (const n of [1, 2, 64, 65, 66, 200]) {
      const step = await reader.step("run-1", `step-${n}`);
      expect(step.request?.forwardedText).toBe(bodies[n - 1]);
      expect(step.missing).toEqual(["answer: not stored"]);
    }
    const stored = [...parts.values.values(), ...manifests.values.values()].reduce(
      (sum, v) => sum + v.length,
      0,
    );
    const raw = bodies.reduce((sum, body) => sum + body.length, 0);
    const unique = bodies[199]!.length;
    // The raw requests repeat the history every step; what is stored grows with what each adds.
    expect(raw / unique).toBeGreaterThan(90);
    expect(stored / unique).toBeLessThan(1.3);
  });

  it("redacts credentials and redact.patterns from what it stores, never from the bytes it was given", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({
      putPart: parts.put,
      putManifest: manifests.put,
      patterns: ["\\b\\d{3}-\\d{2}-\\d{4}\\b"],
    });
    const key = "sk-proj-Qx9Zr2Lw4Tn8Vb6Yc1Md5Fh3Jk7";
    const body = JSON.stringify({
      model: "m",
      messages: [{ role: "user", content: `my key is ${key}, my SSN 123-45-6789, gsk_abcdefghijklmnop1234` }],
    });
    const given = Buffer.from(body);
    await writer.request("r", "s1", "chat", given, undefined, [key]);
    expect(given.toString()).toBe(body);
    const all = [...parts.values.values(), ...manifests.values.values()].join("\n");
    expect(all).not.toContain(key);
    expect(all).not.toContain("Qx9Zr2Lw4");
    expect(all).not.toContain("123-45-6789");
    expect(all).not.toContain("gsk_abcdefghijklmnop1234");
    const step = await new SnapshotReader(parts.get, manifests.get).step("r", "s1");
    expect(step.missing).toEqual(["answer: not stored"]);
    expect(step.request?.forwardedText).toContain("my key is [redacted], my SSN [redacted], [redacted]");
    expect(step.request?.redacted).toBe(1);
  });

  it("redacts what a string says however JSON spells it, and keeps what it stores JSON", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({
      putPart: parts.put,
      putManifest: manifests.put,
      patterns: ['"password"\\s*:\\s*"[^"]*"', "\\bACME-\\d{6}\\b"],
    });
    const anthropic = "sk-ant-api03-SECRETxapiK3yV4lue9988776655";
    const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl";
    const body = JSON.stringify({
      model: "m",
      messages: [
        { role: "user", content: `my keys:\n${anthropic}\ntoken:\n${jwt}` },
        { role: "user", content: 'curl -H "Authorization: Bearer $OPENAI_API_KEY" https://api.example.com' },
        { role: "user", content: "order ACME-123456 is late" },
        {
          role: "assistant",
          tool_calls: [
            {
              id: "c1",
              type: "function",
              function: {
                name: "login",
                arguments: JSON.stringify({ user: "ann", password: "hunter2", api_key: "a1b2c3d4e5f6g7" }),
              },
            },
          ],
        },
      ],
    })
      .replace("ACME", "\\u0041CME")
      .replace(anthropic, `\\u0073${anthropic.slice(1)}`);
    // The body spells some of it in escapes, as a client's serializer may.
    expect(JSON.parse(body).messages[2].content).toBe("order ACME-123456 is late");
    await writer.request("r", "s1", "chat", body, undefined, []);
    const stored = (await new SnapshotReader(parts.get, manifests.get).step("r", "s1")).request!
      .forwardedText;
    for (const secret of [
      "SECRETxapiK3yV4lue",
      "eyJhbGci",
      "hunter2",
      "a1b2c3d4e5f6g7",
      "123456",
      "OPENAI_API_KEY",
    ]) {
      expect(stored).not.toContain(secret);
    }
    // Still the request it was: it parses, and what was not redacted is as sent.
    const parsed = JSON.parse(stored);
    expect(parsed.messages[1].content).toBe(
      'curl -H "Authorization: Bearer [redacted]" https://api.example.com',
    );
    expect(parsed.messages[2].content).toBe("order [redacted] is late");
    // The operator's pattern takes the whole pair, as it does in the gate's events.
    expect(parsed.messages[3].tool_calls[0].function.arguments).toBe(
      '{"user":"ann",[redacted],"api_key":"[redacted]"}',
    );
  });

  it("redacts a credential by the key it is under, a number by a pattern, and keeps every text it cleans what it was", () => {
    const clean = (value: string) => value.replace(/\b\d{16}\b/g, "[redacted]");
    const body = JSON.stringify({
      tools: [{ type: "mcp", authorization: "ya29.a0AfH6SM", headers: { "X-Api-Key": "c0ffee1234" } }],
      input: [{ role: "user", content: "pay" }],
      card: 4111111111111111,
      logprobs: [{ token: "Hello", logprob: -0.1 }],
      password: "",
    });
    const stored = redactStrings(body, clean);
    expect(JSON.parse(stored)).toEqual({
      tools: [{ type: "mcp", authorization: "[redacted]", headers: { "X-Api-Key": "[redacted]" } }],
      input: [{ role: "user", content: "pay" }],
      card: "[redacted]",
      logprobs: [{ token: "Hello", logprob: -0.1 }],
      password: "",
    });
    // A stream: each data line that is JSON, as JSON; the framing as it is.
    const stream =
      'event: x\ndata: {"delta":"my card 4111111111111111","api_key":"k-123"}\n\ndata: [DONE]\n\n';
    expect(redactStrings(stream, clean)).toBe(
      'event: x\ndata: {"delta":"my card [redacted]","api_key":"[redacted]"}\n\ndata: [DONE]\n\n',
    );
    // A text that is no JSON (a quote opening a run of escaped quotes) is cleaned as it is.
    const hostile = `"${'\\"'.repeat(200_000)}`;
    expect(redactStrings(hostile, (v) => v)).toBe(hostile);
  });

  it("redacts a credential a stream spreads over its deltas, keeping every event and the rest of the text", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const key = "sk-proj-Qx9Zr2Lw4PmN7vB3yT8kAa1Bb2Cc";
    const said = `Your key is ${key}, keep it safe.`;
    const chunk = (content: string) =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content } }] })}\n\n`;
    const pieces = said.match(/.{1,4}/g)!;
    const events = `${pieces.map(chunk).join("")}data: [DONE]\n\n`;
    await writer.answer("r", "s1", 200, { events }, [key]);
    const stored = (await new SnapshotReader(parts.get, manifests.get).step("r", "s1")).answer!;
    const joined = stored.text
      .split("\n")
      .filter((line) => line.startsWith("data: {"))
      .map((line) => JSON.parse(line.slice(6)).choices[0].delta.content as string)
      .join("");
    // Each event's own scrub takes what it can see ("sk-p"), the joined text the rest.
    expect(joined).toMatch(/^Your key is (\[redacted\])+, keep it safe\.$/);
    for (let i = 8; i < key.length; i += 4) expect(stored.text).not.toContain(key.slice(i - 8, i));
    // Every event is still there, in its place.
    expect(stored.text.split("\n\n").length).toBe(events.split("\n\n").length);
    expect(stored.redacted).toBe(1);
    // A stream with nothing to hide is stored as it came.
    const plain = `${"Nothing to hide here."
      .match(/.{1,4}/g)!
      .map(chunk)
      .join("")}data: [DONE]\n\n`;
    await writer.answer("r", "s2", 200, { events: plain }, [key]);
    expect((await new SnapshotReader(parts.get, manifests.get).step("r", "s2")).answer!.text).toBe(plain);
  });

  it("stores the client's request beside the forwarded one only where Holdfast changed it", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const client = '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}';
    const forwarded =
      '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}';
    await writer.request("r", "s1", "chat", forwarded, client, []);
    await writer.request("r", "s2", "chat", forwarded, forwarded, []);
    const reader = new SnapshotReader(parts.get, manifests.get);
    const changed = await reader.step("r", "s1");
    expect(changed.request?.forwardedText).toBe(forwarded);
    expect(changed.request?.clientText).toBe(client);
    const same = await reader.step("r", "s2");
    expect(same.request?.clientText).toBeUndefined();
  });

  it("stores an answer, a text longer than a value in chunks, and reads it back", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const image = "A".repeat(CHUNK_CHARS * 2 + 17);
    const body = JSON.stringify({
      model: "m",
      messages: [
        {
          role: "user",
          content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${image}` } }],
        },
      ],
    });
    await writer.request("r", "s1", "chat", body, undefined, []);
    const events = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n';
    await writer.answer("r", "s1", 200, { events }, []);
    const step = await new SnapshotReader(parts.get, manifests.get).step("r", "s1");
    expect(step.request?.forwardedText).toBe(body);
    expect(step.answer?.text).toBe(events);
    expect(step.answer?.status).toBe(200);
    expect(step.missing).toEqual([]);
    // No stored value is longer than a chunk (and its one-character form).
    expect(Math.max(...[...parts.values.values()].map((v) => v.length))).toBeLessThanOrEqual(CHUNK_CHARS + 1);
  });

  it("writes a piece once, however many steps and runs name it", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "same" }] });
    for (let i = 0; i < 5; i++) await writer.request(`run-${i}`, "s", "chat", body, undefined, []);
    expect(parts.puts).toBe(parts.values.size);
  });

  it("says what is missing instead of giving back text that is not what was stored", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const bodies = conversation(3, 1_000);
    for (const [i, body] of bodies.entries())
      await writer.request("r", `s${i + 1}`, "chat", body, undefined, []);
    const reader = () => new SnapshotReader(parts.get, manifests.get);
    // A piece altered: its address no longer matches.
    const [victim] = [...parts.values.keys()].filter((k) => parts.values.get(k)!.includes("question 1"));
    parts.values.set(victim!, "=tampered");
    expect((await reader().step("r", "s3")).missing[0]).toMatch(/does not hash to its address/);
    // The step a later one builds on is gone.
    parts.values.set(victim!, `=${"question 1"}`);
    manifests.values.delete(manifestKey("r", "s1", "q"));
    expect((await reader().step("r", "s3")).missing).toEqual([
      "request: the earlier step s1 it builds on is not stored",
      "answer: not stored",
    ]);
    // A manifest filed under another run's key is not that run's.
    manifests.values.set(manifestKey("other", "s2", "q"), manifests.values.get(manifestKey("r", "s2", "q"))!);
    expect((await reader().step("other", "s2")).missing).toEqual([
      "request: the manifest under other.s2.q is not this step's",
      "answer: not stored",
    ]);
  });

  it("stores a step admitted twice (parked, then let in) once, and the steps after it read back", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const bodies = conversation(3, 1_000);
    await writer.request("r", "s1", "chat", bodies[0]!, undefined, []);
    await writer.request("r", "s1", "chat", bodies[0]!, undefined, []);
    await writer.request("r", "s2", "chat", bodies[1]!, undefined, []);
    await writer.request("r", "s2", "chat", bodies[1]!, undefined, []);
    await writer.request("r", "s3", "chat", bodies[2]!, undefined, []);
    const reader = new SnapshotReader(parts.get, manifests.get);
    for (const [i, body] of bodies.entries()) {
      expect((await reader.step("r", `s${i + 1}`)).request?.forwardedText).toBe(body);
    }
  });

  it("keeps a streaming conversation's client requests by content too, building on the last", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const bodies = conversation(100, 1_000);
    for (const [i, client] of bodies.entries()) {
      const asked = JSON.parse(client);
      const forwarded = JSON.stringify({ ...asked, stream: true, stream_options: { include_usage: true } });
      await writer.request("r", `s${i + 1}`, "chat", forwarded, client.replace("{", '{"stream":true,'), []);
    }
    const reader = new SnapshotReader(parts.get, manifests.get);
    const last = await reader.step("r", "s100");
    expect(last.request?.clientText).toBe(bodies[99]!.replace("{", '{"stream":true,'));
    const stored = [...parts.values.values(), ...manifests.values.values()].reduce(
      (sum, v) => sum + v.length,
      0,
    );
    // Two copies of every step, each growing with what the step adds.
    expect(stored / bodies[99]!.length).toBeLessThan(1.5);
  });

  it("cuts a body of countless tiny elements into a bounded number of pieces, each written once", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    const body = JSON.stringify({
      model: "m",
      messages: Array.from({ length: 20_000 }, () => ({ role: "" })),
    });
    await writer.request("r", "s1", "chat", body, undefined, []);
    const manifest = JSON.parse(manifests.values.get(manifestKey("r", "s1", "q"))!);
    expect(manifest.forwarded.parts.length).toBeLessThanOrEqual(MAX_PIECES);
    expect(parts.puts).toBe(parts.values.size);
    expect((await new SnapshotReader(parts.get, manifests.get).step("r", "s1")).request?.forwardedText).toBe(
      body,
    );
  });

  it("splits a long text into chunks that are each text of their own (never half a character)", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    // The message's piece starts '{"role":"user","content":"' (26 characters): the first
    // emoji's two halves fall either side of where a chunk ends.
    const content = `${"a".repeat(CHUNK_CHARS - 27)}😀😀😀`;
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content }] });
    await writer.request("r", "s1", "chat", body, undefined, []);
    const step = await new SnapshotReader(parts.get, manifests.get).step("r", "s1");
    expect(step.missing).toEqual(["answer: not stored"]);
    expect(step.request?.forwardedText).toBe(body);
  });

  it("records a request or answer past snapshots.max_bytes as not stored, with its size", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({
      putPart: parts.put,
      putManifest: manifests.put,
      patterns: [],
      maxBytes: 100,
    });
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "x".repeat(200) }] });
    await writer.request("r", "s1", "chat", body, undefined, []);
    await writer.answer("r", "s1", 200, { events: "", omitted: 5_000 }, []);
    const step = await new SnapshotReader(parts.get, manifests.get).step("r", "s1");
    expect(step.missing).toEqual([
      "request: not stored: larger than snapshots.max_bytes (100)",
      "answer: not stored: larger than snapshots.max_bytes (100)",
    ]);
    expect(JSON.parse(manifests.values.get(manifestKey("r", "s1", "a"))!).events.bytes).toBe(5_000);
  });

  it("refuses a piece whose chunks name it, instead of waiting on itself", async () => {
    const parts = bucket();
    const manifests = bucket();
    const writer = new SnapshotWriter({ putPart: parts.put, putManifest: manifests.put, patterns: [] });
    await writer.request("r", "s1", "chat", '{"model":"m","messages":[]}', undefined, []);
    const manifest = JSON.parse(manifests.values.get(manifestKey("r", "s1", "q"))!);
    const first = manifest.forwarded.parts[0];
    parts.values.set(first, `+${JSON.stringify([first])}`);
    const step = await new SnapshotReader(parts.get, manifests.get).step("r", "s1");
    expect(step.missing[0]).toMatch(/^request: the piece .* is in no form this version reads$/);
  });

  it("a failed write fails no call: it is counted, and the next request names every piece", async () => {
    const parts = bucket();
    const manifests = bucket();
    let failing = true;
    const failures: unknown[] = [];
    const writer = new SnapshotWriter({
      putPart: parts.put,
      putManifest: async (key, value) => {
        if (failing) throw new Error("NATS away");
        await manifests.put(key, value);
      },
      patterns: [],
      onFailure: (error) => failures.push(error),
    });
    const bodies = conversation(2);
    expect(await writer.request("r", "s1", "chat", bodies[0]!, undefined, [])).toBe(false);
    expect(writer.counts).toEqual({ stored: 0, failed: 1 });
    expect(failures).toHaveLength(1);
    failing = false;
    expect(await writer.request("r", "s2", "chat", bodies[1]!, undefined, [])).toBe(true);
    const step = await new SnapshotReader(parts.get, manifests.get).step("r", "s2");
    expect(step.request?.forwardedText).toBe(bodies[1]);
    expect(contentKey("x")).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});
