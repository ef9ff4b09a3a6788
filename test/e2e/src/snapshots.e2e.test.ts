import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Bus } from "@holdfast/bus";
import {
  type BundleRecord,
  bundleRecords,
  bundleRun,
  bundleStepShown,
  diffRuns,
  rawSide,
  readBundle,
  readStep,
  renderDiff,
  renderRun,
  stepJson,
} from "@holdfast/cli";
import { patternDigest } from "@holdfast/snapshots";
import { makeTempDir } from "@holdfast/test-harness";
import type OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// What an agent puts in its conversation that must never be stored: a key of its own (not
// the one it calls with), and what the operator's redact.patterns name.
const PASTED_KEY = "sk-proj-PASTEDkey7Qx9Zr2Lw4Mv8Nt6Kp3Hy5Ab";
const SSN = "123-45-6789";

let stack: Stack;
let reader: Bus;
beforeAll(async () => {
  stack = await startStack({ config: { redact: { patterns: ["\\b\\d{3}-\\d{2}-\\d{4}\\b"] } } });
  // The operator's read credential: `holdfast show` reads snapshots with it.
  reader = await stack.connect("reader");
});
afterAll(async () => {
  await reader?.close();
  await stack?.close();
});

/** Step n of a run as `holdfast show <run> <n>` reads it. */
async function shown(runId: string, n: number) {
  return readStep(reader, await stack.run(runId), n);
}

/** What the provider received and sent from the `from`th request on (each test's calls are its own). */
function exchangesSince(from: number) {
  return stack.provider.requests.slice(from);
}

describe("snapshots: every step's exact request and answer, by content", () => {
  it("gives back step 1 and step 200 of a 200-step conversation byte for byte, as the provider got them", async () => {
    const from = stack.provider.requests.length;
    const runId = "snap-long";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: "system", content: `You are the agent of ${runId}.` },
    ];
    for (let i = 1; i <= 200; i++) {
      messages.push({ role: "user", content: `Step ${i}: look at record ${i * 7} and report.` });
      const answer = await client.chat.completions.create({ model: "gpt-4o-mini", messages, max_tokens: 20 });
      messages.push({ role: "assistant", content: answer.choices[0]?.message.content ?? "" });
    }
    await stack.settled(runId, 200);
    const sent = exchangesSince(from);
    expect(sent).toHaveLength(200);
    for (const n of [1, 2, 65, 66, 200]) {
      const step = await shown(runId, n);
      expect(step.snapshot.missing).toEqual([]);
      expect(rawSide(step, "request")).toBe(sent[n - 1]!.rawBody);
      expect(rawSide(step, "answer")).toBe(sent[n - 1]!.responseBody);
      // Nothing was changed on the way: no second copy of the request.
      expect(step.snapshot.request?.clientText).toBeUndefined();
    }
  });

  it("keeps a stream's events as received, and the client's request beside the one Holdfast changed", async () => {
    const from = stack.provider.requests.length;
    const runId = "snap-stream";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "Stream me an answer." }],
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    await stack.settled(runId, 1);
    const [exchange] = exchangesSince(from);
    const step = await shown(runId, 1);
    expect(step.snapshot.missing).toEqual([]);
    expect(rawSide(step, "answer")).toBe(exchange!.responseBody);
    // Holdfast asks for the stream's usage: the client's own request is kept too.
    expect(rawSide(step, "request")).toBe(exchange!.rawBody);
    expect(JSON.parse(rawSide(step, "client"))).toEqual({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "Stream me an answer." }],
    });
    const json = stepJson(runId, step) as { answer: { events: { data: unknown }[] } };
    const streamed = json.answer.events
      .map(
        (e) =>
          (e.data as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? "",
      )
      .join("");
    expect(streamed).toBe(text);
    const assembled = (
      stepJson(runId, step) as { answer: { assembled: { text: string; outputTokens: number } } }
    ).answer.assembled;
    expect(assembled.text).toBe(text);
    expect(assembled.outputTokens).toBeGreaterThan(0);
  });

  it("stores Anthropic Messages and OpenAI Responses steps, streamed and not", async () => {
    const from = stack.provider.requests.length;
    const runId = "snap-shapes";
    const anthropic = stack.anthropic({ headers: { "X-Holdfast-Run": runId } });
    const texts: string[] = [];
    const whole = await anthropic.messages.create({
      model: "claude-3-5-haiku-latest",
      max_tokens: 50,
      messages: [{ role: "user", content: "Hello from Messages." }],
    });
    texts.push(whole.content.map((b) => (b.type === "text" ? b.text : "")).join(""));
    const events = await anthropic.messages.create({
      model: "claude-3-5-haiku-latest",
      max_tokens: 50,
      stream: true,
      messages: [{ role: "user", content: "Stream from Messages." }],
    });
    let streamedText = "";
    for await (const event of events) {
      if (event.type === "content_block_delta" && event.delta.type === "text_delta")
        streamedText += event.delta.text;
    }
    texts.push(streamedText);
    const openai = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const response = await openai.responses.create({ model: "gpt-4o-mini", input: "Hello from Responses." });
    texts.push(response.output_text);
    await stack.settled(runId, 3);
    const sent = exchangesSince(from);
    expect(sent).toHaveLength(3);
    for (const n of [1, 2, 3]) {
      const step = await shown(runId, n);
      expect(step.snapshot.missing).toEqual([]);
      expect(rawSide(step, "request")).toBe(sent[n - 1]!.rawBody);
      expect(rawSide(step, "answer")).toBe(sent[n - 1]!.responseBody);
      // Put together as the SDK put it together.
      const json = stepJson(runId, step) as { answer: { assembled: { text: string } } };
      expect(json.answer.assembled.text).toBe(texts[n - 1]);
      expect(texts[n - 1]!.length).toBeGreaterThan(0);
    }
  });

  it("diffs two runs step by step: what each model said, its tool calls and its cost", async () => {
    const tools = [
      { type: "function" as const, function: { name: "lookup", parameters: { type: "object" } } },
    ];
    const conversation = async (runId: string, second: string) => {
      const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
      await client.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "The same first question." }],
      });
      await client.chat.completions.create({
        model: "gpt-4o-mini",
        tools,
        messages: [{ role: "user", content: second }],
      });
      await stack.settled(runId, 2);
    };
    await conversation("snap-diff-a", '[[call:lookup {"q":"cats","page":1}]]');
    await conversation("snap-diff-b", '[[call:lookup {"page":1, "q":"dogs"}]]');
    const diffs = await diffRuns(reader, "snap-diff-a", "snap-diff-b");
    expect(diffs.map((d) => d.step)).toEqual([1, 2]);
    // The same question, the same answer.
    expect(diffs[0]!.text.every((t) => t.op === " ")).toBe(true);
    expect(diffs[0]!.a?.model).toBe(diffs[0]!.b?.model);
    // The tool calls differ in what they ask for, not in how their arguments are spelt.
    expect(diffs[1]!.a?.toolCalls).toEqual([{ name: "lookup", arguments: '{"q":"cats","page":1}' }]);
    expect(diffs[1]!.toolCallsEqual).toBe(false);
    const text = renderDiff("snap-diff-a", "snap-diff-b", diffs);
    expect(text).toContain('  tool calls  - lookup({"q":"cats","page":1})');
    expect(text).toContain("  text        same");
    // One step of each: the same call, its arguments spelt another way, is the same call.
    await conversation("snap-diff-c", '[[call:lookup {"page":1, "q":"cats"}]]');
    const one = await diffRuns(reader, "snap-diff-a", "snap-diff-c", 2);
    expect(one).toHaveLength(1);
    expect(one[0]!.b?.toolCalls[0]?.arguments).not.toBe(one[0]!.a?.toolCalls[0]?.arguments);
    expect(one[0]!.toolCallsEqual).toBe(true);
  });

  it("stores what a conversation held redacted, and no key in any byte of the buckets", async () => {
    const from = stack.provider.requests.length;
    const runId = "snap-redact";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const content = `My SSN is ${SSN} and my other key is ${PASTED_KEY}.`;
    await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content }] });
    // The fake answers by quoting the question: streamed, the key comes back a few
    // characters an event, in no one event whole.
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content }],
    });
    let echoed = "";
    for await (const chunk of stream) echoed += chunk.choices[0]?.delta.content ?? "";
    expect(echoed).toContain(PASTED_KEY);
    await stack.settled(runId, 2);
    // The traffic is never changed: the provider got what the agent sent.
    expect(exchangesSince(from)[0]!.rawBody).toContain(content);
    const step = await shown(runId, 1);
    const request = rawSide(step, "request");
    expect(request).toContain("My SSN is [redacted] and my other key is [redacted].");
    expect(step.snapshot.request?.redacted).toBeGreaterThan(0);
    // Every value of both buckets, as the admin reads them.
    for (const bucket of ["SNAPSHOT_PARTS", "SNAPSHOT_STEPS"] as const) {
      const kv = await stack.bus.keyValue(bucket);
      const keys = await kv.keys();
      expect(keys.length).toBeGreaterThan(0);
      for (const key of keys) {
        const value = (await kv.get(key))?.value ?? "";
        for (const secret of [PASTED_KEY, PASTED_KEY.slice(8, 24), SSN, "sk-test-"]) {
          expect(value).not.toContain(secret);
        }
      }
    }
  });

  it("exports a run to one bundle (JSON or JSONL) that shows the same run and the same bytes with no stack", async () => {
    const from = stack.provider.requests.length;
    const runId = "snap-export";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [];
    for (let i = 1; i <= 3; i++) {
      messages.push({ role: "user", content: `Export step ${i}, SSN ${SSN}.` });
      const answer = await client.chat.completions.create({ model: "gpt-4o-mini", messages });
      messages.push({ role: "assistant", content: answer.choices[0]?.message.content ?? "" });
    }
    await stack.settled(runId, 3);
    const records: BundleRecord[] = [];
    for await (const record of bundleRecords(reader, runId, ["\\b\\d{3}-\\d{2}-\\d{4}\\b"]))
      records.push(record);
    expect(records.map((r) => r.kind).filter((k, i, all) => all.indexOf(k) === i)).toEqual([
      "header",
      "run",
      "event",
      "step",
      "redaction",
    ]);
    await using dir = await makeTempDir("bundle");
    {
      const jsonl = join(dir.path, "run.jsonl");
      writeFileSync(jsonl, records.map((r) => `${JSON.stringify(r)}\n`).join(""));
      const bundle = readBundle(jsonl);
      // The same document as one JSON file.
      const json = join(dir.path, "run.json");
      writeFileSync(json, JSON.stringify(bundle, null, 2));
      expect(readBundle(json)).toEqual(bundle);
      // Folded again from its events: the run as the log shows it.
      const { view } = bundleRun(bundle);
      const live = await stack.run(runId);
      expect(renderRun(view, 0)).toBe(renderRun(live, 0));
      const sent = exchangesSince(from);
      for (const n of [1, 2, 3]) {
        const step = bundleStepShown(bundle, view, n);
        // Redacted as stored: the SSN is not in the bundle, the rest is byte for byte.
        expect(rawSide(step, "request")).toBe(sent[n - 1]!.rawBody.replaceAll(SSN, "[redacted]"));
        // The fake answers by quoting the question: its answer is redacted alike.
        expect(rawSide(step, "answer")).toBe(sent[n - 1]!.responseBody.replaceAll(SSN, "[redacted]"));
      }
      expect(bundle.redaction.patterns).toEqual([
        { sha256: patternDigest("\\b\\d{3}-\\d{2}-\\d{4}\\b"), inExportingConfig: true },
      ]);
      expect(JSON.stringify(bundle)).not.toContain(SSN);
      expect(JSON.stringify(bundle)).not.toContain("\\d{3}");
    }
  });

  it("says a step is missing rather than showing what is not there", async () => {
    const runId = "snap-missing";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "one" }],
    });
    await stack.settled(runId, 1);
    const view = await stack.run(runId);
    const steps = await stack.bus.keyValue("SNAPSHOT_STEPS");
    const key = (await steps.keys()).find((k) => k.includes(view.steps[0]!.stepId) && k.endsWith(".a"));
    await steps.delete(key!);
    const step = await shown(runId, 1);
    expect(step.snapshot.missing).toEqual(["answer: not stored"]);
    expect(() => rawSide(step, "answer")).toThrow(/answer is not stored \(answer: not stored\)/);
    await expect(shown(runId, 2)).rejects.toThrow(/has no step 2 \(it has 1/);
  });
});
