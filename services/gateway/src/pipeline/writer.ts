import type { ServerResponse } from "node:http";
import { formatSseComment, type SseEvent, type StreamSoFar } from "@holdfast/providers";

/** What answering a call needs of its client's side (finish answers through it). */
export interface ClientSide {
  /** The provider's events the client has been sent: what an event of the gateway's own follows. */
  readonly streamed: StreamSoFar;
  /** The status line and headers have been sent: the answer's status can no longer change. */
  readonly headersSent: boolean;
  /** A whole answer at once. */
  send(status: number, headers: Record<string, string | string[]>, body: Buffer | string): void;
  /** Ends the answer, with a last piece. */
  end(text?: string): void;
}

/**
 * The client's side of one call. It knows whether the status line is out yet, so a call
 * can be parked (SSE keepalives, 1xx interim responses) before the provider's own status
 * is known, and answered however it ends.
 */
export class ResponseWriter implements ClientSide {
  #streamed: StreamSoFar = { events: 0, last: undefined };

  constructor(private readonly res: ServerResponse) {}

  /** The provider's events the client has been sent: what an event of the gateway's own follows. */
  get streamed(): StreamSoFar {
    return this.#streamed;
  }

  /** The status line and headers have been sent: the answer's status can no longer change. */
  get headersSent(): boolean {
    return this.res.headersSent;
  }

  /** The client went away, or the answer is complete. */
  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  /** A whole answer at once. */
  send(status: number, headers: Record<string, string | string[]>, body: Buffer | string): void {
    if (this.closed) return;
    this.res.writeHead(status, headers);
    this.res.end(body);
  }

  /** Opens a streamed answer. */
  startStream(status: number, headers: Record<string, string | string[]>): void {
    if (!this.res.headersSent) this.res.writeHead(status, headers);
  }

  /** Writes part of a streamed answer; false means wait for `drain`. */
  write(text: string): boolean {
    if (this.closed) return true;
    return this.res.write(text);
  }

  /** Writes the provider's events (`text`, their bytes as relayed), `last` the last with data; false means wait for `drain`. */
  writeEvents(text: string, events: number, last: SseEvent | undefined): boolean {
    if (this.closed) return true;
    if (events > 0) this.#streamed = { events: this.#streamed.events + events, last };
    return this.res.write(text);
  }

  /** Ends the answer, with a last piece. */
  end(text = ""): void {
    if (this.closed) return;
    this.res.end(text);
  }

  /** An SSE comment: keeps a streaming client (and every proxy between) from timing out. */
  keepalive(text: string): void {
    if (this.res.headersSent && !this.closed) this.res.write(formatSseComment(text));
  }

  /** A 1xx interim response, for a client whose HTTP stack skips it while it waits. */
  interim(status: 100 | 102 | 103, headers: Record<string, string> = {}): void {
    if (this.res.headersSent || this.closed) return;
    if (status === 100) this.res.writeContinue();
    else if (status === 102) this.res.writeProcessing();
    // Node writes no 103 without a Link header; a preconnect to this very origin is the
    // one hint that asks nothing of any client.
    else this.res.writeEarlyHints({ link: "</>; rel=preconnect", ...headers });
  }

  /** Waits until a full buffer has gone out (backpressure), or the client is gone. */
  drained(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.res.off("drain", done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      this.res.once("drain", done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
