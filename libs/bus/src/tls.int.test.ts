import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createIdGenerator, makeEnvelope, RunSource } from "@holdfast/events";
import {
  launchNatsServer,
  makeCertificates,
  makeTempDir,
  type TestCertificates,
  uniqueNamespace,
} from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { natsAccounts, PRINCIPALS, type Principal } from "./access.js";
import { type BusOptions, connectBus } from "./bus.js";
import { newNatsCredential } from "./credentials.js";
import { BusConfigurationError, BusUnavailableError } from "./errors.js";

// NATS between hosts, as a deployment runs it: the server speaks only TLS and verifies its
// clients' certificates (mutual TLS), and each process still presents its own nkey.

const prefix = uniqueNamespace("tls");
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let certs: TestCertificates;
let server: Awaited<ReturnType<typeof launchNatsServer>>;
const credential = (principal: string) => join(dir.path, `${principal}.nk`);

beforeAll(async () => {
  dir = await makeTempDir("tls");
  certs = await makeCertificates(dir.path);
  const keys = {} as Record<Principal, string>;
  for (const principal of PRINCIPALS) {
    const made = newNatsCredential();
    keys[principal] = made.publicKey;
    await writeFile(
      credential(principal),
      `${made.seed}
`,
      { mode: 0o600 },
    );
  }
  server = await launchNatsServer({
    label: "tls",
    accounts: natsAccounts(keys, { prefix, projectorConsumer: "projector" }),
    tls: { certFile: certs.serverCertFile, keyFile: certs.serverKeyFile, caFile: certs.caFile },
  });
});

afterAll(async () => {
  await server?.stop();
  await dir?.[Symbol.asyncDispose]();
});

const options = (tls: BusOptions["tls"], principal = "admin" as const): BusOptions => ({
  servers: `tls://127.0.0.1:${server.port}`,
  prefix,
  name: "tls-test",
  credentials: credential(principal),
  principal,
  tls,
  // A refusal is at the handshake: no need to wait out the default.
  connectTimeoutMs: 3_000,
});

describe("NATS over mutual TLS", () => {
  it("carries the log for a client that trusts the server's CA and shows its own certificate", async () => {
    const bus = await connectBus(
      options({ caFile: certs.caFile, certFile: certs.clientCertFile, keyFile: certs.clientKeyFile }),
    );
    try {
      await bus.provision();
      const envelope = makeEnvelope({
        id: createIdGenerator()(),
        runId: "over-tls",
        sequence: 1,
        timestampMs: Date.now(),
        tag: "",
        payload: {
          $case: "stepStarted",
          value: {
            stepId: "s1",
            step: 1,
            api: 1,
            model: "gpt-4o-mini",
            stream: false,
            identity: { source: RunSource.RUN_SOURCE_HEADER, key: "x", fingerprint: "", generation: 0 },
            messageCount: 1,
            upstream: "http://127.0.0.1:1",
            gateway: "gw",
            estimatedInputTokens: 0,
            promptHash: "",
            reservedNanoUsd: 0,
            budgetLeases: [],
            prediction: undefined,
            route: undefined,
            origin: undefined,
          },
        },
      });
      await bus.append(envelope, 0);
      expect((await bus.readRun("over-tls")).events.map((e) => e.envelope.id)).toEqual([envelope.id]);
    } finally {
      await bus.close();
    }
  });

  it("refuses a client that does not trust the server's certificate", async () => {
    await expect(
      connectBus(options({ certFile: certs.clientCertFile, keyFile: certs.clientKeyFile })),
    ).rejects.toThrow(BusUnavailableError);
  });

  it("refuses a client without a certificate, or with one its CA did not sign, whatever its nkey", async () => {
    await expect(connectBus(options({ caFile: certs.caFile }))).rejects.toBeInstanceOf(Error);
    await expect(
      connectBus(
        options({ caFile: certs.caFile, certFile: certs.strangerCertFile, keyFile: certs.strangerKeyFile }),
      ),
    ).rejects.toBeInstanceOf(Error);
  });

  it("refuses plain text", async () => {
    const plain = connectBus({ ...options(undefined), servers: `nats://127.0.0.1:${server.port}` });
    await expect(plain).rejects.toBeInstanceOf(Error);
    await expect(plain).rejects.not.toBeInstanceOf(BusConfigurationError);
  });
});
