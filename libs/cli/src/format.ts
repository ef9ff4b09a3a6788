/** A control character but the line feed: what a terminal acts on rather than shows. */
function isTerminalControl(code: number): boolean {
  return (code <= 0x1f && code !== 0x0a) || (code >= 0x7f && code <= 0x9f);
}

/**
 * Text from the log (a model, a reason, a tool's name: whatever a provider, an agent or an
 * operator wrote) as the terminal should show it: each control character but the line feed
 * (escape sequences that move the cursor, retitle the window, rewrite what was printed)
 * written as its escape (`\u001b`), never acted on.
 */
export function terminalSafe(text: string): string {
  let safe = "";
  for (const character of text) {
    const code = character.codePointAt(0)!;
    safe += isTerminalControl(code) ? `\\u${code.toString(16).padStart(4, "0")}` : character;
  }
  return safe;
}

/** Renders rows as an aligned text table; numbers align right; text made terminal-safe. */
export function table(headers: string[], rows: (string | number)[][]): string {
  const cells = rows.map((row) => row.map((cell) => terminalSafe(String(cell)).replaceAll("\n", "\\n")));
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
