import { loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { startScheduler } from "./service.js";

const config = loadConfig();
const log = createLogger({ name: "scheduler", level: config.log_level });
let running: Awaited<ReturnType<typeof startScheduler>>;
try {
  running = await startScheduler(config, log);
} catch (error) {
  console.error((error as Error).message);
  process.exit(2);
}
// The line `holdfast up` reads to learn where the APIs are (ports may have been 0).
console.log(`scheduler listening on grpc ${running.grpcAddress} rest ${running.url}`);

let stopping = false;
function stop(reason: string): void {
  if (stopping) return;
  stopping = true;
  log.info({ reason }, "scheduler stopping");
  running.close().then(
    () => process.exit(0),
    (error: unknown) => {
      log.error({ err: error }, "scheduler did not stop cleanly");
      process.exit(1);
    },
  );
}
process.on("SIGINT", () => stop("SIGINT"));
process.on("SIGTERM", () => stop("SIGTERM"));
// Started by `holdfast up`: when the supervisor goes away, so does this service.
process.on("disconnect", () => stop("supervisor gone"));
