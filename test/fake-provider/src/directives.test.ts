import { describe, expect, it } from "vitest";
import { callDirective, parseDirectives } from "./directives.js";

describe("parseDirectives", () => {
  it("reads a directive's name and JSON arguments", () => {
    expect(parseDirectives('Weather? [[call:get_weather {"city":"Paris"}]] thanks')).toEqual([
      { name: "get_weather", args: { city: "Paris" } },
    ]);
  });

  it("defaults the arguments to an empty object", () => {
    expect(parseDirectives("[[call:list_files]]")).toEqual([{ name: "list_files", args: {} }]);
  });

  it("reads several directives in order", () => {
    expect(parseDirectives('[[call:a {"n":1}]] and [[call:b]] then [[call:a {"n":2}]]')).toEqual([
      { name: "a", args: { n: 1 } },
      { name: "b", args: {} },
      { name: "a", args: { n: 2 } },
    ]);
  });

  it("reads arguments that themselves contain ]]", () => {
    expect(parseDirectives('[[call:fill {"grid":[[1,2],[3]]}]]')).toEqual([
      { name: "fill", args: { grid: [[1, 2], [3]] } },
    ]);
  });

  it("skips directives whose arguments are not a JSON object", () => {
    expect(parseDirectives("[[call:a {not json}]] [[call:b [1]]] [[call:c]]")).toEqual([
      { name: "c", args: {} },
    ]);
  });

  it("finds nothing in ordinary text", () => {
    expect(parseDirectives("please [[call me]] maybe [call:x]")).toEqual([]);
  });

  it("reads back what callDirective writes", () => {
    const args = { path: "src/a.ts", lines: [1, 2], note: "end]]" };
    expect(parseDirectives(`do ${callDirective("read_file", args)} ${callDirective("ls")}`)).toEqual([
      { name: "read_file", args },
      { name: "ls", args: {} },
    ]);
  });
});
