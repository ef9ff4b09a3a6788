import { describe, expect, it } from "vitest";
import { openDebianArchive, parseControl, parseRelations } from "./debian.js";
import { DebianArchiveError, DebianArchiveUnsupportedError } from "./errors.js";

describe("parseControl", () => {
  it("splits stanzas and keeps continuation lines with their field", () => {
    const text = [
      "Package: python3-h11",
      "Version: 0.14.0-1.1~deb12u1",
      "Depends: python3-typing-extensions | python3 (>> 3.8), python3:any",
      "Description: A pure-Python, bring-your-own-I/O implementation of HTTP/1.1",
      " h11 is an HTTP/1.1 protocol library.",
      " .",
      "",
      "",
      "Package: python3-sniffio",
      "Version: 1.2.0-1",
      "",
    ].join("\n");
    expect(parseControl(text)).toEqual([
      {
        Package: "python3-h11",
        Version: "0.14.0-1.1~deb12u1",
        Depends: "python3-typing-extensions | python3 (>> 3.8), python3:any",
        Description:
          "A pure-Python, bring-your-own-I/O implementation of HTTP/1.1\nh11 is an HTTP/1.1 protocol library.\n.",
      },
      { Package: "python3-sniffio", Version: "1.2.0-1" },
    ]);
  });

  it("reads nothing from empty output", () => {
    expect(parseControl("")).toEqual([]);
    expect(parseControl("\n\n")).toEqual([]);
  });
});

describe("parseRelations", () => {
  it("reads groups of alternatives with qualifiers and version constraints", () => {
    expect(
      parseRelations("python3-typing-extensions (>= 3.7.4) | python3 (>> 3.9), python3:any, ca-certificates"),
    ).toEqual([
      [
        { name: "python3-typing-extensions", operator: ">=", version: "3.7.4" },
        { name: "python3", operator: ">>", version: "3.9" },
      ],
      [{ name: "python3", qualifier: "any" }],
      [{ name: "ca-certificates" }],
    ]);
  });

  it("reads qualifier and constraint together, and drops architecture restrictions", () => {
    expect(parseRelations("python3:any (>= 3.7~), libc6 [amd64]")).toEqual([
      [{ name: "python3", qualifier: "any", operator: ">=", version: "3.7~" }],
      [{ name: "libc6" }],
    ]);
  });

  it("has no relations for a missing or empty field", () => {
    expect(parseRelations(undefined)).toEqual([]);
    expect(parseRelations(" ")).toEqual([]);
  });

  it("names the relation it cannot read", () => {
    expect(() => parseRelations("python3 (>= 3.11, ok")).toThrow(DebianArchiveError);
    expect(() => parseRelations("python3 (>= 3.11, ok")).toThrow(/"python3 \(>= 3\.11"/);
  });
});

describe("openDebianArchive", () => {
  it("names the missing tools and runs nothing when apt-get or dpkg is absent", async () => {
    const calls: string[] = [];
    const attempt = openDebianArchive({
      suite: "bookworm",
      system: {
        env: {},
        which: async (command) => (command === "dpkg" ? "/usr/bin/dpkg" : undefined),
        exec: async (file, args) => {
          calls.push([file, ...args].join(" "));
          return { stdout: "", stderr: "" };
        },
      },
    });
    await expect(attempt).rejects.toBeInstanceOf(DebianArchiveUnsupportedError);
    await expect(attempt).rejects.toMatchObject({ missing: ["apt-get"], retryable: false });
    expect(calls).toEqual([]);
  });
});
