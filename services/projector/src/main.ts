import { loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { InsecureBindError } from "./errors.js";
import { startProjector } from "./service.js";

const config = loadConfig();
const log = createLogger({ name: "projector", level: config.log_level });
let running: Awaited<ReturnType<typeof startProjector>>;
try {
  running = await startProjector(config, log);
} catch (error) {
  if (error instanceof InsecureBindError) {
    console.error(error.message);
    process.exit(2);
  }
  throw error;
}

// The line `holdfast up` reads to learn where the analytics API is (its port may have been 0).
console.log(`projector listening on ${running.url}`);
let stopping = false;
function stop(reason: string): void {
  if (stopping) return;
  stopping = true;
  log.info({ reason }, "projector stopping");
  running.close().then(
    () => process.exit(0),
    (error: unknown) => {
      log.error({ err: error }, "projector did not stop cleanly");
      process.exit(1);
    },
  );
}
process.on("SIGINT", () => stop("SIGINT"));
process.on("SIGTERM", () => stop("SIGTERM"));
// Started by `holdfast up`: when the supervisor goes away, so does this service.
process.on("disconnect", () => stop("supervisor gone"));
