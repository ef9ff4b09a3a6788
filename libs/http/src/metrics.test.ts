import { QUARANTINE_REASONS, type QuarantineReason } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { InvalidMetricError } from "./errors.js";
import { counter, gauge, renderMetrics } from "./metrics.js";
import { logReaderMetrics } from "./service-metrics.js";

const counts = (byReason: Partial<Record<string, number>>) => ({
  by_reason: byReason as Record<QuarantineReason, number>,
});

describe("renderMetrics", () => {
  it("writes each family in the text exposition format: HELP, TYPE, then one line per series", () => {
    const text = renderMetrics([
      counter({
        name: "calls_total",
        help: "Calls answered.",
        labels: { service: ["gateway"], outcome: ["ok", "failed"] },
        value: ({ outcome }) => (outcome === "ok" ? 41 : undefined),
      }),
      gauge({ name: "started_seconds", help: "When.", labels: {}, value: () => 1_765_065_600.25 }),
    ]);
    expect(text).toBe(
      [
        "# HELP calls_total Calls answered.",
        "# TYPE calls_total counter",
        'calls_total{service="gateway",outcome="ok"} 41',
        'calls_total{service="gateway",outcome="failed"} 0',
        "# HELP started_seconds When.",
        "# TYPE started_seconds gauge",
        "started_seconds 1765065600.25",
        "",
      ].join("\n"),
    );
  });

  it("escapes backslashes, quotes and newlines in label values, and backslashes and newlines in help", () => {
    const text = renderMetrics([
      counter({
        name: "odd_total",
        help: 'Two lines\nand a \\ "quoted" word.',
        labels: { path: ['C:\\dir "x"\nnext'] },
        value: () => 1,
      }),
    ]);
    expect(text.split("\n")).toEqual([
      '# HELP odd_total Two lines\\nand a \\\\ "quoted" word.',
      "# TYPE odd_total counter",
      'odd_total{path="C:\\\\dir \\"x\\"\\nnext"} 1',
      "",
    ]);
  });

  it("writes values Prometheus reads: NaN, +Inf, -Inf, large numbers", () => {
    const values = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1e21];
    const text = renderMetrics(
      values.map((v, i) => gauge({ name: `g${i}`, help: "h", labels: {}, value: () => v })),
    );
    expect(text.split("\n").filter((line) => !line.startsWith("#"))).toEqual([
      "g0 NaN",
      "g1 +Inf",
      "g2 -Inf",
      "g3 1e+21",
      "",
    ]);
  });

  it("refuses a declaration Prometheus cannot read or that could grow without bound", () => {
    const valid = { help: "h", value: () => 0 };
    expect(() => counter({ ...valid, name: "bad-name", labels: {} })).toThrow(InvalidMetricError);
    expect(() => counter({ ...valid, name: "ok_total", labels: { "bad-label": ["a"] } })).toThrow(
      InvalidMetricError,
    );
    expect(() => counter({ ...valid, name: "ok_total", labels: { __reserved: ["a"] } })).toThrow(
      InvalidMetricError,
    );
    expect(() => counter({ ...valid, name: "ok_total", labels: { reason: [] } })).toThrow(InvalidMetricError);
    expect(() => counter({ ...valid, name: "ok_total", labels: { reason: ["a", "a"] } })).toThrow(
      InvalidMetricError,
    );
    const many = Array.from({ length: 40 }, (_, i) => `v${i}`);
    expect(() => counter({ ...valid, name: "ok_total", labels: { a: many, b: many } })).toThrow(
      /1600 series, more than 1000/,
    );
  });
});

describe("logReaderMetrics", () => {
  it("counts every quarantine reason of the fixed set, zeros included, with when the process started", () => {
    const text = renderMetrics(
      logReaderMetrics("gateway", () => counts({ undecodable: 2, wrong_subject: 1 })),
    );
    const series = text.split("\n").filter((line) => line.startsWith("holdfast_events_quarantined_total"));
    expect(series).toEqual(
      QUARANTINE_REASONS.map(
        (reason) =>
          `holdfast_events_quarantined_total{service="gateway",reason="${reason}"} ${
            reason === "undecodable" ? 2 : reason === "wrong_subject" ? 1 : 0
          }`,
      ),
    );
    expect(text).toContain("# TYPE holdfast_events_quarantined_total counter\n");
    expect(text).toContain("# TYPE holdfast_process_start_time_seconds gauge\n");
    const started = /^holdfast_process_start_time_seconds\{service="gateway"\} (\S+)$/m.exec(text);
    expect(Number(started?.[1])).toBeGreaterThan(Date.now() / 1_000 - 3_600);
    expect(Number(started?.[1])).toBeLessThanOrEqual(Date.now() / 1_000);
  });

  it("gives a reason outside the fixed set no series: a count keyed by anything else cannot add one", () => {
    const text = renderMetrics(
      logReaderMetrics("control", () =>
        counts({ undecodable: 1, "run-0193\n} 1e9": 5, not_a_reason: 7, __proto__: 3 }),
      ),
    );
    const series = text.split("\n").filter((line) => line.startsWith("holdfast_events_quarantined_total"));
    expect(series).toHaveLength(QUARANTINE_REASONS.length);
    expect(text).not.toContain("not_a_reason");
    expect(text).not.toContain("run-0193");
    expect(text).toContain('holdfast_events_quarantined_total{service="control",reason="undecodable"} 1\n');
  });

  it("reads the counts at each scrape, not once", () => {
    let undecodable = 0;
    const families = logReaderMetrics("scheduler", () => counts({ undecodable }));
    const line = () =>
      renderMetrics(families)
        .split("\n")
        .find((l) => l.includes('reason="undecodable"'));
    expect(line()).toBe('holdfast_events_quarantined_total{service="scheduler",reason="undecodable"} 0');
    undecodable = 3;
    expect(line()).toBe('holdfast_events_quarantined_total{service="scheduler",reason="undecodable"} 3');
  });
});
