import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  describeSearch,
  NatsServerNotFoundError,
  type RunningNatsServer,
  type StartNatsServerOptions,
  searchNatsServer,
  startNatsServer,
} from "@holdfast/natsd";
import { inject } from "vitest";
import { NATS_URL_KEY } from "./context.js";
import { NatsUrlUnavailableError } from "./errors.js";

/** URL of the one nats-server the int/e2e global setup started for this test run. */
export function natsUrl(): string {
  const url = inject(NATS_URL_KEY) as string | undefined;
  if (url === undefined) {
    throw new NatsUrlUnavailableError(
      "natsUrl() has no server: only the int and e2e projects start one (name the file *.int.test.ts).",
    );
  }
  return url;
}

export type LaunchNatsServerOptions = Omit<StartNatsServerOptions, "binary" | "storeDir"> & {
  /** Names the temp store dir, to tell servers apart when one is left behind. */
  readonly label?: string;
};

/**
 * A private nats-server in a fresh temp dir, for the few tests that must stop, restart or
 * break a server; disposing it also removes its data. Everything else shares `natsUrl()`.
 */
export async function launchNatsServer(options: LaunchNatsServerOptions = {}): Promise<RunningNatsServer> {
  const search = await searchNatsServer();
  if (!search.found) {
    throw new NatsServerNotFoundError(
      `${describeSearch(search)}\n\nRun \`npm run setup\` to install one into .tools, ` +
        "or point HOLDFAST_NATS_SERVER at a nats-server 2.11 or newer.",
    );
  }
  const { label = "nats", ...start } = options;
  const storeDir = await mkdtemp(join(tmpdir(), `holdfast-test-${label}-`));
  let server: RunningNatsServer;
  try {
    server = await startNatsServer({ ...start, binary: search.found.path, storeDir });
  } catch (error) {
    await rm(storeDir, { recursive: true, force: true });
    throw error;
  }
  const stopAndClean = async () => {
    await server.stop();
    await rm(storeDir, { recursive: true, force: true });
  };
  return { ...server, stop: stopAndClean, [Symbol.asyncDispose]: stopAndClean };
}
