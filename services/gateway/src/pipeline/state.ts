import type { ServerResponse } from "node:http";
import { type Api, apiFromName } from "@holdfast/events";
import type { Prediction, RouteChoice } from "@holdfast/proto";
import type { ApiShape, RequestView } from "@holdfast/providers";
import type { RunLabels } from "@holdfast/runs";
import type { FastifyRequest } from "fastify";
import type { ResolvedRun } from "../identify/resolve.js";
import type { Upstream } from "../upstream/upstream.js";
import { type RequestBody, tokensOf } from "./body.js";
import type { Finishing } from "./finish.js";
import type { Call, Cancellation, Destination, StartNotes } from "./hooks.js";
import type { CallOrigin } from "./origin.js";
import { ResponseWriter } from "./writer.js";

const CLIENT_GONE: Cancellation = Object.freeze({ kind: "client_gone" });
const NO_LEASES: readonly string[] = Object.freeze([]);

/**
 * A call as the pipeline carries it through its stages: what the features see (`Call`),
 * writable by the pipeline alone, which applies the features' amendments to it.
 */
export class CallState implements Call, Finishing {
  readonly api: Api;
  readonly labels: RunLabels;
  readonly writer: ResponseWriter;
  cancelled: Cancellation | undefined;
  /** Made only when asked for: most calls end without anybody listening. */
  #controller: AbortController | undefined;
  /** Aborts the upstream attempt in flight, if one is. */
  abortAttempt: (() => void) | undefined;
  estimatedInputTokens: number;
  reservedNanoUsd = 0;
  reservedFor = "";
  unpriced = false;
  budgetLeases: readonly string[] = NO_LEASES;
  upstreamOrigin: string;
  model: string;
  credentialHeaders: Readonly<Record<string, string>> | undefined;
  route: { readonly choice: RouteChoice; readonly answerModel: string | undefined } | undefined;
  step = 0;
  prediction: Prediction | undefined;
  firstByteMs = 0;
  finished = false;
  /** The provider named its response, and the index was told which run it belongs to. */
  named = false;
  /** The credentials the client's own request carried (`secrets` is a route's after a reroute). */
  readonly clientSecrets: readonly string[];
  /** Snapshots are on: relay keeps the answer as received for them, up to this many characters (0: off). */
  capturing = 0;
  /**
   * The provider's answer as received (decompressed): a whole body, or a stream's events
   * so far; past snapshots.max_bytes a stream's are dropped and only their length counted.
   */
  captured: { body: string } | { events: string; omitted: number } | undefined;
  /** Its request's snapshot is on its way. */
  snapshotted = false;
  /** An operator's call sent again from a recorded step: never held, gated or budgeted. */
  origin: CallOrigin | undefined;

  constructor(
    readonly shape: ApiShape,
    readonly view: RequestView,
    readonly run: ResolvedRun,
    readonly request: FastifyRequest,
    readonly stepId: string,
    readonly body: RequestBody,
    public secrets: readonly string[],
    public upstream: Upstream,
    response: ServerResponse,
    readonly t0: number,
    clientBytes: number,
  ) {
    this.api = apiFromName(shape.name);
    this.clientSecrets = secrets;
    this.labels = { tag: run.tag, tenant: run.tenant };
    this.writer = new ResponseWriter(response);
    this.estimatedInputTokens = tokensOf(clientBytes);
    this.upstreamOrigin = upstream.origin;
    this.model = view.model;
  }

  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.cancelled !== undefined) this.#controller.abort(this.cancelled);
    }
    return this.#controller.signal;
  }

  cancel(reason: Cancellation): void {
    if (this.cancelled !== undefined) return;
    this.cancelled = reason;
    this.abortAttempt?.();
    this.#controller?.abort(reason);
  }

  /** The client closed the connection before its answer was complete. */
  clientGone(): void {
    this.cancel(CLIENT_GONE);
  }

  /** The client is gone: nobody to answer. */
  get left(): boolean {
    return this.cancelled?.kind === "client_gone";
  }

  get upstreamBody(): Buffer {
    return this.body.bytes;
  }

  markFirstByte(): void {
    if (this.firstByteMs === 0) this.firstByteMs = Math.max(1, Math.round(performance.now() - this.t0));
  }

  /** Applies what a feature found out for the start (a reservation, budget leases, a prediction). */
  note(notes: StartNotes): void {
    if (notes.reservation !== undefined) {
      this.reservedNanoUsd = notes.reservation.nanoUsd;
      this.reservedFor = notes.reservation.model;
      this.unpriced = notes.reservation.unpriced;
    }
    if (notes.budgetLeases !== undefined) this.budgetLeases = notes.budgetLeases;
    if (notes.prediction !== undefined) this.prediction = notes.prediction;
  }

  /** Moves the call to another upstream (a route target): its model in the body, its key. */
  moveTo(to: Destination): void {
    this.upstream = to.upstream;
    this.upstreamOrigin = to.upstream.origin;
    this.model = to.model;
    this.body.withModel(to.model);
    this.secrets = to.secrets;
    this.credentialHeaders = to.credentialHeaders;
    this.route = to.route;
  }

  /** Sends this body instead (a compaction): the input estimate follows it. */
  rewrite(value: Record<string, unknown>, json?: Buffer): void {
    this.body.replace(value, json);
    this.estimatedInputTokens = tokensOf(this.body.bytes.length);
  }

  /** A new pass through admission (after a park): the budget leases are taken anew. */
  readmit(): void {
    this.budgetLeases = NO_LEASES;
  }
}
