import { connect } from "node:net";

/** The fields of a NATS `INFO` greeting Holdfast looks at; the server sends more. */
export interface NatsServerInfo {
  readonly server_id: string;
  readonly server_name?: string;
  readonly version: string;
  readonly host?: string;
  readonly port?: number;
  readonly max_payload?: number;
  readonly jetstream?: boolean;
  readonly [key: string]: unknown;
}

export interface ReadServerInfoOptions {
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

const MAX_INFO_BYTES = 64 * 1024;

/**
 * Opens a plain TCP connection to a NATS URL and returns the `INFO` line the server sends
 * first. Seeing it proves a NATS server (not just any listener) accepts clients, without
 * needing a NATS client library.
 */
export function readServerInfo(url: string, options: ReadServerInfoOptions = {}): Promise<NatsServerInfo> {
  const { hostname, port } = parseNatsUrl(url);
  const timeoutMs = options.timeoutMs ?? 5_000;
  return new Promise((resolve, reject) => {
    let buffer = "";
    const socket = connect({ host: hostname, port, signal: options.signal });
    const finish = (error: Error | undefined, info?: NatsServerInfo) => {
      clearTimeout(timer);
      socket.destroy();
      if (error) reject(error);
      else if (info) resolve(info);
    };
    const timer = setTimeout(
      () => finish(new Error(`No INFO from ${url} within ${timeoutMs} ms (got ${JSON.stringify(buffer)})`)),
      timeoutMs,
    );
    socket.setEncoding("utf8");
    socket.on("error", (error) => finish(error));
    socket.on("close", () => finish(new Error(`${url} closed the connection before sending INFO`)));
    socket.on("data", (chunk: string) => {
      buffer += chunk;
      const end = buffer.indexOf("\r\n");
      if (end === -1) {
        if (buffer.length > MAX_INFO_BYTES)
          finish(new Error(`${url} sent no line break in ${MAX_INFO_BYTES} bytes`));
        return;
      }
      const line = buffer.slice(0, end);
      if (!line.startsWith("INFO ")) {
        finish(new Error(`${url} did not greet with INFO: ${JSON.stringify(line.slice(0, 200))}`));
        return;
      }
      try {
        finish(undefined, JSON.parse(line.slice("INFO ".length)) as NatsServerInfo);
      } catch (error) {
        finish(error instanceof Error ? error : new Error(String(error)));
      }
    });
  });
}

export function parseNatsUrl(url: string): { hostname: string; port: number } {
  const parsed = new URL(url);
  const port = parsed.port === "" ? 4222 : Number(parsed.port);
  // URL keeps IPv6 brackets in hostname; net.connect wants them gone.
  return { hostname: parsed.hostname.replace(/^\[(.*)\]$/, "$1"), port };
}
