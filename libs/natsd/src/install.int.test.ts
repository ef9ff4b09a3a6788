import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NatsServerInstallError } from "./errors.js";
import { installNatsServer } from "./install.js";

let scratch: string;
let toolsDir: string;
let privateTmp: string;
const originalTmp = process.env.TMPDIR;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "natsd-install-int-"));
  toolsDir = join(scratch, "tools");
  // The installer works under os.tmpdir(); a private one shows whether it cleans up after
  // itself without being confused by other runs. This file has its own process.
  privateTmp = join(scratch, "tmp");
  await mkdir(privateTmp);
  process.env.TMPDIR = privateTmp;
});

afterAll(async () => {
  if (originalTmp === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = originalTmp;
  await rm(scratch, { recursive: true, force: true });
});

// The real download is exercised by `node libs/natsd/dist/install-cli.js` during setup; here
// the mirror is unreachable on purpose, so the test needs no network and checks the failure path.
describe.runIf(existsSync("/usr/bin/apt-get"))("installNatsServer against an unreachable mirror", () => {
  it("fails with apt's reason and the manual route, and cleans up", async () => {
    const attempt = installNatsServer({ toolsDir, mirror: "http://127.0.0.1:9/debian" });
    await expect(attempt).rejects.toBeInstanceOf(NatsServerInstallError);
    await expect(attempt).rejects.toThrow(/apt-get update for Debian sid failed[\s\S]*127\.0\.0\.1:9/);
    await expect(attempt).rejects.toThrow(/HOLDFAST_NATS_SERVER/);
    expect(existsSync(toolsDir)).toBe(false);
    expect(await readdir(privateTmp)).toEqual([]);
  });
});
