import { execFile } from "node:child_process";
import { symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { makeTempDir } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The one `holdfast` entry a newcomer uses: the checkout's launcher, on a PATH with Node.js
// and the system's tools but no pnpm, from the checkout, from elsewhere, and through a link.
const LAUNCHER = fileURLToPath(new URL("../../../holdfast", import.meta.url));
const run = promisify(execFile);

let dir: Awaited<ReturnType<typeof makeTempDir>>;
beforeAll(async () => {
  dir = await makeTempDir("launcher");
});
afterAll(async () => {
  await dir[Symbol.asyncDispose]();
});

function withoutPnpm(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: `${dirname(process.execPath)}:/usr/bin:/bin`, HOME: dir.path };
  return env;
}

async function holdfast(command: string, cwd: string, ...args: string[]) {
  try {
    const { stdout, stderr } = await run(command, args, { cwd, env: withoutPnpm(), timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (error) {
    const e = error as { stdout: string; stderr: string; code: number };
    return { stdout: e.stdout, stderr: e.stderr, code: e.code };
  }
}

describe("the holdfast launcher", () => {
  it("runs without pnpm on PATH, and names itself the way it can be run again", async () => {
    const pnpm = await run("sh", ["-c", "command -v pnpm || true"], { env: withoutPnpm() });
    expect(pnpm.stdout.trim()).toBe("");
    const help = await holdfast(LAUNCHER, dir.path, "--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("holdfast up");
    const fromCheckout = await holdfast("./holdfast", dirname(LAUNCHER), "ls", "--data-dir", dir.path);
    expect(fromCheckout.code).toBe(1);
    expect(fromCheckout.stderr).toContain("Start it with `./holdfast up`");
    const elsewhere = await holdfast(LAUNCHER, dir.path, "ls", "--data-dir", dir.path);
    expect(elsewhere.stderr).toContain(`Start it with \`${LAUNCHER} up\``);
  });

  it("works through a link on PATH", async () => {
    const link = join(dir.path, "holdfast");
    symlinkSync(LAUNCHER, link);
    const result = await holdfast(link, dir.path, "query", "--help");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("holdfast query");
  });
});
