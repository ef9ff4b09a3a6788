import { loadConfig } from "@holdfast/config";
import { type RunningControl, startControl } from "@holdfast/control";
import { QUARANTINE_REASONS, type QuarantineReason } from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { type RunningScheduler, startScheduler } from "@holdfast/scheduler";
import { publishRaw, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "../stack.js";

// An event nobody can read is counted where Prometheus can scrape it: every HTTP service
// that reads the log answers holdfast_events_quarantined_total, one series per reason
// (zeros included), behind the control tokens. Poisons are written with the admin's
// credential straight into the stream, as in poisoned-events: garbage bytes on a run's
// StepCompleted subject (read by the gateway serving the run, the projector and control),
// and on a durable run's RunSubmitted subject (read by the scheduler as it recovers the queue).

const TOKEN = "control-token-for-quarantine-metrics-0123";
const READ = "read-token-for-quarantine-metrics-0123456";
const GARBAGE = new Uint8Array([0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef]);
const silent = createLogger({ name: "metrics", level: "silent" });

let stack: Stack;
let control: RunningControl;
let scheduler: RunningScheduler;
beforeAll(async () => {
  stack = await startStack({ config: { control: { token: TOKEN, read_token: READ } } });
  const runId = "metrics-poisoned";
  const ask = (content: string) =>
    stack
      .client({ headers: { "X-Holdfast-Run": runId } })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content }] });
  await ask("before");
  await stack.settled(runId, 1);
  const admin = { credentials: stack.credentials?.files.admin };
  await publishRaw(
    stack.config.nats.url!,
    stack.bus.subjects.runEvent(runId, "StepCompleted"),
    GARBAGE,
    admin,
  );
  await publishRaw(
    stack.config.nats.url!,
    stack.bus.subjects.runEvent("metrics-durable", "RunSubmitted"),
    GARBAGE,
    admin,
  );
  await ask("after");
  await stack.settled(runId, 2);
  control = await startControl(
    { ...stack.configFor("control"), control: { ...stack.config.control, port: 0, grpc_port: 0 } },
    silent,
  );
  scheduler = await startScheduler(
    loadConfig({
      env: {},
      overrides: {
        ...stack.configFor("scheduler"),
        scheduler: { ...stack.config.scheduler, port: 0, grpc_port: 0 },
      },
    }),
    silent,
  );
  // Control reads the run as `holdfast runs show` asks it to, and sets its poison aside.
  const shown = await fetch(`${control.url}/runs/${runId}`, { headers: { authorization: `Bearer ${READ}` } });
  expect(shown.status).toBe(200);
});
afterAll(async () => {
  await scheduler?.close();
  await control?.close();
  await stack?.close();
});

/** A GET of `url` with `token` as the bearer (the read-only token unless told; null: none). */
const scrape = async (url: string, token: string | null = READ) =>
  fetch(url, token === null ? {} : { headers: { authorization: `Bearer ${token}` } });

/** Each reason's count in a scrape, for one service: every reason has a line, or this fails. */
async function quarantined(url: string, service: string): Promise<Record<QuarantineReason, number>> {
  const response = await scrape(url);
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  const text = await response.text();
  expect(text).toContain("# TYPE holdfast_events_quarantined_total counter\n");
  expect(text).toMatch(
    new RegExp(`^holdfast_process_start_time_seconds\\{service="${service}"\\} \\d+(\\.\\d+)?$`, "m"),
  );
  const counts = {} as Record<QuarantineReason, number>;
  for (const reason of QUARANTINE_REASONS) {
    const line = new RegExp(
      `^holdfast_events_quarantined_total\\{service="${service}",reason="${reason}"\\} (\\d+)$`,
      "m",
    ).exec(text);
    expect(line, `${service}: no series for ${reason}`).not.toBeNull();
    counts[reason] = Number(line![1]);
  }
  expect(text.match(/^holdfast_events_quarantined_total\{/gm)).toHaveLength(QUARANTINE_REASONS.length);
  return counts;
}

const origin = () => new URL(stack.gatewayUrl).origin;

describe("holdfast_events_quarantined_total", () => {
  it("the gateway counts the poisoned event it passed over, every other reason at 0", async () => {
    const counts = await quarantined(`${origin()}/holdfast/metrics`, "gateway");
    expect(counts.undecodable).toBeGreaterThanOrEqual(1);
    for (const reason of QUARANTINE_REASONS.filter((r) => r !== "undecodable"))
      expect(counts[reason]).toBe(0);
  });

  it("the projector counts both poisons it set aside, and the projection holds them", async () => {
    const url = `${stack.analyticsUrl}/metrics`;
    const counts = await waitFor(
      async () => {
        const now = await quarantined(url, "projector");
        return now.undecodable === 2 ? now : undefined;
      },
      { timeoutMs: 15_000, message: "the projector's metric did not count both poisons" },
    );
    expect(counts).toEqual({ ...zeros(), undecodable: 2 });
    const text = await (await scrape(url)).text();
    expect(text).toContain("# TYPE holdfast_projection_events_quarantined gauge\n");
    expect(text).toContain('holdfast_projection_events_quarantined{reason="undecodable"} 2\n');
    expect(text).toContain('holdfast_projection_events_quarantined{reason="out_of_range"} 0\n');
  });

  it("control counts the event it set aside reading the run", async () => {
    const counts = await quarantined(`${control.url}/metrics`, "control");
    expect(counts.undecodable).toBeGreaterThanOrEqual(1);
  });

  it("the scheduler counts the durable run's event it could not recover", async () => {
    const counts = await quarantined(`${scheduler.url}/holdfast/metrics`, "scheduler");
    expect(counts).toEqual({ ...zeros(), undecodable: 1 });
  });
});

describe("who may scrape", () => {
  it("the gateway refuses its metrics without a token, and to an agent's provider key, with a 401", async () => {
    for (const token of [null, API_KEY]) {
      const response = await scrape(`${origin()}/holdfast/metrics`, token);
      expect(response.status).toBe(401);
      const body = (await response.json()) as { error: { code: string; type: string } };
      expect(body.error).toMatchObject({ code: "unauthenticated", type: "authentication_error" });
    }
    // The control token reads them too.
    expect((await scrape(`${origin()}/holdfast/metrics`, TOKEN)).status).toBe(200);
  });

  it("projector, control and scheduler refuse them without a token (401)", async () => {
    for (const url of [
      `${stack.analyticsUrl}/metrics`,
      `${control.url}/metrics`,
      `${scheduler.url}/holdfast/metrics`,
    ]) {
      const response = await scrape(url, null);
      expect(response.status, url).toBe(401);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("unauthenticated");
    }
  });
});

function zeros(): Record<QuarantineReason, number> {
  return Object.fromEntries(QUARANTINE_REASONS.map((reason) => [reason, 0])) as Record<
    QuarantineReason,
    number
  >;
}
