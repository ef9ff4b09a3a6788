import { PassThrough } from "node:stream";
import { connectBus } from "@holdfast/bus";
import { createLogger } from "@holdfast/log";
import { natsUrl } from "@holdfast/test-harness";
import { describe, expect, it } from "vitest";
import {
  analytics,
  call,
  drained,
  keyReading,
  LEASE_MS,
  prefix,
  totals,
  totalsOf,
  useProjectorFixture,
  waitFor,
} from "./projector.fixture.js";
import { Projector } from "./projector.js";

// The stream holds more than run events (provider keys' readings, agents' deployments),
// which the projector's consumer filters out: holes in the stream sequences it is given
// are not events it missed. It warns only when run events really did not reach it.

useProjectorFixture();

const MISSED = "events above the checkpoint were not delivered here";
// Provider keys as gateways name them: the first 16 hex digits of a hash.
const KEY_A = "3f9a61c2d4b7e015";
const KEY_B = "0c1d2e3f4a5b6c7d";

/** A projector on the consumer "proj" whose warnings are kept, as its log file would keep them. */
async function projector(name: string, options: { resetOnStart?: boolean; batchSize?: number } = {}) {
  const lines: string[] = [];
  const destination = new PassThrough();
  destination.on("data", (chunk: Buffer) => lines.push(...chunk.toString().trim().split("\n")));
  const bus = await connectBus({ servers: natsUrl(), prefix, name });
  const projector = new Projector({
    bus,
    analytics,
    log: createLogger({ name, level: "warn", destination }),
    consumer: "proj",
    batchSize: options.batchSize ?? 100,
    ackWaitMs: 1_000,
    lingerMs: 50,
    leaseMs: LEASE_MS,
    ...(options.resetOnStart === undefined ? {} : { resetOnStart: options.resetOnStart }),
  });
  await projector.start();
  return {
    projector,
    bus,
    warnings: () => lines.filter((line) => line.includes(MISSED)).map((line) => JSON.parse(line)),
    stop: async () => {
      await projector.stop();
      await bus.close();
    },
  };
}

describe("projector on a stream with other subjects", () => {
  it("logs no missed events under traffic with rate-limit readings between the calls, and projects every call", async () => {
    const a = await projector("projector-a");
    try {
      // Waves of calls, each call followed by a reading of its key, so most batches the
      // projector takes have a hole after every run event.
      let calls = 0;
      for (let wave = 0; wave < 6; wave++) {
        for (let i = 0; i < 10; i++) {
          calls += 1;
          await call(`run-${calls % 4}`, calls);
          await keyReading(calls % 2 === 0 ? KEY_A : KEY_B);
        }
        await waitFor(async () => (await totals()).steps === calls, {
          timeoutMs: 15_000,
          message: `wave ${wave} was not projected`,
        });
      }
      await waitFor(() => drained(a.bus, "proj"), { timeoutMs: 15_000, message: "not acknowledged" });
      expect(await totals()).toEqual(totalsOf(60));
      expect(a.warnings()).toEqual([]);
    } finally {
      await a.stop();
    }
  });

  it("still warns, and reads them from the stream, when run events were taken from its consumer and never projected", async () => {
    // A former holder's pull took these and acknowledged them, but they never reached
    // ClickHouse; readings are interleaved, as under traffic.
    for (let i = 61; i <= 70; i++) {
      await call(`run-${i % 4}`, i);
      await keyReading(KEY_A);
    }
    const former = await connectBus({ servers: natsUrl(), prefix, name: "former-holder" });
    // What the consumer has now (up to 20), acknowledged through the last.
    const puller = former.puller("proj");
    const taken = await puller.pull(20);
    await puller.ackThrough(taken.at(-1)!);
    puller.close();
    await former.close();
    for (let i = 71; i <= 75; i++) {
      await call(`run-${i % 4}`, i);
      await keyReading(KEY_B);
    }

    // Without the consumer reset (nats-server before 2.14), delivery resumes after what was taken.
    const b = await projector("projector-b", { resetOnStart: false, batchSize: 4 });
    try {
      await waitFor(async () => (await totals()).steps === 75 && (await drained(b.bus, "proj")), {
        timeoutMs: 15_000,
        message: "events after the hole were not projected",
      });
      expect(await totals()).toEqual(totalsOf(75));
      const [warning, ...more] = b.warnings();
      expect(more).toEqual([]);
      // The 20 run events the former holder took: calls 61 to 70.
      expect(warning).toMatchObject({ level: "warn", missing: 20 });
    } finally {
      await b.stop();
    }
  });
});
