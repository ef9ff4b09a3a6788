import { defineConfig } from "vitest/config";

// Tests run from TypeScript source: the "@holdfast/source" export condition points each
// workspace package at its src/ entry, so no build is needed to test a library. Spawned
// services (e2e) run from dist/, which `npm test` builds first.
const conditions = ["@holdfast/source", "node", "import", "module", "default"];
const sourceFirst = {
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: conditions } },
};

// chDB must stay on a process's main thread (it segfaults in worker threads) and owns one
// data directory per process, so every tier runs in forked processes, one file per fork.
const shared = { pool: "forks" as const, isolate: true };
const ignored = ["**/node_modules/**", "**/dist/**"];

export default defineConfig({
  ...sourceFirst,
  test: {
    projects: [
      {
        ...sourceFirst,
        test: {
          name: "unit",
          ...shared,
          include: ["{libs,services,test}/*/src/**/*.test.ts"],
          exclude: [...ignored, "**/*.int.test.ts", "**/*.e2e.test.ts"],
        },
      },
      {
        ...sourceFirst,
        test: {
          name: "int",
          ...shared,
          include: ["{libs,services,test}/*/src/**/*.int.test.ts"],
          exclude: ignored,
          globalSetup: ["test/harness/src/global-setup.ts"],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      {
        ...sourceFirst,
        test: {
          name: "e2e",
          ...shared,
          include: ["{libs,services,test}/*/src/**/*.e2e.test.ts"],
          exclude: ignored,
          globalSetup: ["test/harness/src/global-setup.ts"],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
