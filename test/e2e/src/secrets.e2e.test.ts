import { maskApiKey } from "@holdfast/fake-provider";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

const GOOD_KEY = "sk-proj-SECRETgood7Qx9Zr2Lw4Mv8Nt6Kp3Hy5";
// The fake provider rejects keys starting with sk-bad and echoes a masked form, as OpenAI does.
const BAD_KEY = "sk-bad-SECRETbadJ1m2n3b4v5c6x7z8a9s0d";
const ANTHROPIC_STYLE_KEY = "sk-ant-api03-SECRETxapiK3yV4lue9988776655";

/** Every form of a key that must not be found: the key, its distinctive middle, the provider's masked echo. */
function forms(key: string): string[] {
  return [key, key.slice(8, 24), maskApiKey(key)];
}

describe("credentials are never stored, logged or put in an event", () => {
  it("keeps keys out of JetStream, ClickHouse and the logs while still forwarding them", async () => {
    const good = new OpenAI({
      apiKey: GOOD_KEY,
      baseURL: stack.gatewayUrl,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "secret-run", "x-api-key": ANTHROPIC_STYLE_KEY },
    });
    await good.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    const stream = await good.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "stream please" }],
    });
    for await (const _ of stream) {
      // drain
    }
    const bad = new OpenAI({
      apiKey: BAD_KEY,
      baseURL: stack.gatewayUrl,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "secret-run" },
    });
    const error = (await bad.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    // The client gets the provider's answer untouched, masked key included: it is theirs.
    expect(error.status).toBe(401);
    expect(error.message).toContain(maskApiKey(BAD_KEY));

    const run = await stack.settled("secret-run", 3);
    expect(run.steps.map((s) => s.status)).toEqual(["completed", "completed", "failed"]);
    // The keys did reach the provider.
    expect(stack.provider.requests.map((r) => r.headers.authorization)).toContain(`Bearer ${GOOD_KEY}`);
    expect(stack.provider.requests.map((r) => r.headers["x-api-key"])).toContain(ANTHROPIC_STYLE_KEY);

    // JetStream: every message of the deployment, data and headers, byte for byte.
    const log: string[] = [];
    for await (const message of stack.bus.allMessages()) {
      log.push(Buffer.from(message.data).toString("latin1"), message.headers, message.subject);
    }
    const kv = await stack.bus.keyValue("FINGERPRINTS");
    for await (const key of await kv.keys()) log.push(key, (await kv.get(key))?.value ?? "");
    const everything = {
      jetstream: log.join("\n"),
      clickhouse: JSON.stringify([
        ...(await stack.sql("SELECT * FROM events")),
        ...(await stack.sql("SELECT * FROM steps")),
      ]),
      logs: stack.logs(),
    };
    expect(everything.jetstream).toContain("secret-run");
    for (const [where, text] of Object.entries(everything)) {
      for (const secret of [...forms(GOOD_KEY), ...forms(BAD_KEY), ...forms(ANTHROPIC_STYLE_KEY)]) {
        expect(text.includes(secret), `${secret} found in ${where}`).toBe(false);
      }
    }
  });
});
