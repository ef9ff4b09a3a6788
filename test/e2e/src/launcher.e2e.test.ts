import { execFile } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  readFileSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
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

describe("the holdfast launcher's build", () => {
  // A checkout of its own, whose setup.mjs only counts its runs and leaves what the real
  // one leaves (the CLI and the stamp), so what is tested is the launcher's decision.
  const SETUP_STUB = `
import { appendFileSync, mkdirSync, writeFileSync } from "node:fs";
const root = new URL("..", import.meta.url).pathname;
appendFileSync(root + "setup.log", "setup\\n");
if (process.env.FAKE_SETUP_FAILS) process.exit(3);
mkdirSync(root + "libs/cli/dist", { recursive: true });
writeFileSync(root + "libs/cli/dist/bin.js", "console.log('cli ran ' + process.argv.slice(2).join(' '));");
writeFileSync(root + "node_modules/.holdfast-setup-stamp", "");
`;

  const INPUTS = [
    "package.json",
    "pnpm-lock.yaml",
    "scripts/setup.mjs",
    "libs/cli/package.json",
    "libs/cli/src/bin.ts",
  ];

  /** A checkout whose build inputs were all written an hour ago. */
  function checkout(name: string): {
    root: string;
    setups: () => number;
    at: (path: string, secondsAgo: number) => void;
  } {
    const root = join(dir.path, name);
    for (const sub of ["node_modules/.pnpm", "scripts", "libs/cli/src", "libs/cli/dist"]) {
      mkdirSync(join(root, sub), { recursive: true });
    }
    copyFileSync(LAUNCHER, join(root, "holdfast"));
    chmodSync(join(root, "holdfast"), 0o755);
    for (const file of INPUTS) writeFileSync(join(root, file), file.endsWith(".mjs") ? SETUP_STUB : "{}");
    const at = (path: string, secondsAgo: number) => {
      const when = new Date(Date.now() - secondsAgo * 1000);
      utimesSync(join(root, path), when, when);
    };
    for (const file of INPUTS) at(file, 3_600);
    const setups = () => readFileSync(join(root, "setup.log"), "utf8").split("\n").length - 1;
    return { root, setups, at };
  }

  it("runs setup when nothing was set up, then again only when a build input is newer than the last setup", async () => {
    const { root, setups, at } = checkout("stale");
    const launcher = join(root, "holdfast");

    const first = await holdfast(launcher, root, "ls");
    expect(first).toMatchObject({ code: 0, stdout: "cli ran ls\n" });
    expect(setups()).toBe(1);
    at("node_modules/.holdfast-setup-stamp", 600);

    expect((await holdfast(launcher, root, "ls")).stdout).toBe("cli ran ls\n");
    expect(setups()).toBe(1);

    // A git pull: the source is rewritten after the last setup.
    at("libs/cli/src/bin.ts", 60);
    const pulled = await holdfast(launcher, root, "ls");
    expect(pulled).toMatchObject({ code: 0, stdout: "cli ran ls\n" });
    expect(pulled.stderr).toContain("libs/cli/src/bin.ts");
    expect(setups()).toBe(2);
    at("node_modules/.holdfast-setup-stamp", 30);

    // Not build inputs: a test, a build output.
    writeFileSync(join(root, "libs/cli/src/bin.test.ts"), "");
    writeFileSync(join(root, "libs/cli/dist/extra.js"), "");
    await holdfast(launcher, root, "ls");
    expect(setups()).toBe(2);

    // A new lockfile after a pull that only changed dependencies.
    at("pnpm-lock.yaml", 0);
    await holdfast(launcher, root, "ls");
    expect(setups()).toBe(3);
  });

  it("stops with setup's exit code, and runs no stale CLI, when the rebuild fails", async () => {
    const { root, setups, at } = checkout("failing");
    await holdfast(join(root, "holdfast"), root, "ls");
    const before = setups();
    at("node_modules/.holdfast-setup-stamp", 600);
    at("libs/cli/src/bin.ts", 60);
    const env = { ...withoutPnpm(), FAKE_SETUP_FAILS: "1" };
    const failed = await run(join(root, "holdfast"), ["ls"], { cwd: root, env }).catch(
      (error: { code: number; stdout: string }) => error,
    );
    expect(failed).toMatchObject({ code: 3, stdout: "" });
    expect(setups()).toBe(before + 1);
  });
});
