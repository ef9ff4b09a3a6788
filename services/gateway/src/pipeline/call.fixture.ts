import type { ServerResponse } from "node:http";
import { openAIChatShape, type RequestView } from "@holdfast/providers";
import type { FastifyRequest } from "fastify";
import type { ResolvedRun } from "../identify/resolve.js";
import type { Upstream } from "../upstream/upstream.js";
import { RequestBody } from "./body.js";
import { CallState } from "./state.js";

/** An upstream of a test's: where a call goes, as routing names it. */
export const upstreamAt = (origin: string) => ({ origin, provider: "openai" }) as Upstream;

/**
 * A Chat Completions call as the read stage makes it, of run "run-1", its client's side a
 * response that is never written in a unit test.
 */
export function chatCall(body: Record<string, unknown>): CallState {
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
    upstreamAt("http://provider.test"),
    response as unknown as ServerResponse,
    performance.now(),
    raw.length,
  );
}
