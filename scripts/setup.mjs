#!/usr/bin/env node
// Brings a checkout to a runnable state on a machine that has only Node.js and npm:
// installs dependencies with pnpm 10 (via npx when pnpm is not installed), generates the
// protobuf code, builds every package, and makes sure nats-server >= 2.11 is available
// (installing it into .tools/ when it is not), and Python's httpx for the tests that drive
// a Python client (unpacked from Debian into .tools/python-httpx), and Python's grpcio,
// protobuf and grpc_tools for the one that drives a Python gRPC client (.tools/python-grpc).
// Safe to run again; it only does what is missing or stale.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, utimesSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const PNPM = "10.34.9";
const quiet = process.argv.includes("--quiet");
// What the `holdfast` launcher compares build inputs against: written on success, dated
// when this run began, so an input changed while it ran is still newer than the stamp.
const STAMP = join(root, "node_modules", ".holdfast-setup-stamp");
const began = new Date();

function say(line) {
  if (!quiet) console.error(`setup: ${line}`);
}

function run(command, args, options = {}) {
  const result = spawnSync(command, args, {
    cwd: root,
    stdio: quiet ? ["ignore", "ignore", "inherit"] : "inherit",
    ...options,
  });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    console.error(`setup: \`${[command, ...args].join(" ")}\` failed (exit ${result.status})`);
    process.exit(result.status ?? 1);
  }
}

const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 20 || (major === 20 && minor < 19)) {
  console.error(`setup: Holdfast needs Node.js 20.19 or newer; this is ${process.versions.node}.`);
  process.exit(1);
}

function pnpmCommand() {
  try {
    const version = execFileSync("pnpm", ["--version"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
    if (version.startsWith("10.")) return ["pnpm", []];
  } catch {
    // Not installed: fall through to npx.
  }
  return ["npx", ["--yes", `pnpm@${PNPM}`]];
}

const [pnpm, pnpmArgs] = pnpmCommand();
say(`installing dependencies (${pnpm === "pnpm" ? "pnpm" : `npx pnpm@${PNPM}`})`);
run(pnpm, [...pnpmArgs, "install", "--frozen-lockfile", "--prefer-offline", "--reporter=silent"]);

say("generating protobuf code and building");
const bin = join(root, "node_modules", ".bin");
run(join(bin, "buf"), ["generate", "proto"]);
run(join(bin, "tsc"), ["-b"]);

say("checking for nats-server >= 2.11");
run(process.execPath, [join(root, "libs/natsd/dist/install-cli.js")], {
  stdio: ["ignore", quiet ? "ignore" : "inherit", "inherit"],
});

say("checking for Python's httpx (for the tests that drive a Python client)");
{
  const { ensurePythonHttpx } = await import("../test/harness/dist/python.js");
  try {
    await ensurePythonHttpx({ log: quiet ? undefined : (line) => say(line) });
  } catch (error) {
    // No Python 3.11 or no apt/dpkg: those tests skip themselves and the rest runs.
    if (error?.code !== "HOLDFAST_HARNESS_PYTHON_UNSUPPORTED") {
      console.error(`setup: ${error instanceof Error ? error.message : String(error)}`);
      process.exit(1);
    }
    say(`skipping httpx: ${error.message}`);
  }
}

say("checking for Python's grpcio and grpc_tools (for the test that drives a Python gRPC client)");
{
  const { ensurePythonGrpc } = await import("../test/harness/dist/python.js");
  try {
    await ensurePythonGrpc({ log: quiet ? undefined : (line) => say(line) });
  } catch (error) {
    // No Python 3.11 (what Debian bookworm's grpcio is built for) or no apt/dpkg: that test skips itself.
    if (error?.code !== "HOLDFAST_HARNESS_PYTHON_UNSUPPORTED") {
      console.error(`setup: ${error instanceof Error ? error.message : String(error)}`);
      process.exit(1);
    }
    say(`skipping grpcio: ${error.message}`);
  }
}

if (!existsSync(join(root, "libs/cli/dist/bin.js"))) {
  console.error("setup: the build did not produce libs/cli/dist/bin.js");
  process.exit(1);
}
writeFileSync(STAMP, `${began.toISOString()}\n`);
utimesSync(STAMP, began, began);
say("ready");
