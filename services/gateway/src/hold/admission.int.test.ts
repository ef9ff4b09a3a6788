import { type Bus, connectBus } from "@holdfast/bus";
import { type Config, loadConfig } from "@holdfast/config";
import {
  ActorKind,
  createIdGenerator,
  emptySelector,
  FLEET,
  type FleetCommand,
  type FleetState,
  RunBusyError,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { start } from "@holdfast/events/fixtures";
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

type Limits = Pick<Config, "limits" | "limits_by_tag">;

/** A gateway's admission: its own ledgers, the fleet's rules as it read them at start. */
async function admissionOf(
  gateway: ReturnType<typeof ledgers>,
  limits: { [K in keyof Limits]?: Partial<Limits[K]> } = {},
): Promise<Admission> {
  const config = loadConfig({ env: {}, overrides: limits });
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

/** What admission reads of a call: its run (id, tag, conversation), its model, what it reserves. */
function callOf(runId: string, tag: string, reservedNanoUsd = 0): Call {
  return {
    run: { runId, tag, tenant: "", promptHash: "p1" },
    view: { model: "gpt-4o-mini" },
    reservedNanoUsd,
  } as Call;
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
    // A run this gateway has no state of is confirmed whatever the rules: only the log knows
    // whether it is new, in flight elsewhere, or under limits a resume gave it.
    expect(await admission.gate(callOf("brand-new-elsewhere", "thawed"))).toBe("confirm");
  });

  it("has the start confirmed before forwarding while the calls in flight leave no room for its reservation, as the decider makes it wait", async () => {
    const gateway = ledgers();
    // 1,000 nano-USD a run; the run's first call is in flight, reserving 600.
    const admission = await admissionOf(gateway, { limits: { max_cost_usd: 0.000001 } });
    const labels = { tag: "", tenant: "" };
    const limits = admission.limitsFor("");
    await gateway.runs.execute("first-calls", labels, start("s1", { tag: "", limits, reservedNanoUsd: 600 }));
    // No call has finished: there is no average to go by, only what this one reserves.
    expect(await admission.gate(callOf("first-calls", "", 600))).toBe("confirm");
    await expect(
      gateway.runs.execute("first-calls", labels, start("s2", { tag: "", limits, reservedNanoUsd: 600 })),
    ).rejects.toThrow(RunBusyError);
    // A call that fits beside it goes on while its start is appended.
    expect(await admission.gate(callOf("first-calls", "", 300))).toBe("go");
  });

  it("is near a limit by the limits of the tag the call names, the ones its start is decided by", async () => {
    const gateway = ledgers();
    const admission = await admissionOf(gateway, {
      limits: { max_steps: 2 },
      limits_by_tag: { batch: { max_steps: 100 } },
    });
    // Two steps of the run as tagged `batch`, then a call that names no tag.
    const batch = { tag: "batch", tenant: "" };
    for (const stepId of ["s1", "s2"]) {
      const command = start(stepId, { tag: "batch", limits: admission.limitsFor("batch") });
      await gateway.runs.execute("retagged", batch, command);
    }
    expect(await admission.gate(callOf("retagged", ""))).toBe("confirm");
    // Its start carries the untagged limits (max_steps 2): the run trips instead.
    const { events } = await gateway.runs.execute(
      "retagged",
      { tag: "", tenant: "" },
      start("s3", { tag: "", limits: admission.limitsFor("") }),
    );
    expect(events.map((event) => event.payload.$case)).toEqual(["runTripped"]);
  });

  it("lets the first call of a run read before it called go on under max_minutes: its window opens with that call", async () => {
    const gateway = ledgers();
    const admission = await admissionOf(gateway, { limits: { max_minutes: 10 } });
    // Read from the log (as a passed-through call naming it would): followed, with nothing in it.
    await gateway.runs.latest("not-yet");
    expect(gateway.runs.cached("not-yet")).toBeDefined();
    expect(await admission.gate(callOf("not-yet", ""))).toBe("go");
  });
});
