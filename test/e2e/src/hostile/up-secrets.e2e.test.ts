import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { chmodSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// What a real `holdfast up` leaves where a process other than its own services could find
// it. SECURITY.md: "Each service is given its own NATS credential's path and only the
// tokens it uses, in its environment". An attack run found that `up` gives the control
// token (an operator's: hold, resume, stop, approve, deny) to the gateway and the
// projector, which never change a run: the gateway only checks a token for its health
// details, which the read token suffices for. Whoever takes over a gateway (the process
// that parses every agent's and every provider's bytes) is an operator, and the table's
// "a gateway may not append an operator's hold, resume or stop" does not hold.
//
// It also found that the projection is readable by every user of the host: `up` makes
// <data_dir>/clickhouse and <data_dir>/logs with the process's umask (directories 755,
// files 644), so any local user (the agents SECURITY.md tells you to run as another user)
// copies the ClickHouse parts (every event's payload as JSON, run ids, tool names, what
// was quarantined, byte for byte) and the services' logs, where the analytics API asks
// for the read token. The log itself (nats/jetstream) is 700.

const BIN = fileURLToPath(new URL("../../../../libs/cli/dist/bin.js", import.meta.url));

let dir: Awaited<ReturnType<typeof makeTempDir>>;
/** The data dir, made by `up` itself in a directory others may search, as a home directory often is. */
let dataDir: string;
let up: ChildProcess | undefined;
let output = "";

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  return env;
}

beforeAll(async () => {
  dir = await makeTempDir("hostile-up-secrets");
  chmodSync(dir.path, 0o755);
  dataDir = join(dir.path, ".holdfast");
  up = spawn(process.execPath, [BIN, "up", "--demo", "--data-dir", dataDir, "--port", "0"], {
    env: {
      ...cleanEnv(),
      HOLDFAST_CONTROL__PORT: "0",
      HOLDFAST_CONTROL__GRPC_PORT: "0",
      HOLDFAST_SCHEDULER__PORT: "0",
      HOLDFAST_SCHEDULER__GRPC_PORT: "0",
    },
    detached: true,
  });
  up.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  up.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  await waitFor(() => output.includes("Demo:") || up?.exitCode !== null, {
    timeoutMs: 90_000,
    message: "holdfast up did not come up",
  });
  expect(up.exitCode, output).toBeNull();
}, 120_000);

afterAll(async () => {
  if (up !== undefined && up.exitCode === null) {
    const exited = once(up, "exit");
    process.kill(-up.pid!, "SIGINT");
    await exited;
  }
  await dir?.[Symbol.asyncDispose]();
});

/** The environment of this stack's process running `entry` (services/<name>/dist/main.js), as /proc shows it. */
function environmentOf(entry: string): Map<string, string> {
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      if (!cmdline.includes(entry)) continue;
      const env = new Map(
        readFileSync(`/proc/${pid}/environ`, "utf8")
          .split("\0")
          .filter((line) => line.includes("="))
          .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)] as const),
      );
      if (env.get("HOLDFAST_DATA_DIR") === dataDir) return env;
    } catch {
      // A process that ended meanwhile, or one of another user's.
    }
  }
  throw new Error(`no process of this stack runs ${entry}`);
}

/** Files under `root` that a user other than the owner (and not in its group) can read: o+x on every directory down, o+r on the file. */
function readableByOthers(root: string): string[] {
  const found: string[] = [];
  const walk = (path: string) => {
    const mode = statSync(path).mode;
    if ((mode & 0o170000) === 0o040000) {
      if ((mode & 0o001) === 0) return;
      for (const name of readdirSync(path)) walk(join(path, name));
    } else if ((mode & 0o004) !== 0) found.push(path.slice(dataDir.length + 1));
  };
  walk(root);
  return found;
}

describe("holdfast up's services", () => {
  it("give no service the operator's control token unless it serves operators' changes", () => {
    const control = readFileSync(join(dataDir, "credentials", "control.token"), "utf8").trim();
    for (const service of ["gateway", "projector", "budget", "scheduler", "control"]) {
      const env = environmentOf(`services/${service}/dist/main.js`);
      const holding = [...env].filter(([, value]) => value.includes(control)).map(([key]) => key);
      expect(holding, `the ${service}'s environment`).toEqual([]);
    }
  });

  it("give each service in plain text only the tokens SECURITY.md's table says it presents, and the digest of those it checks", () => {
    const tokens = Object.fromEntries(
      (["control", "read", "budget", "worker"] as const).map((name) => [
        name,
        readFileSync(join(dataDir, "credentials", `${name}.token`), "utf8").trim(),
      ]),
    ) as Record<"control" | "read" | "budget" | "worker", string>;
    // SECURITY.md, "Where the credentials live": which token each service holds, which it
    // holds only the digest of.
    const TABLE: Record<string, { plain: (keyof typeof tokens)[]; digest: (keyof typeof tokens)[] }> = {
      gateway: { plain: ["budget"], digest: ["control", "read"] },
      control: { plain: ["read"], digest: ["control"] },
      projector: { plain: [], digest: ["control", "read"] },
      scheduler: { plain: [], digest: ["control", "read", "worker"] },
      budget: { plain: [], digest: ["budget"] },
    };
    const digestOf = (token: string) => `sha256:${createHash("sha256").update(token, "utf8").digest("hex")}`;
    for (const [service, holds] of Object.entries(TABLE)) {
      const values = [...environmentOf(`services/${service}/dist/main.js`).values()];
      const plain = (Object.keys(tokens) as (keyof typeof tokens)[]).filter((name) =>
        values.some((value) => value.includes(tokens[name])),
      );
      expect(plain, `the tokens in the ${service}'s environment in plain text`).toEqual(holds.plain);
      const digests = (Object.keys(tokens) as (keyof typeof tokens)[]).filter((name) =>
        values.includes(digestOf(tokens[name])),
      );
      expect(digests, `the tokens in the ${service}'s environment as a sha256: digest`).toEqual(holds.digest);
    }
  });

  it("keep what they record from the host's other users: no file of the projection or the logs is readable by them", () => {
    expect(readableByOthers(join(dataDir, "credentials"))).toEqual([]);
    expect(readableByOthers(join(dataDir, "clickhouse")).slice(0, 5)).toEqual([]);
    expect(readableByOthers(join(dataDir, "logs"))).toEqual([]);
  });
});
