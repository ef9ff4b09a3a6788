// The floor: the least a proxy can do in Node (node:http in, undici out, bytes piped
// through untouched). Holdfast's figures are read as ratios to this one's. It runs as its
// own process, so its CPU is measured the way the gateway's is.
//
//   node floor.js --upstream http://127.0.0.1:PORT   → prints "floor listening on http://…"
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { Agent } from "undici";

const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "host", "content-length"]);

const { values } = parseArgs({ options: { upstream: { type: "string" }, port: { type: "string" } } });
if (values.upstream === undefined) throw new Error("--upstream is required");
const upstream = new URL(values.upstream).origin;
const agent = new Agent({ keepAliveTimeout: 30_000 });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
    }
    const body = Buffer.concat(chunks);
    agent
      .request({
        origin: upstream,
        path: req.url ?? "/",
        method: (req.method ?? "GET") as "POST",
        headers,
        body: body.length > 0 ? body : null,
      })
      .then(async (response) => {
        const out: Record<string, string | string[]> = {};
        for (const [name, value] of Object.entries(response.headers)) {
          if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
        }
        res.writeHead(response.statusCode, out);
        for await (const chunk of response.body) res.write(chunk);
        res.end();
      })
      .catch(() => {
        if (!res.headersSent) res.writeHead(502);
        res.end();
      });
  });
});
server.keepAliveTimeout = 75_000;
server.listen(Number(values.port ?? 0), "127.0.0.1", () => {
  const { port } = server.address() as AddressInfo;
  console.log(`floor listening on http://127.0.0.1:${port}`);
});
process.on("SIGINT", () => process.exit(0));
process.on("SIGTERM", () => process.exit(0));
process.on("disconnect", () => process.exit(0));
