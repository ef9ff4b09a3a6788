import type { TestProject } from "vitest/node";
import { NATS_URL_KEY } from "./context.js";
import { launchNatsServer } from "./nats.js";

/**
 * One nats-server for the whole run, shared by every test file of the project; files keep
 * apart by using their own `uniqueNamespace()` for streams and subjects, not their own server.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await launchNatsServer({
    label: `${project.name}-nats`,
    serverName: `holdfast-${project.name}`,
  });
  project.provide(NATS_URL_KEY, server.url);
  return () => server.stop();
}
