import { describe, expect, it } from "vitest";
import { table, terminalSafe } from "./format.js";

describe("text from the log on an operator's terminal", () => {
  it("shows a terminal's escape sequences written out, never acted on, and keeps the lines", () => {
    const retitle = "gpt-4o\u001b]0;all runs resumed\u0007\u001b[2J";
    const shown = terminalSafe(`model ${retitle}\nreason \u009b31mred`);
    expect(shown).toBe("model gpt-4o\\u001b]0;all runs resumed\\u0007\\u001b[2J\nreason \\u009b31mred");
    const controls = [...shown].filter((c) => c !== "\n" && (c < " " || (c >= "\u007f" && c <= "\u009f")));
    expect(controls).toEqual([]);
  });

  it("keeps every cell of a table on its row: a line feed in a cell is written out too", () => {
    const rendered = table(["run", "tag"], [["a\nb   1 running", "\u001b[31mprod"]]);
    const cell = "a\\nb   1 running";
    expect(rendered.split("\n")).toEqual([`${"run".padEnd(cell.length)}  tag`, `${cell}  \\u001b[31mprod`]);
  });
});
