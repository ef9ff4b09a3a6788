import type { ServerResponse } from "node:http";
import { openAIChatShape, prefixHash, type RequestView } from "@holdfast/providers";
import type { FastifyRequest } from "fastify";
import { describe, expect, it } from "vitest";
import type { ResolvedRun } from "../identify/resolve.js";
import { RequestBody } from "../pipeline/body.js";
import { CallState } from "../pipeline/state.js";
import type { Upstream } from "../upstream/upstream.js";
import { Compacting, type CompactingOptions } from "./compacting.js";

function callOf(body: Record<string, unknown>): CallState {
  const raw = Buffer.from(JSON.stringify(body));
  const read = openAIChatShape.readRequest(body);
  if (!read.ok) throw new Error(read.error.message);
  const view: RequestView = read.request;
  const run = { runId: "run-1", tag: "", tenant: "", promptHash: "", identity: {} } as unknown as ResolvedRun;
  const response = { on: () => {}, headersSent: false, destroyed: false, writableEnded: false };
  return new CallState(
    openAIChatShape,
    view,
    run,
    { headers: {}, log: { warn() {}, error() {}, info() {} } } as unknown as FastifyRequest,
    "step-1",
    new RequestBody(openAIChatShape, view, body, raw),
    ["sk-client"],
    { origin: "http://provider.test", provider: "openai" } as Upstream,
    response as unknown as ServerResponse,
    performance.now(),
    raw.length,
  );
}

/** Prediction's compaction for a run whose log recorded these compactions. */
function compactingWith(compactions: unknown[]): Compacting {
  return new Compacting({
    config: { compaction: "off", compaction_keep: 4, summary_model: "" },
    ledger: { cached: () => ({ compactions, compactNext: 0 }) },
  } as unknown as CompactingOptions);
}

describe("a run's recorded compactions, applied to its next call", () => {
  it("are applied once per call: an agent that repeats the turns they dropped keeps its later turns", async () => {
    const dropped = [
      { role: "user", content: "status?" },
      { role: "assistant", content: "still running" },
    ];
    const compacting = compactingWith([
      { prefixHash: prefixHash(dropped), prefixMessages: 2, replacementJson: "[]" },
    ]);
    const call = callOf({
      model: "gpt-4o",
      messages: [{ role: "system", content: "poll the job" }, ...dropped, ...dropped, ...dropped],
    });
    const first = await compacting.asRecorded(call);
    expect(first?.kind).toBe("rewrite");
    call.rewrite(first!.body);
    // Asked again for the call as it now is (the pipeline does after a rewrite): it goes as it is.
    expect(await compacting.asRecorded(call)).toBeUndefined();
    expect((call.body.value as { messages: unknown[] }).messages).toHaveLength(5);
  });
});
