import { ensureNatsServer } from "./install.js";

// Progress goes to stderr so stdout carries only the one result line a setup script may read.
try {
  const found = await ensureNatsServer({ log: (line) => process.stderr.write(`${line}\n`) });
  process.stdout.write(`nats-server ${found.version} ${found.path}\n`);
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}
