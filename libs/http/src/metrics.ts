import { InvalidMetricError } from "./errors.js";

/** What a scrape of a `/metrics` route is answered with: Prometheus's text format 0.0.4. */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/**
 * One metric family: a name, what it measures, and for each label every value that label
 * may take. Every combination of those values is a series, rendered whether or not
 * anything was counted under it (as 0), so an alert can be written before the first event.
 * Label values come from these sets alone, never from what is counted: a value the data
 * holds outside them (a reason a newer version added, a run id, free text) has no series
 * to go to, and a scrape's size stays the product of the sets.
 */
export interface MetricFamily<L extends string = string> {
  readonly name: string;
  readonly help: string;
  readonly type: "counter" | "gauge";
  readonly labels: Readonly<Record<L, readonly string[]>>;
  /** The value of the series with these label values; undefined (nothing counted) is 0. */
  value(labels: Readonly<Record<L, string>>): number | undefined;
}

export type MetricSpec<L extends string> = Omit<MetricFamily<L>, "type">;

/** A counter (only ever grows while the process lives; `_total` by convention), its declaration checked. */
export function counter<L extends string>(spec: MetricSpec<L>): MetricFamily<L> {
  return checked({ ...spec, type: "counter" });
}

/** A gauge (a value that goes up and down), its declaration checked. */
export function gauge<L extends string>(spec: MetricSpec<L>): MetricFamily<L> {
  return checked({ ...spec, type: "gauge" });
}

/** The families in Prometheus's text exposition format, `# HELP` and `# TYPE` before each. */
export function renderMetrics(families: readonly MetricFamily[]): string {
  const lines: string[] = [];
  for (const family of families) {
    lines.push(`# HELP ${family.name} ${escapeHelp(family.help)}`, `# TYPE ${family.name} ${family.type}`);
    const names = Object.keys(family.labels);
    for (const labels of combinations(family.labels, names)) {
      const text = names.map((name) => `${name}="${escapeLabelValue(labels[name]!)}"`).join(",");
      lines.push(`${family.name}${text === "" ? "" : `{${text}}`} ${formatValue(family.value(labels))}`);
    }
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

/** A scrape answers every series of every family: past this many in one family, a declaration is wrong. */
export const MAX_SERIES_PER_FAMILY = 1_000;

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function checked<L extends string>(family: MetricFamily<L>): MetricFamily<L> {
  if (!METRIC_NAME.test(family.name)) {
    throw new InvalidMetricError(`${JSON.stringify(family.name)} is not a Prometheus metric name`);
  }
  let series = 1;
  for (const [name, values] of Object.entries(family.labels) as [string, readonly string[]][]) {
    if (!LABEL_NAME.test(name) || name.startsWith("__")) {
      throw new InvalidMetricError(`${family.name}: ${JSON.stringify(name)} is not a label name one may use`);
    }
    if (values.length === 0 || new Set(values).size !== values.length) {
      throw new InvalidMetricError(`${family.name}: label ${name} needs one or more values, each once`);
    }
    series *= values.length;
  }
  if (series > MAX_SERIES_PER_FAMILY) {
    throw new InvalidMetricError(
      `${family.name}: its labels make ${series} series, more than ${MAX_SERIES_PER_FAMILY}`,
    );
  }
  return Object.freeze({ ...family, labels: Object.freeze({ ...family.labels }) });
}

function* combinations(
  sets: Readonly<Record<string, readonly string[]>>,
  names: readonly string[],
  at = 0,
  chosen: Record<string, string> = {},
): Generator<Record<string, string>> {
  if (at === names.length) {
    yield { ...chosen };
    return;
  }
  const name = names[at]!;
  for (const value of sets[name]!) {
    chosen[name] = value;
    yield* combinations(sets, names, at + 1, chosen);
  }
}

function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

function formatValue(value: number | undefined): string {
  if (value === undefined) return "0";
  if (Number.isNaN(value)) return "NaN";
  if (value === Number.POSITIVE_INFINITY) return "+Inf";
  if (value === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(value);
}
