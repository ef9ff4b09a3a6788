import { describe, expect, it } from "vitest";
import { DuplicateHeaderError, RequestHeaders, UndecodableHeaderError } from "./headers.js";

/** Header bytes as Node hands them over: each byte one Latin-1 character. */
function raw(name: string, ...values: Buffer[]): RequestHeaders {
  return new RequestHeaders(values.flatMap((value) => [name, value.toString("latin1")]));
}

describe("request header values", () => {
  it("reads UTF-8 bytes as the UTF-8 they are", () => {
    expect(raw("X-Run", Buffer.from("run-é日本🚀", "utf8")).get("x-run")).toBe("run-é日本🚀");
  });

  it("reads bytes with no UTF-8 in them as Latin-1, as Python's http.client sends a str", () => {
    expect(raw("X-Run", Buffer.from("run-café", "latin1")).get("X-Run")).toBe("run-café");
  });

  it("refuses a value that is UTF-8 and then not, naming the header, instead of storing mojibake", () => {
    // "hdr-é" in UTF-8, then 0xFF: read as Latin-1 this was "hdr-Ã©ÿ".
    const headers = raw("X-Holdfast-Run", Buffer.concat([Buffer.from("hdr-é", "utf8"), Buffer.from([0xff])]));
    expect(() => headers.get("X-Holdfast-Run")).toThrow(UndecodableHeaderError);
    expect(() => headers.get("X-Holdfast-Run")).toThrow(/X-Holdfast-Run is not valid UTF-8/);
  });

  it("refuses a value holding an encoded surrogate among UTF-8 characters", () => {
    const headers = raw("X-Run", Buffer.concat([Buffer.from("日", "utf8"), Buffer.from([0xed, 0xa0, 0x80])]));
    expect(() => headers.get("X-Run")).toThrow(UndecodableHeaderError);
  });

  it("refuses a header sent twice with different values, and takes it sent twice the same", () => {
    expect(() => raw("X-Run", Buffer.from("a"), Buffer.from("b")).get("X-Run")).toThrow(DuplicateHeaderError);
    expect(raw("X-Run", Buffer.from("a"), Buffer.from("a")).get("X-Run")).toBe("a");
  });
});
