// Stands in for `holdfast up` in tests that kill the process that started a nats-server:
// starts one with the options given as JSON in argv[2], prints its pid and url as one JSON
// line, then waits to be killed.
import { type StartNatsServerOptions, startNatsServer } from "../start.js";

const options = JSON.parse(process.argv[2] ?? "{}") as StartNatsServerOptions;
const server = await startNatsServer(options);
process.stdout.write(`${JSON.stringify({ pid: server.pid, url: server.url })}\n`);
setInterval(() => undefined, 60_000);
