import { loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { startProjector } from "./service.js";

const config = loadConfig();
const log = createLogger({ name: "projector", level: config.log_level });
const projector = await startProjector(config, log);

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "projector stopping");
    projector.close().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error({ err: error }, "projector did not stop cleanly");
        process.exit(1);
      },
    );
  });
}
