/** Renders rows as an aligned text table; numbers align right. */
export function table(headers: string[], rows: (string | number)[][]): string {
  const cells = rows.map((row) => row.map((cell) => String(cell)));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((row) => row[i]?.length ?? 0)));
  const numeric = headers.map((_, i) => rows.length > 0 && rows.every((row) => typeof row[i] === "number"));
  const line = (row: string[]) =>
    row
      .map((cell, i) => (numeric[i] ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(headers), ...cells.map(line)].join("\n");
}

/** Dollars with enough digits for small calls; a trailing "+" when some steps are unpriced. */
export function usd(value: number, unpricedSteps = 0): string {
  const digits = value !== 0 && Math.abs(value) < 0.01 ? 6 : 4;
  return `$${value.toFixed(digits)}${unpricedSteps > 0 ? "+" : ""}`;
}

export function nanoUsd(nano: number | null): string {
  return nano === null ? "unknown" : usd(nano / 1e9);
}

export function ago(from: Date | number, now = Date.now()): string {
  const seconds = Math.max(0, Math.round((now - (typeof from === "number" ? from : from.getTime())) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86_400)}d ago`;
}

/** ClickHouse DateTime64 text ("2026-12-02 13:35:08.375", UTC) as a Date. */
export function fromClickHouseTime(text: string): Date {
  return new Date(`${text.replace(" ", "T")}Z`);
}
