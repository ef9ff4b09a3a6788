import { loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { startBudget } from "./service.js";

const config = loadConfig();
const log = createLogger({ name: "budget", level: config.log_level });
const running = await startBudget(config, log);
// The supervisor (holdfast up) waits for this line, whatever the log level.
console.log(`budget listening on ${running.address}`);

let stopping = false;
function stop(reason: string): void {
  if (stopping) return;
  stopping = true;
  log.info({ reason }, "budget service stopping");
  running.close().then(
    () => process.exit(0),
    (error: unknown) => {
      log.error({ err: error }, "budget service did not stop cleanly");
      process.exit(1);
    },
  );
}
process.on("SIGINT", () => stop("SIGINT"));
process.on("SIGTERM", () => stop("SIGTERM"));
// Started by `holdfast up`: when the supervisor goes away, so does this service.
process.on("disconnect", () => stop("supervisor gone"));
