import { describe, expect, it } from "vitest";
import { SnapshotReader } from "./reader.js";
import { splitPieces } from "./split.js";
import { CHUNK_CHARS, contentKey, manifestKey } from "./store.js";
import { SnapshotWriter } from "./writer.js";

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
      values.set(key, value);
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
  it("cuts each element of the growing arrays into a piece, and gives the bytes back exactly", () => {
    const text =
      '{ "model" : "m",\n "messages": [ {"role":"user","content":"a \\" ] ,"} ,{"content":[1,2]} ],"tools":[],"n":1e3 }\n';
    const pieces = splitPieces(text);
    expect(pieces.join("")).toBe(text);
    expect(pieces).toEqual([
      '{ "model" : "m",\n "messages": [ ',
      '{"role":"user","content":"a \\" ] ,"} ',
      ',{"content":[1,2]} ',
      '],"tools":[],"n":1e3 }\n',
    ]);
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
    const bodies = conversation(3);
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
