import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  AGENT_EVENT_TYPES,
  Api,
  AUTHOR_OF,
  createIdGenerator,
  EVENT_TYPES,
  type EventPayload,
  encodeEnvelope,
  KEY_EVENT_TYPES,
  makeEnvelope,
  RunSource,
  type StoredEnvelope,
} from "@holdfast/events";
import { launchNatsServer, makeTempDir, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, headers as natsHeaders, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { natsAccounts, PRINCIPALS, type Principal } from "./access.js";
import { type Bus, connectBus } from "./bus.js";
import { newNatsCredential } from "./credentials.js";
import { BusConfigurationError } from "./errors.js";

// A nats-server configured as `holdfast up` configures its own: a user per principal, each
// with the permissions permissionsFor gives it, and nothing for anyone else.

const prefix = uniqueNamespace("acc");
const projectorConsumer = "projector";
const newId = createIdGenerator();
let server: Awaited<ReturnType<typeof launchNatsServer>>;
let dir: Awaited<ReturnType<typeof makeTempDir>>;
const seeds = new Map<Principal, string>();
const credentialFile = (principal: Principal) => join(dir.path, `${principal}.nk`);
const buses: Bus[] = [];

async function as(principal: Principal): Promise<Bus> {
  const bus = await connectBus({
    servers: server.url,
    prefix,
    name: `access-test ${principal}`,
    credentials: credentialFile(principal),
    principal,
    appendTimeoutMs: 2_000,
  });
  buses.push(bus);
  return bus;
}

beforeAll(async () => {
  dir = await makeTempDir("access");
  const keys = {} as Record<Principal, string>;
  for (const principal of PRINCIPALS) {
    const credential = newNatsCredential();
    seeds.set(principal, credential.seed);
    keys[principal] = credential.publicKey;
    await writeFile(
      credentialFile(principal),
      `${credential.seed}
`,
      { mode: 0o600 },
    );
  }
  server = await launchNatsServer({
    label: "access",
    accounts: natsAccounts(keys, { prefix, projectorConsumer }),
  });
  const admin = await as("admin");
  await admin.provision();
  await admin.provisionBuckets();
});

afterAll(async () => {
  for (const bus of buses) await bus.close().catch(() => undefined);
  await server?.stop();
  await dir?.[Symbol.asyncDispose]();
});

const started = (runId: string, sequence: number): EventPayload => ({
  $case: "stepStarted",
  value: {
    stepId: `${runId}-${sequence}`,
    step: sequence,
    api: Api.API_OPENAI_CHAT_COMPLETIONS,
    model: "gpt-4o-mini",
    stream: false,
    identity: { source: RunSource.RUN_SOURCE_HEADER, key: "x-run-id", fingerprint: "", generation: 0 },
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
});

const resumed: EventPayload = {
  $case: "runResumed",
  value: {
    actor: { kind: 1, name: "control token" },
    reason: "forged",
    selector: undefined,
    limits: undefined,
    overrides: false,
    checkpoint: false,
    compact: 0,
  },
};

/** What nats-server answers a credential asking for what its permissions do not allow. */
const REFUSED = /permission/i;

const envelope = (runId: string, sequence: number, payload: EventPayload) =>
  makeEnvelope({ id: newId(), runId, sequence, timestampMs: Date.now(), tag: "", payload });

/** What the log holds of a run, as an admin reads it. */
async function logOf(runId: string): Promise<StoredEnvelope[]> {
  const admin = buses[0]!;
  return (await admin.readRun(runId)).events.map((e) => e.envelope);
}

describe("a process without a credential", () => {
  it("is refused at connect, and says how to give one", async () => {
    const anonymous = connectBus({ servers: server.url, prefix, name: "anonymous" });
    await expect(anonymous).rejects.toBeInstanceOf(BusConfigurationError);
    await expect(anonymous).rejects.toThrow(/nats\.credentials/);
  });

  it("is refused with a key the server does not know", async () => {
    const stranger = newNatsCredential();
    await expect(
      connect({
        servers: server.url,
        authenticator: nkeyAuthenticator(new TextEncoder().encode(stranger.seed)),
        maxReconnectAttempts: 0,
      }),
    ).rejects.toThrow(/authorization/i);
  });
});

describe("each service's credential does its own job", () => {
  it("a gateway appends steps; the control service appends an operator's resume", async () => {
    const gateway = await as("gateway");
    const { streamSequence } = await gateway.append(envelope("own-jobs", 1, started("own-jobs", 1)), 0);
    const control = await as("control");
    await control.append(envelope("own-jobs", 2, resumed), streamSequence);
    expect((await logOf("own-jobs")).map((e) => e.type)).toEqual(["StepStarted", "RunResumed"]);
  });

  it("the CLI's reader reads a run, with no consumer of its own", async () => {
    const gateway = await as("gateway");
    await gateway.append(envelope("read-by-reader", 1, started("read-by-reader", 1)), 0);
    const reader = await as("reader");
    const { events } = await reader.readRun("read-by-reader");
    expect(events.map((e) => e.envelope.type)).toEqual(["StepStarted"]);
    await expect(reader.lastOnSubjects([reader.subjects.allRuns])).rejects.toThrow(/permission/i);
  });

  it("each service opens the buckets it keeps, and the projector makes its consumer", async () => {
    const gateway = await as("gateway");
    for (const bucket of ["FINGERPRINTS", "RESPONSES", "GATEWAYS"] as const) {
      const kv = await gateway.keyValue(bucket);
      await kv.put("k", "v");
      expect((await kv.get("k"))?.value).toBe("v");
    }
    const budget = await as("budget");
    await (await budget.keyValue("BUDGET_LEASES")).put("k", "v");
    const projector = await as("projector");
    await (await projector.keyValue("LEASES")).put("k", "v");
    await projector.ensureDurable({
      name: projectorConsumer,
      filterSubject: projector.subjects.allRuns,
      ackWaitMs: 5_000,
      maxAckPending: 10,
      ackPolicy: "all",
    });
    expect(await projector.durableState(projectorConsumer)).toBeDefined();
  });
});

describe("the admin's credential, which no service runs with", () => {
  it("may do what provisioning does: reconfigure the log, make and delete a bucket", async () => {
    const nc = await connect({
      servers: server.url,
      authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.get("admin")!)),
      maxReconnectAttempts: 0,
    });
    try {
      const jsm = await jetstreamManager(nc, { timeout: 2_000 });
      const stream = `${prefix.toUpperCase()}_EVENTS`;
      const config = (await jsm.streams.info(stream)).config;
      await jsm.streams.update(stream, { ...config, description: "reconfigured by the admin" });
      expect((await jsm.streams.info(stream)).config.description).toBe("reconfigured by the admin");
      const kvm = new Kvm(nc);
      const bucket = `${prefix.toUpperCase()}_SCRATCH`;
      await kvm.create(bucket);
      await jsm.streams.delete(`KV_${bucket}`);
      await expect(jsm.streams.info(`KV_${bucket}`)).rejects.toThrow(/not found/i);
    } finally {
      await nc.close();
    }
  });
});

describe("no service's credential does another's job", () => {
  it("a gateway cannot resume, hold or stop a run: only the control service writes an operator's action", async () => {
    const gateway = await as("gateway");
    const { streamSequence } = await gateway.append(
      envelope("forged-resume", 1, started("forged-resume", 1)),
      0,
    );
    await expect(gateway.append(envelope("forged-resume", 2, resumed), streamSequence)).rejects.toThrow(
      /may not publish|permission/i,
    );
    expect((await logOf("forged-resume")).map((e) => e.type)).toEqual(["StepStarted"]);
  });

  it("each event type is published only by its author's credential: no other service can write a durable run's life, an operator's action or a step", async () => {
    const refused: string[] = [];
    const allowed: string[] = [];
    for (const principal of PRINCIPALS.filter((p) => p !== "admin")) {
      const nc = await connect({
        servers: server.url,
        authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.get(principal)!)),
        inboxPrefix: `_INBOX_${principal}`,
        maxReconnectAttempts: 0,
      });
      try {
        for (const type of EVENT_TYPES) {
          const scope = KEY_EVENT_TYPES.has(type) ? "key" : AGENT_EVENT_TYPES.has(type) ? "agent" : "run";
          const subject = `${prefix}.${scope}.forged-by-${principal}.${type}`;
          const answer = await jetstream(nc, { timeout: 2_000 })
            .publish(subject, new Uint8Array([1]))
            .then(() => "stored")
            .catch((error: unknown) => String(error));
          const line = `${principal} ${type}`;
          if (answer === "stored") allowed.push(line);
          else if (/permission/i.test(answer)) refused.push(line);
          else throw new Error(`${line}: neither stored nor refused for permission: ${answer}`);
        }
      } finally {
        await nc.close();
      }
    }
    const authors: Record<string, Principal> = {
      gateway: "gateway",
      control: "control",
      scheduler: "scheduler",
    };
    const expected = EVENT_TYPES.map((type) => `${authors[AUTHOR_OF[type]]} ${type}`);
    expect(allowed.sort()).toEqual(expected.sort());
    expect(refused).toHaveLength(EVENT_TYPES.length * (PRINCIPALS.length - 1) - EVENT_TYPES.length);
  });

  it("the control service, the budget service, the projector and the CLI's reader cannot write a step", async () => {
    for (const principal of ["control", "budget", "projector", "reader", "scheduler"] as const) {
      const bus = await as(principal);
      await expect(bus.append(envelope(`forged-step-${principal}`, 1, started("x", 1)), 0)).rejects.toThrow(
        /may not publish|permission/i,
      );
      expect(await logOf(`forged-step-${principal}`)).toEqual([]);
    }
  });

  it("no service can delete, purge or reconfigure the log or a bucket", async () => {
    for (const principal of PRINCIPALS.filter((p) => p !== "admin")) {
      const nc = await connect({
        servers: server.url,
        authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.get(principal)!)),
        inboxPrefix: `_INBOX_${principal}`,
        maxReconnectAttempts: 0,
      });
      try {
        const jsm = await jetstreamManager(nc, { timeout: 1_000 });
        const stream = `${prefix.toUpperCase()}_EVENTS`;
        await expect(jsm.streams.delete(stream), `${principal} deleting the log`).rejects.toThrow(REFUSED);
        await expect(jsm.streams.purge(stream), `${principal} purging the log`).rejects.toThrow(REFUSED);
        await expect(
          jsm.streams.update(stream, { deny_delete: false, deny_purge: false }),
          `${principal} reconfiguring the log`,
        ).rejects.toThrow(REFUSED);
        await expect(jsm.streams.delete(`KV_${prefix.toUpperCase()}_GATEWAYS`)).rejects.toThrow(REFUSED);
        await expect(
          jsm.consumers.delete(stream, projectorConsumer),
          `${principal} deleting the projection`,
        ).rejects.toThrow(REFUSED);
        await expect(new Kvm(nc).create(`${prefix.toUpperCase()}_NEW`)).rejects.toThrow(REFUSED);
      } finally {
        await nc.close();
      }
    }
    const admin = buses[0]!;
    expect((await admin.streamConfig()).denyDelete).toBe(true);
    expect(await admin.durableState(projectorConsumer)).toBeDefined();
  });

  it("a gateway cannot make the others hear an event the log does not hold", async () => {
    // Other gateways tail a run by its republished subject. The forger puts an operator's
    // resume in its own bucket and has JetStream answer a direct get of it on that subject:
    // in the gateways' account, where every gateway subscribes.
    const listener = await as("gateway");
    const heard: string[] = [];
    const untail = listener.tail("forged-tail", (event) => heard.push(event.type));
    const nc = await connect({
      servers: server.url,
      authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.get("gateway")!)),
      inboxPrefix: "_INBOX_gateway",
      maxReconnectAttempts: 0,
    });
    try {
      const bucket = `${prefix.toUpperCase()}_FINGERPRINTS`;
      const kv = await new Kvm(nc).open(bucket);
      await kv.put("forged", encodeEnvelope(envelope("forged-tail", 1, resumed)));
      // An event the log holds, of another run, answered the same way.
      const other = await as("gateway");
      await other.append(envelope("another-run", 1, started("another-run", 1)), 0);
      const stream = `${prefix.toUpperCase()}_EVENTS`;
      const republished = `${prefix}.stored.run.forged-tail.RunResumed`;
      nc.publish(
        `$JS.API.DIRECT.GET.KV_${bucket}`,
        JSON.stringify({ last_by_subj: `$KV.${bucket}.forged` }),
        {
          reply: republished,
        },
      );
      nc.publish(
        `$JS.API.DIRECT.GET.${stream}`,
        JSON.stringify({ last_by_subj: `${prefix}.run.another-run.StepStarted` }),
        {
          reply: republished,
        },
      );
      await nc.flush();
      await other.append(envelope("forged-tail", 1, started("forged-tail", 1)), 0);
      await waitFor(() => heard.length > 0, {
        timeoutMs: 5_000,
        message: "the run's own event was not heard",
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(heard).toEqual(["StepStarted"]);
    } finally {
      untail();
      await nc.close();
    }
  });

  it("a gateway cannot make the others hear another type than the log stored, by headers of its own", async () => {
    // The stream republishes a stored message with the headers its publisher gave it, and
    // adds its own: a gateway's step can carry a planted Nats-Subject naming an operator's
    // resume, which a tail must not believe.
    const listener = await as("gateway");
    const heard: string[] = [];
    const untail = listener.tail("planted", (event) => heard.push(`${event.type}@${event.streamSequence}`));
    const nc = await connect({
      servers: server.url,
      authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.get("gateway")!)),
      inboxPrefix: "_INBOX_gateway",
      maxReconnectAttempts: 0,
    });
    try {
      const planted = natsHeaders();
      planted.set("Nats-Stream", `${prefix.toUpperCase()}_EVENTS`);
      planted.set("Nats-Subject", `${prefix}.run.planted.RunResumed`);
      planted.set("Nats-Sequence", "999999");
      const stored = await jetstream(nc).publish(
        `${prefix}.run.planted.StepStarted`,
        encodeEnvelope(envelope("planted", 1, resumed)),
        { headers: planted },
      );
      await waitFor(() => heard.length > 0 || undefined, {
        timeoutMs: 2_000,
        message: "nothing heard",
      }).catch(() => undefined);
      expect(heard.filter((h) => h.startsWith("RunResumed") || h.endsWith("@999999"))).toEqual([]);
      expect(heard.every((h) => h === `StepStarted@${stored.seq}`)).toBe(true);
    } finally {
      untail();
      await nc.close();
    }
  });

  it("a service cannot write a bucket another keeps", async () => {
    const budget = await as("budget");
    await expect(budget.putValue("GATEWAYS", "gw", "forged beat")).rejects.toThrow(
      /may not publish|permission/i,
    );
    const gateway = await as("gateway");
    await expect(gateway.putValue("BUDGET_LEASES", "slice", "forged")).rejects.toThrow(
      /may not publish|permission/i,
    );
    await expect(gateway.keyValue("LEASES")).rejects.toThrow(/permission/i);
  });

  it("a service cannot listen to another's replies", async () => {
    const nc = await connect({
      servers: server.url,
      authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.get("budget")!)),
      maxReconnectAttempts: 0,
    });
    const errors: string[] = [];
    void (async () => {
      for await (const status of nc.status()) if (status.type === "error") errors.push(String(status.error));
    })();
    const sub = nc.subscribe("_INBOX_control.>");
    await nc.flush();
    await expect(sub.closed).resolves.toBeInstanceOf(Error);
    expect(errors.join(" ")).toMatch(/permissions violation for subscription/i);
    await nc.close();
  });
});
