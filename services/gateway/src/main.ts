import { loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { startGateway } from "./service.js";

const config = loadConfig();
const log = createLogger({ name: "gateway", level: config.log_level });
const running = await startGateway(config, log);
// The line `holdfast up` reads to learn where the gateway is (its port may have been taken).
console.log(`gateway listening on ${running.baseUrl}`);

let stopping = false;
function stop(reason: string): void {
  if (stopping) return;
  stopping = true;
  log.info({ reason }, "gateway stopping");
  running.close().then(
    () => process.exit(0),
    (error: unknown) => {
      log.error({ err: error }, "gateway did not stop cleanly");
      process.exit(1);
    },
  );
}
process.on("SIGINT", () => stop("SIGINT"));
process.on("SIGTERM", () => stop("SIGTERM"));
// Started by `holdfast up`: when the supervisor goes away, so does this service.
process.on("disconnect", () => stop("supervisor gone"));
