import { parseArgs } from "node:util";
import { WINDOW_MODES, type WindowMode } from "./rate-limit.js";
import { type FakeProviderOptions, startFakeProvider } from "./server.js";

const USAGE =
  "usage: fake-provider [--port N] [--host H] [--latency-ms N] [--chunk-delay-ms N] [--rpm N] [--tpm N]\n" +
  "                     [--window-mode continuous|fixed|sliding|none] [--verbose]";

function readOptions(args: string[]): FakeProviderOptions & { help: boolean } {
  const { values } = parseArgs({
    args,
    options: {
      port: { type: "string" },
      host: { type: "string" },
      "latency-ms": { type: "string" },
      "chunk-delay-ms": { type: "string" },
      rpm: { type: "string" },
      tpm: { type: "string" },
      "window-mode": { type: "string" },
      verbose: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  return {
    help: values.help,
    host: values.host,
    port: wholeNumber("port", values.port),
    latencyMs: wholeNumber("latency-ms", values["latency-ms"]),
    chunkDelayMs: wholeNumber("chunk-delay-ms", values["chunk-delay-ms"]),
    rpm: wholeNumber("rpm", values.rpm),
    tpm: wholeNumber("tpm", values.tpm),
    windowMode: windowMode(values["window-mode"]),
    // Off by default: this process is the benchmark's latency baseline, and a line per request costs.
    log: values.verbose ? (line) => console.log(line) : undefined,
    // A long benchmark would otherwise hold every request it ever sent.
    recordRequests: false,
  };
}

function wholeNumber(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new TypeError(`--${flag} must be a whole number, got '${value}'`);
  return Number(value);
}

function windowMode(value: string | undefined): WindowMode | undefined {
  if (value === undefined) return undefined;
  const mode = WINDOW_MODES.find((candidate) => candidate === value);
  if (mode === undefined)
    throw new TypeError(`--window-mode must be one of ${WINDOW_MODES.join(", ")}, got '${value}'`);
  return mode;
}

let options: ReturnType<typeof readOptions>;
try {
  options = readOptions(process.argv.slice(2));
} catch (error) {
  console.error(`fake-provider: ${(error as Error).message}\n${USAGE}`);
  process.exit(2);
}
if (options.help) {
  console.log(USAGE);
  process.exit(0);
}

const provider = await startFakeProvider(options);
console.log(`fake provider listening on ${provider.url}`);

let stopping = false;
const stop = (): void => {
  // A second signal means whoever sent it is done waiting.
  if (stopping) process.exit(1);
  stopping = true;
  provider.close().then(
    () => process.exit(0),
    (error: unknown) => {
      console.error(`fake-provider: ${String(error)}`);
      process.exit(1);
    },
  );
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
// Started by `holdfast up --demo`: when the supervisor goes away, so does the provider (also
// when it went while this was starting). Run by hand or by the benchmark there is no IPC
// channel, and nothing to wait for.
if (process.send !== undefined) {
  if (process.connected) process.on("disconnect", stop);
  else stop();
}
