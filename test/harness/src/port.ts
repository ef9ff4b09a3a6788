import { createServer } from "node:net";

/**
 * A port that was free a moment ago. Another process can take it before the caller binds,
 * so prefer letting the server pick its own port (port 0) and asking it, as nats-server does.
 */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === "object") resolve(address.port);
        else reject(new Error(`No port from a listener on ${host}`));
      });
    });
  });
}
