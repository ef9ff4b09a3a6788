import { Worker } from "node:worker_threads";
import { HeartbeatRequest, HeartbeatResponse, type LeaseRef } from "@holdfast/proto";

// The beating thread: plain JavaScript with Node's own modules only (it is evaluated, not
// loaded from a file, so it runs the same from source and from a build). It calls
// holdfast.v1.Runs/Heartbeat over HTTP/2 with the request bytes the main thread last gave
// it, every `intervalMs`, whatever the main thread is doing. When the scheduler answers
// that a lease is over, it tells the main thread; if the main thread does not answer
// within `graceMs` (its code holds the event loop), it ends the process, so that the run's
// new worker is the only one running it and this worker's slot comes back with a restart.
const THREAD = `
const { parentPort, workerData } = require("node:worker_threads");
const http2 = require("node:http2");
const { address, authorization, intervalMs, graceMs } = workerData;
let request = Buffer.alloc(0);
let held = new Set();
let session;
let killer;
function connect() {
  if (session && !session.closed && !session.destroyed) return session;
  session = http2.connect("http://" + address);
  session.on("error", () => {});
  session.unref();
  return session;
}
// HeartbeatResponse { repeated LeaseRef revoked = 1 }, LeaseRef { string run_id = 1; uint32 lease = 2 }:
// read by hand, as "runId:lease" keys.
function varint(buf, at) {
  let value = 0, shift = 0, byte;
  do { byte = buf[at.i++]; value += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80 && at.i < buf.length);
  return value;
}
function fields(buf, each) {
  const at = { i: 0 };
  while (at.i < buf.length) {
    const tag = varint(buf, at);
    const wire = tag & 7;
    if (wire === 0) each(tag >>> 3, varint(buf, at));
    else if (wire === 2) { const n = varint(buf, at); each(tag >>> 3, buf.subarray(at.i, at.i + n)); at.i += n; }
    else if (wire === 5) at.i += 4;
    else if (wire === 1) at.i += 8;
    else return;
  }
}
function revokedKeys(message) {
  const keys = [];
  fields(message, (field, ref) => {
    if (field !== 1 || typeof ref === "number") return;
    let runId = "", lease = 0;
    fields(ref, (f, v) => { if (f === 1 && typeof v !== "number") runId = v.toString("utf8"); else if (f === 2) lease = v; });
    keys.push(runId + ":" + lease);
  });
  return keys;
}
function beat() {
  if (request.length === 0) return;
  let s;
  try { s = connect(); } catch { return; }
  const headers = { ":method": "POST", ":path": "/holdfast.v1.Runs/Heartbeat", "content-type": "application/grpc", te: "trailers" };
  if (authorization) headers.authorization = authorization;
  let req;
  try { req = s.request(headers); } catch { session = undefined; return; }
  req.setTimeout(intervalMs, () => req.close());
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("error", () => {});
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    if (body.length < 5) return;
    const length = body.readUInt32BE(1);
    const message = body.subarray(5, 5 + length);
    if (message.length === 0) return;
    parentPort.postMessage({ type: "revoked", bytes: message });
    // Only a lease the main thread still holds arms the kill: an answer to an older beat may
    // name one it already let go of, while its code rightly holds the loop for another run.
    if (killer === undefined && revokedKeys(message).some((key) => held.has(key))) {
      killer = setTimeout(() => process.kill(process.pid, "SIGKILL"), graceMs);
    }
  });
  const frame = Buffer.alloc(5 + request.length);
  frame.writeUInt32BE(request.length, 1);
  request.copy(frame, 5);
  req.end(frame);
}
const timer = setInterval(beat, intervalMs);
parentPort.on("message", (message) => {
  // The main thread answers: it is not stuck.
  if (killer !== undefined) { clearTimeout(killer); killer = undefined; }
  if (message.type === "leases") { request = Buffer.from(message.bytes); held = new Set(message.keys); if (message.now) beat(); }
  else if (message.type === "stop") { clearInterval(timer); if (session) session.close(); parentPort.close(); }
});
`;

export interface HeartbeatOptions {
  /** The scheduler's host:port. */
  readonly address: string;
  readonly authorization: string | undefined;
  readonly worker: string;
  /** A third of the lease. */
  readonly intervalMs: number;
  /** How long the main thread has to answer a revoked lease before the process is ended. */
  readonly graceMs: number;
  /** Leases the scheduler says are over. */
  readonly onRevoked: (leases: LeaseRef[]) => void;
}

/** The worker's heartbeat, beating from a thread of its own so it keeps beating while a step holds the event loop. */
export class Heartbeat {
  private readonly thread: Worker;

  constructor(private readonly options: HeartbeatOptions) {
    this.thread = new Worker(THREAD, {
      eval: true,
      workerData: {
        address: options.address,
        authorization: options.authorization,
        intervalMs: options.intervalMs,
        graceMs: options.graceMs,
      },
    });
    this.thread.unref();
    this.thread.on("message", (message: { type: string; bytes: Uint8Array }) => {
      if (message.type === "revoked") options.onRevoked(HeartbeatResponse.decode(message.bytes).revoked);
    });
    this.thread.on("error", () => undefined);
  }

  /** The leases to renew from now on (`now`: beat at once, e.g. after a revoke was handled). */
  leases(leases: readonly LeaseRef[], now = false): void {
    const bytes =
      leases.length === 0
        ? new Uint8Array(0)
        : HeartbeatRequest.encode({ worker: this.options.worker, leases: [...leases] }).finish();
    const keys = leases.map((l) => `${l.runId}:${l.lease}`);
    this.thread.postMessage({ type: "leases", bytes, keys, now });
  }

  async stop(): Promise<void> {
    this.thread.postMessage({ type: "stop" });
    await this.thread.terminate();
  }
}
