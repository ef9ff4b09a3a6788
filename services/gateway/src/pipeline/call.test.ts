import { EventEmitter } from "node:events";
import type { RunCommand } from "@holdfast/events";
import { openAIChatShape } from "@holdfast/providers";
import { describe, expect, it } from "vitest";
import type { ResolvedRun } from "../identify/resolve.js";
import { handleCall, type PipelineDeps } from "./call.js";
import { finishDeps } from "./finish.js";
import { PipelineHooks } from "./hooks.js";
import type { Waiting } from "./wait.js";

describe("a client that leaves while its run is being identified", () => {
  it("is gone: its call is never sent to the provider with a live signal, nor recorded as answered", async () => {
    const raw = Object.assign(new EventEmitter(), {
      writableFinished: false,
      headersSent: false,
      destroyed: false,
      writableEnded: false,
      writeHead() {},
      write() {
        return true;
      },
      end() {},
    });
    const body = Buffer.from(
      JSON.stringify({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }] }),
    );
    const request = {
      body,
      raw: { rawHeaders: [] },
      headers: {},
      keyTenant: undefined,
      log: { warn() {}, error() {}, info() {} },
    };
    const reply = { raw, hijack() {} };
    const sends: boolean[] = [];
    const upstream = {
      origin: "http://provider.test",
      provider: "openai",
      request: async (opts: { signal: AbortSignal }) => {
        sends.push(opts.signal.aborted);
        if (opts.signal.aborted) throw new Error("aborted");
        const json = JSON.stringify({
          id: "x",
          model: "gpt-4o",
          choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        });
        const { Readable } = await import("node:stream");
        return {
          statusCode: 200,
          headers: { "content-type": "application/json" },
          body: Readable.from([Buffer.from(json)]),
        };
      },
    };
    const appended: RunCommand[] = [];
    const waiting = {} as Waiting;
    const hooks = new PipelineHooks(waiting);
    const deps = {
      ledger: {
        execute: async (_r: string, _l: unknown, command: RunCommand) => {
          appended.push(command);
          return {
            events: [{ payload: { $case: "stepStarted", value: { step: 1 } } }],
            state: { status: 1, open: new Map() },
          };
        },
        executeDurably: async (_r: string, _l: unknown, command: RunCommand) => {
          appended.push(command);
          return { events: [], state: {} };
        },
        cached: () => undefined,
        shared: () => false,
        sendAppends() {},
      },
      upstreams: { forShape: () => upstream },
      pricer: { price: () => ({ known: true, nanoUsd: 1 }), priceUnknown: () => 1 },
      instanceId: "gw#1",
      newId: () => "step-1",
      resolveRun: async () => {
        // The client hangs up while the run is looked up.
        raw.destroyed = true;
        raw.emit("close");
        await new Promise((r) => setTimeout(r, 5));
        return {
          runId: "run-1",
          tag: "",
          tenant: "",
          promptHash: "",
          identity: {},
        } as unknown as ResolvedRun;
      },
      responses: { remember: async () => {} },
      limitsFor: () => ({}),
      rules: () => [],
      costControlled: () => false,
      onTrip: "hold",
      waiting,
      logConnected: () => true,
      onRecordError() {},
      maxJsonDepth: 64,
      maxAnswerBytes: 1 << 20,
      maxEventBytes: 1 << 20,
    } as unknown as PipelineDeps;
    await handleCall(openAIChatShape, hooks, deps, finishDeps(deps, hooks), request as never, reply as never);
    const types = appended.map((c) => c.type);
    // A gone client's call should never reach the provider with a live signal, nor be recorded as answered.
    expect(sends.filter((aborted) => !aborted)).toEqual([]);
    expect(types).not.toContain("CompleteStep");
  });
});
