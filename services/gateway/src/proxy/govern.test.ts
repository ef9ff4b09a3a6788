import Fastify, { type FastifyRequest } from "fastify";
import { describe, expect, it } from "vitest";
import type { IdentifyRules } from "../identify/identify.js";
import { callsModelUnmetered, type NamedRun, passthroughRunNamer, spendsNothing } from "./govern.js";

describe("which passed-through calls can spend", () => {
  it.each([
    ["GET", "/v1/models"],
    ["GET", "/v1/batches/batch_1"],
    ["HEAD", "/v1/files/file-1"],
    ["DELETE", "/v1/messages/batches/msgbatch_1"],
    ["POST", "/v1/batches/batch_1/cancel"],
    ["POST", "/v1/messages/batches/msgbatch_1/cancel"],
    ["POST", "/v1/messages/count_tokens"],
    ["POST", "/v1/responses/input_tokens"],
    ["POST", "/v1/responses/resp_1/cancel"],
    ["POST", "/v1/fine_tuning/jobs/ftjob_1/cancel"],
    ["POST", "/v1/threads/thread_1/runs/run_1/cancel"],
    ["POST", "/v1/vector_stores/vs_1/file_batches/vsfb_1/cancel"],
  ])("%s %s spends nothing: it goes on whatever its run, and deny_models lets it through", (method, path) => {
    expect(spendsNothing(method, path)).toBe(true);
    expect(callsModelUnmetered(method, path)).toBe(false);
  });

  it.each([
    ["POST", "/v1/completions"],
    ["POST", "/v1/embeddings"],
    ["POST", "/v1/batches"],
    ["POST", "/v1/responses/compact"],
    ["POST", "/v1/images/generations"],
    ["POST", "/v1/audio/speech"],
    ["POST", "/v1/threads/thread_1/runs"],
    ["POST", "/v1/complete"],
    ["POST", "/v1/messages/batches"],
    ["PUT", "/v1/fine_tuning/jobs"],
    ["POST", "/v1/images/cancel"],
    ["POST", "/v1/embeddings/count_tokens"],
    ["POST", "/v1/audio/speech/x/cancel"],
  ])("%s %s runs a model unmetered: deny_models refuses it", (method, path) => {
    expect(spendsNothing(method, path)).toBe(false);
    expect(callsModelUnmetered(method, path)).toBe(true);
  });

  it.each([
    ["POST", "/v1/files"],
    ["POST", "/v1/completionsx"],
    ["POST", "/v1/messages/batchesx"],
  ])("%s %s runs no model: deny_models lets it through (its run still governs it)", (method, path) => {
    expect(spendsNothing(method, path)).toBe(false);
    expect(callsModelUnmetered(method, path)).toBe(false);
  });
});

const RULES: IdentifyRules = {
  headers: ["X-Holdfast-Run"],
  bodyFields: ["metadata.holdfast_run"],
  traceparent: true,
  tagHeaders: ["X-Holdfast-Tag"],
  tagFields: [],
  tenantHeaders: ["X-Holdfast-Tenant"],
};

/** The run a real Fastify request names, as the passthrough route reads it. */
async function named(
  inject: { headers?: Record<string, string>; payload?: string; contentType?: string },
  rules: IdentifyRules = RULES,
): Promise<NamedRun | undefined | Error> {
  const runOf = passthroughRunNamer(rules);
  const app = Fastify();
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));
  let seen: NamedRun | undefined | Error;
  app.post("/v1/*", async (request: FastifyRequest) => {
    try {
      seen = runOf(request);
    } catch (error) {
      seen = error as Error;
    }
    return {};
  });
  await app.inject({
    method: "POST",
    url: "/v1/completions",
    headers: { "content-type": inject.contentType ?? "application/json", ...inject.headers },
    payload: inject.payload ?? "{}",
  });
  await app.close();
  return seen;
}

describe("the run a passed-through call names, by the metered routes' rules", () => {
  it("names none without a run header, a traceparent or a body field", async () => {
    expect(await named({ payload: JSON.stringify({ model: "m", prompt: "hi" }) })).toBeUndefined();
  });

  it("a run header, with its tag and tenant", async () => {
    expect(
      await named({
        headers: { "x-holdfast-run": "agent-1", "x-holdfast-tag": "nightly", "x-holdfast-tenant": "acme" },
      }),
    ).toEqual({ runId: "acme/agent-1", tag: "nightly", tenant: "acme" });
  });

  it("a body field", async () => {
    expect(
      await named({ payload: JSON.stringify({ metadata: { holdfast_run: "agent-2" }, prompt: "hi" }) }),
    ).toMatchObject({ runId: "agent-2" });
  });

  it("a traceparent: its trace id", async () => {
    const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const run = await named({ headers: { traceparent: `00-${trace}-00f067aa0ba902b7-01` } });
    expect(run).toMatchObject({ runId: expect.stringContaining(trace) });
  });

  it("a body that is not JSON names no run by its fields (the provider says what is wrong)", async () => {
    expect(
      await named({ payload: '{"metadata": {"holdfast_run": "agent-3"', contentType: "application/json" }),
    ).toBeUndefined();
    expect(await named({ payload: "holdfast_run=agent-3", contentType: "text/plain" })).toBeUndefined();
  });

  it("a run id that cannot be one is the client's error, as on the metered routes", async () => {
    const result = await named({ headers: { "x-holdfast-run": "x".repeat(300) } });
    expect(result).toBeInstanceOf(Error);
    expect((result as Error & { status?: number }).status).toBe(400);
  });
});
