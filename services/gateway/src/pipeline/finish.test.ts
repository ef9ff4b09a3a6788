import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { CompleteStep, FailStep } from "@holdfast/events";
import {
  AnswerTooLargeError,
  type ApiShape,
  createPricer,
  NO_USAGE,
  openAIChatShape,
  readProviderError,
  type StreamSoFar,
} from "@holdfast/providers";
import type { FastifyBaseLogger } from "fastify";
import { describe, expect, it } from "vitest";
import {
  RunStoppedGatewayError,
  ShuttingDownError,
  ToolCallDeniedError,
  UnpricedModelError,
} from "../errors.js";
import { cancelled } from "./admit.js";
import {
  answerTooLarge,
  asGatewayError,
  clientAborted,
  type Ending,
  type FinishDeps,
  type Finishing,
  finish,
  invalidAnswer,
  providerRefused,
  refusalReply,
  refused,
  tooLarge,
  unreachable,
  upstreamReset,
} from "./finish.js";
import { type Amendment, type Answer, type Cancellation, CONTINUE } from "./hooks.js";
import type { ClientSide } from "./writer.js";

/** The client's side as finish meets it: what it was answered, and whether it is still there. */
class Client implements ClientSide {
  readonly answers: Array<{ status: number; body: string }> = [];
  streamed: StreamSoFar = { events: 0, last: undefined };
  headersSent = false;
  gone = false;

  /** A stream whose 200 is out (a held streaming call, or one being relayed). */
  streaming(): this {
    this.headersSent = true;
    return this;
  }

  send(status: number, _headers: Record<string, string | string[]>, body: Buffer | string): void {
    if (this.gone) return;
    this.headersSent = true;
    this.answers.push({ status, body: String(body) });
  }

  end(text = ""): void {
    if (this.gone) return;
    this.answers.push({ status: 200, body: text });
  }
}

const silent = { warn: () => {}, error: () => {}, info: () => {} } as unknown as FastifyBaseLogger;

interface TestCall extends Finishing {
  readonly writer: Client;
}

function callOf(client: Client, shape: ApiShape = openAIChatShape): TestCall {
  return {
    shape,
    run: { runId: "run-1", tag: "" },
    labels: { tag: "", tenant: "" },
    stepId: "step-1",
    writer: client,
    request: { log: silent },
    secrets: ["sk-secret"],
    model: "gpt-4o-mini",
    upstream: { provider: "openai" },
    estimatedInputTokens: 10,
    t0: performance.now(),
    firstByteMs: 0,
    finished: false,
  };
}

/** The pipeline's parts finish talks to, counting what it recorded and told. */
function partsOf(deliver: Amendment = CONTINUE) {
  const recorded: Array<CompleteStep | FailStep> = [];
  let outcomes = 0;
  let ended = 0;
  let asked = 0;
  const deps: FinishDeps<TestCall> = {
    record: (_call, command) => recorded.push(command),
    pricer: createPricer(),
    cached: () => undefined,
    costControlled: () => false,
    shared: () => false,
    sendAppends: () => {},
    hooks: {
      beforeDeliver: { length: 1 },
      outcome: () => {
        outcomes += 1;
      },
      deliver: async () => {
        asked += 1;
        return deliver;
      },
      ended: () => {
        ended += 1;
      },
    },
  };
  return {
    deps,
    recorded,
    counts: () => ({ outcomes, ended, asked }),
  };
}

const ANSWER: Answer = {
  summary: {
    model: "gpt-4o-mini",
    responseId: "chatcmpl-1",
    finishReason: "stop",
    toolCalls: [],
    usage: { ...NO_USAGE, reported: true, inputTokens: 10, outputTokens: 2 },
  },
  toolCallsSignature: "",
};
const cancel = (kind: Cancellation["kind"]): Pick<{ cancelled: Cancellation }, "cancelled"> => ({
  cancelled: kind === "gave_up" ? { kind, error: new ShuttingDownError() } : { kind },
});
const refusedBy429 = readProviderError(429, '{"error":{"message":"slow down","type":"rate_limit"}}', []);
const tooBig = new AnswerTooLargeError("answer", 1_000, 2_000);

/**
 * Every way a call ends, as its stages hand it to finish: whether a step was started (so
 * its outcome is recorded), whether the client is still there to answer, and the status it gets.
 */
const ENDINGS: Array<{
  name: string;
  client: () => Client;
  ending: (client: Client) => Ending;
  deliver?: Amendment;
  recorded: "CompleteStep" | "FailStep" | undefined;
  status: number | undefined;
}> = [
  {
    name: "answered (buffered)",
    client: () => new Client(),
    ending: () => ({
      outcome: { kind: "completed", status: 200, answer: ANSWER, seenOutputTokens: 2 },
      reply: { kind: "send", status: 200, headers: {}, body: "{}" },
    }),
    recorded: "CompleteStep",
    status: 200,
  },
  {
    name: "answered (streamed)",
    client: () => new Client().streaming(),
    ending: () => ({
      outcome: { kind: "completed", status: 200, answer: ANSWER, seenOutputTokens: 2 },
      reply: { kind: "end", tail: "data: [DONE]\n\n" },
    }),
    recorded: "CompleteStep",
    status: 200,
  },
  {
    name: "denied before delivery (the tool-call gate)",
    client: () => new Client(),
    deliver: { kind: "refuse", error: new ToolCallDeniedError("denied") },
    ending: () => ({
      outcome: { kind: "completed", status: 200, answer: ANSWER, seenOutputTokens: 2 },
      reply: { kind: "send", status: 200, headers: {}, body: "{}" },
    }),
    recorded: "CompleteStep",
    status: 403,
  },
  {
    name: "provider error",
    client: () => new Client(),
    ending: (client) => ({
      outcome: providerRefused(500, readProviderError(500, "oops", []), "gpt-4o-mini"),
      reply: refusalReply(
        { writer: client },
        readProviderError(500, "oops", []),
        500,
        {},
        Buffer.from("oops"),
      ),
    }),
    recorded: "FailStep",
    status: 500,
  },
  {
    name: "provider error on a held stream (its 200 already out)",
    client: () => new Client().streaming(),
    ending: (client) => ({
      outcome: providerRefused(500, readProviderError(500, "oops", []), "gpt-4o-mini"),
      reply: refusalReply(
        { writer: client },
        readProviderError(500, "oops", []),
        500,
        {},
        Buffer.from("oops"),
      ),
    }),
    recorded: "FailStep",
    status: 200,
  },
  {
    name: "provider unreachable",
    client: () => new Client(),
    ending: () =>
      unreachable(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }), "m"),
    recorded: "FailStep",
    status: 502,
  },
  {
    name: "reset mid-stream",
    client: () => new Client().streaming(),
    ending: () => ({
      outcome: upstreamReset("broke", NO_USAGE, "m", 200, "cut", 3),
      reply: {
        kind: "stream_error",
        message: "broke",
        fields: { type: "server_error", code: "upstream_reset" },
      },
    }),
    recorded: "FailStep",
    status: 200,
  },
  {
    name: "answer past its bound",
    client: () => new Client(),
    ending: () => ({
      outcome: tooLarge(tooBig, NO_USAGE, "m", 200, "unreadable", 500),
      reply: { kind: "error", error: answerTooLarge(tooBig) },
    }),
    recorded: "FailStep",
    status: 502,
  },
  {
    name: "an answer that is not its API's",
    client: () => new Client(),
    ending: () => ({
      outcome: invalidAnswer(200, "m", 1),
      reply: { kind: "send", status: 200, headers: {}, body: "not json" },
    }),
    recorded: "FailStep",
    status: 200,
  },
  {
    name: "client gone mid-answer",
    client: () => Object.assign(new Client().streaming(), { gone: true }),
    ending: () => ({ outcome: clientAborted(NO_USAGE, "m"), reply: { kind: "none" } }),
    recorded: "FailStep",
    status: undefined,
  },
  {
    name: "client gone before its start (parked, or waiting)",
    client: () => Object.assign(new Client(), { gone: true }),
    ending: () => cancelled(cancel("client_gone")),
    recorded: undefined,
    status: undefined,
  },
  {
    name: "stopped",
    client: () => new Client(),
    ending: () => refused(new RunStoppedGatewayError("run-1")),
    recorded: undefined,
    status: 409,
  },
  {
    name: "stopped while parked (its stream already 200)",
    client: () => new Client().streaming(),
    ending: () => refused(new RunStoppedGatewayError("run-1")),
    recorded: undefined,
    status: 200,
  },
  {
    name: "denied before forward (a feature refused it)",
    client: () => new Client(),
    ending: () => refused(new UnpricedModelError("m")),
    recorded: undefined,
    status: 400,
  },
  {
    name: "parked, then dropped (a feature gave up on it)",
    client: () => new Client(),
    ending: () => cancelled(cancel("gave_up")),
    recorded: undefined,
    status: 503,
  },
  {
    name: "gateway shutdown while it waited",
    client: () => new Client(),
    ending: () => cancelled(cancel("shutdown")),
    recorded: undefined,
    status: 503,
  },
  {
    name: "give-up after retries (the provider's 429 as it came)",
    client: () => new Client(),
    ending: (client) => ({
      outcome: providerRefused(429, refusedBy429, "m"),
      reply: refusalReply({ writer: client }, refusedBy429, 429, {}, Buffer.from("{}")),
    }),
    recorded: "FailStep",
    status: 429,
  },
  {
    name: "an unexpected failure of the gateway",
    client: () => new Client(),
    ending: (client) => refused(asGatewayError(new Error("boom"), callOf(client))),
    recorded: undefined,
    status: 500,
  },
];

describe("finish: the one end of every call", () => {
  it.each(ENDINGS)("$name: records at most one outcome and answers at most once", async (row) => {
    const client = row.client();
    const call = callOf(client);
    const parts = partsOf(row.deliver);
    const ending = row.ending(client);
    await finish(call, ending, parts.deps);
    // Finishing again (a stage that would end the call twice) changes nothing.
    await finish(call, ending, parts.deps);

    expect(parts.recorded.map((command) => command.type)).toEqual(
      row.recorded === undefined ? [] : [row.recorded],
    );
    expect(parts.counts().outcomes).toBe(row.recorded === undefined ? 0 : 1);
    expect(parts.counts().ended).toBe(1);
    // The decision before delivery is asked of a whole answer only.
    expect(parts.counts().asked).toBe(row.recorded === "CompleteStep" ? 1 : 0);
    expect(client.answers.map((answer) => answer.status)).toEqual(
      row.status === undefined ? [] : [row.status],
    );
    for (const command of parts.recorded) expect(JSON.stringify(command)).not.toContain("sk-secret");
  });

  it("a feature whose settlement throws keeps neither the outcome from the log nor the answer from the client", async () => {
    const client = new Client();
    const parts = partsOf();
    const throwing: FinishDeps<TestCall> = {
      ...parts.deps,
      hooks: {
        ...parts.deps.hooks,
        outcome: () => {
          throw new Error("a budget's settlement failed");
        },
      },
    };
    await finish(callOf(client), ENDINGS[0]!.ending(client), throwing);
    expect(parts.recorded.map((command) => command.type)).toEqual(["CompleteStep"]);
    expect(client.answers.map((answer) => answer.status)).toEqual([200]);
  });

  it("a held stream's error ends the stream with the API's error event, after what the client has", async () => {
    const client = new Client().streaming();
    await finish(callOf(client), refused(new ShuttingDownError()), partsOf().deps);
    expect(client.answers).toHaveLength(1);
    expect(client.answers[0]!.body).toContain("shutting_down");
  });

  it("no other stage of the call path records an outcome or answers the client itself", () => {
    const dir = fileURLToPath(new URL(".", import.meta.url));
    const stages = readdirSync(dir).filter(
      (file) =>
        file.endsWith(".ts") &&
        !file.endsWith(".test.ts") &&
        // finish answers; the writer is the client's side; outcome.ts is how finish records.
        !["finish.ts", "writer.ts", "outcome.ts"].includes(file),
    );
    expect(stages).toEqual(expect.arrayContaining(["admit.ts", "forward.ts", "relay.ts", "call.ts"]));
    for (const file of stages) {
      const source = readFileSync(`${dir}${file}`, "utf8");
      expect({ file, answers: /writer\.(send|end)\(|\.end\(held\)|answerError\(/.test(source) }).toEqual({
        file,
        answers: false,
      });
      expect({
        file,
        records:
          /recordOutcome\(|executeDurably\(call\.run\.runId, call\.labels, \{\s*type: "(Complete|Fail)Step"/.test(
            source,
          ),
      }).toEqual({
        file,
        records: false,
      });
    }
  });
});
