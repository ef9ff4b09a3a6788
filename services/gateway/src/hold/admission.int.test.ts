import { type Bus, connectBus } from "@holdfast/bus";
import { loadConfig } from "@holdfast/config";
import {
  ActorKind,
  createIdGenerator,
  emptySelector,
  FLEET,
  type FleetCommand,
  type FleetState,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { createPricer } from "@holdfast/providers";
import { fleetAggregate, HeldRuns, Ledger, runAggregate } from "@holdfast/runs";
import { natsUrl, uniqueNamespace } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Call } from "../pipeline/hooks.js";
import { Admission } from "./admission.js";
import { ParkingLot } from "./lot.js";

// Admission against a real log, with no watch running: what it decides when a standing rule
// is in the log and this gateway's watch has not brought it yet (a loaded machine delivers
// it a moment late; here, never).

const log = createLogger({ name: "admission-int-test", level: "silent" });
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };
const NO_LABELS = { tag: "", tenant: "" };
let bus: Bus;

beforeAll(async () => {
  bus = await connectBus({
    servers: natsUrl(),
    prefix: uniqueNamespace("admission"),
    name: "admission-int-test",
  });
  await bus.provision();
});
afterAll(async () => {
  await bus.close();
});

function ledgers() {
  const common = { bus, log, clock: Date.now, newId: createIdGenerator() };
  return {
    runs: new Ledger<RunState, RunCommand>({ aggregate: runAggregate, ...common }),
    fleet: new Ledger<FleetState, FleetCommand>({ aggregate: fleetAggregate, ...common }),
  };
}

/** A gateway's admission: its own ledgers, the fleet's rules as it read them at start. */
async function admissionOf(gateway: ReturnType<typeof ledgers>): Promise<Admission> {
  const config = loadConfig({ env: {}, overrides: {} });
  const admission = new Admission({
    ledger: gateway.runs,
    fleet: gateway.fleet,
    held: new HeldRuns(bus),
    pricer: createPricer({ overrides: {}, unknownUsdPerMtok: 0 }),
    limits: config,
    newId: createIdGenerator(),
    gateway: "gw-test#0",
    keepaliveMs: 1_000,
    keepalive1xx: false,
    clock: Date.now,
    onRecordError: () => undefined,
    shutdown: new AbortController().signal,
    lot: new ParkingLot({
      perRun: config.hold.max_parked_per_run,
      perGateway: config.hold.max_parked,
      bytes: config.hold.max_parked_bytes,
    }),
  });
  await admission.start();
  return admission;
}

/** What admission reads of a call: its run (id, tag, conversation) and its model. */
function callOf(runId: string, tag: string): Call {
  return { run: { runId, tag, tenant: "", promptHash: "p1" }, view: { model: "gpt-4o-mini" } } as Call;
}

describe("admission", () => {
  it("meets a run that never called with a standing rule added a moment ago, which its watch has not brought yet", async () => {
    const gateway = ledgers();
    const admission = await admissionOf(gateway);
    const selector = { ...emptySelector(), tag: "frozen" };
    await ledgers().fleet.execute(FLEET, NO_LABELS, {
      type: "AddHoldRule",
      ruleId: "rule-frozen",
      selector,
      actor: operator,
      reason: "freeze frozen",
    });
    // The start must be accepted by the log first, and the run's decider is given the rule.
    expect(await admission.gate(callOf("brand-new", "frozen"))).toBe("confirm");
    expect(admission.rules().map((rule) => rule.ruleId)).toEqual(["rule-frozen"]);
    expect(await admission.gate(callOf("brand-new-elsewhere", "thawed"))).toBe("go");
  });
});
