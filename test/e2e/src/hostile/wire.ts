import { connect } from "node:net";

/** What a server wrote back on a raw connection, and whether it closed the connection itself. */
export interface RawReply {
  /** The server closed the connection (within the bound the caller gave). */
  closedByServer: boolean;
  /** The status of the first response written, 0 when none was. */
  status: number;
  /** That response's body as text. */
  body: string;
}

/**
 * Bytes on a socket, exactly as given, as no HTTP client library would send them: the
 * opening, then `trickle()` every `everyMs` for as long as the connection is open. Resolves
 * when the server closes the connection, or after `boundMs` with `closedByServer: false`
 * (the connection then closed by us).
 */
export function rawExchange(
  origin: string,
  opening: Buffer | string,
  options: { trickle?: () => Buffer | string; everyMs?: number; boundMs?: number } = {},
): Promise<RawReply> {
  const { hostname, port } = new URL(origin);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname, () => socket.write(opening));
    let text = "";
    let ours = false;
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      text += chunk;
    });
    // A write after the server hung up (EPIPE, ECONNRESET) ends the exchange like a close.
    socket.on("error", () => undefined);
    const trickle =
      options.trickle === undefined
        ? undefined
        : setInterval(() => {
            if (socket.writable) socket.write(options.trickle!());
          }, options.everyMs ?? 100);
    const bound = setTimeout(() => {
      ours = true;
      socket.destroy();
    }, options.boundMs ?? 15_000);
    socket.on("close", () => {
      clearInterval(trickle);
      clearTimeout(bound);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const start = text.indexOf("\r\n\r\n");
      const body = start < 0 ? "" : Buffer.from(text.slice(start + 4), "latin1").toString("utf8");
      resolve({ closedByServer: !ours, status, body });
    });
  });
}

/** A request's head: its request line and header lines, the blank line, then the body. */
export function requestBytes(
  origin: string,
  method: string,
  path: string,
  headers: readonly string[],
  body = "",
): string {
  return [`${method} ${path} HTTP/1.1`, `Host: ${new URL(origin).host}`, ...headers, "", body].join("\r\n");
}
