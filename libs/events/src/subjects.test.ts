import { describe, expect, it } from "vitest";
import { InvalidRunIdError } from "./errors.js";
import {
  assertRunId,
  assertTag,
  isTenantsRun,
  MAX_RUN_ID_LENGTH,
  MAX_TAG_LENGTH,
  runIdDefect,
  runIdFromToken,
  runToken,
  scopedRunId,
  subjects,
  tenantDefect,
} from "./subjects.js";

// What NATS forbids or treats specially inside a subject token.
const UNSAFE_IN_TOKEN = /[.*>\s]|[^\x21-\x7e]/;

describe("run tokens", () => {
  const awkward = [
    "agent-7",
    "a.b",
    "a*b",
    "a>b",
    "orders.>",
    "*",
    ">",
    "with space",
    "tab\there".replace("\t", " "),
    "ünïcödé",
    "日本語のラン",
    "emoji 🚀 run",
    "_leading-underscore",
    "Agent-7",
    "x".repeat(MAX_RUN_ID_LENGTH),
  ];

  it("never puts a character NATS treats specially into a subject token", () => {
    for (const id of awkward) expect(runToken(id)).not.toMatch(UNSAFE_IN_TOKEN);
  });

  it("keeps every id distinct and recoverable", () => {
    const tokens = awkward.map(runToken);
    expect(new Set(tokens).size).toBe(awkward.length);
    for (const id of awkward) expect(runIdFromToken(runToken(id))).toBe(id);
  });

  it("leaves plain ids readable", () => {
    expect(runToken("agent-7")).toBe("agent-7");
    expect(runToken("run_2026_12_02")).toBe("run_2026_12_02");
  });

  it("cannot be confused by an id that looks like an encoded token", () => {
    const encodedOfDot = runToken("a.b");
    expect(encodedOfDot.startsWith("_")).toBe(true);
    // An agent naming its run exactly like that token gets a different token.
    expect(runToken(encodedOfDot)).not.toBe(encodedOfDot);
  });

  it("refuses ids that cannot name a run", () => {
    expect(() => assertRunId("")).toThrow(InvalidRunIdError);
    expect(() => runToken("x".repeat(MAX_RUN_ID_LENGTH + 1))).toThrow(/limit is 256/);
    expect(() => runToken("line\nbreak")).toThrow(/control character/);
  });

  it("refuses an id with an unpaired surrogate, which UTF-8 would merge with other ids", () => {
    // Both would encode as "run-\ufffd": two runs on one subject.
    for (const id of ["run-\ud800", "run-\udbff", "\udc00", "a\udfffb", "🚀\ud83d", "\ude80🚀"]) {
      expect(() => runToken(id)).toThrow(InvalidRunIdError);
      expect(() => assertRunId(id)).toThrow(/unpaired UTF-16 surrogate/);
    }
    expect(runToken("run-\ufffd")).toBe(`_${Buffer.from("run-\ufffd").toString("base64url")}`);
  });

  it("counts the length limit in characters (code points), so an emoji counts once", () => {
    expect(runIdFromToken(runToken("🚀".repeat(MAX_RUN_ID_LENGTH)))).toBe("🚀".repeat(MAX_RUN_ID_LENGTH));
    expect(() => runToken("🚀".repeat(MAX_RUN_ID_LENGTH + 1))).toThrow(
      /is 257 characters long; the limit is 256/,
    );
  });
});

describe("tags", () => {
  it("are held to the same rules, with their own limit", () => {
    expect(() => assertTag("team-ünïcödé 🚀")).not.toThrow();
    expect(() => assertTag("🚀".repeat(MAX_TAG_LENGTH))).not.toThrow();
    expect(() => assertTag("x".repeat(MAX_TAG_LENGTH + 1))).toThrow(/The tag is 129 characters long/);
    expect(() => assertTag("tag-\ud800")).toThrow(InvalidRunIdError);
    expect(() => assertTag("a\u0085b")).toThrow(/control character/);
  });
});

describe("runs scoped by tenant", () => {
  it("puts a tenant's runs under its name, so two tenants sending one id get two runs", () => {
    expect(scopedRunId("acme", "run-1")).toBe("acme/run-1");
    expect(scopedRunId("globex", "run-1")).toBe("globex/run-1");
    expect(scopedRunId("acme", "a/b")).toBe("acme/a/b");
    expect(scopedRunId("ünï 🚀", "x")).toBe("ünï 🚀/x");
  });

  it("leaves an id already under the tenant's prefix as it is (a durable run's worker sends its run's id back)", () => {
    expect(scopedRunId("acme", "acme/run-1")).toBe("acme/run-1");
    expect(scopedRunId("acme", scopedRunId("acme", "a/b"))).toBe("acme/a/b");
    // Only the tenant's own prefix, whole: not a longer tenant's name, not another tenant's.
    expect(scopedRunId("acme", "acme-corp/run-1")).toBe("acme/acme-corp/run-1");
    expect(scopedRunId("acme", "globex/run-1")).toBe("acme/globex/run-1");
    expect(scopedRunId("acme", "acme")).toBe("acme/acme");
  });

  it('keeps an untenanted id as sent, unless it holds a "/": then it starts with one, so it never names a tenant\'s run', () => {
    expect(scopedRunId("", "run-1")).toBe("run-1");
    expect(scopedRunId("", "fp-0123456789abcdef-2")).toBe("fp-0123456789abcdef-2");
    expect(scopedRunId("", "acme/x")).toBe("/acme/x");
    expect(scopedRunId("", "a/b/c")).toBe("/a/b/c");
    expect(scopedRunId("", "/acme/x")).toBe("/acme/x");
    expect(scopedRunId("", "/")).toBe("/");
    expect(scopedRunId("", "x/")).toBe("/x/");
  });

  it("never gives two (tenant, id) pairs of different tenants the same run", () => {
    const tenants = ["", "acme", "globex", "a", "acme-corp"];
    const ids = ["x", "acme/x", "/acme/x", "a/acme/x", "globex/x", "/x", "acme-corp/x", "acme", "a/b"];
    const owner = new Map<string, string>();
    for (const tenant of tenants) {
      for (const id of ids) {
        const run = scopedRunId(tenant, id);
        expect(owner.get(run) ?? tenant).toBe(tenant);
        owner.set(run, tenant);
        // Scoping twice changes nothing: the run is its tenant's, and no other's.
        expect(scopedRunId(tenant, run)).toBe(run);
        for (const other of tenants) expect(isTenantsRun(other, run)).toBe(other === tenant);
      }
    }
  });

  it("counts the tenant's prefix toward the run id's length", () => {
    const id = "x".repeat(MAX_RUN_ID_LENGTH - "acme/".length);
    expect(runIdDefect(scopedRunId("acme", id))).toBeUndefined();
    expect(runIdDefect(scopedRunId("acme", `${id}x`))).toBe("is 257 characters long; the limit is 256");
    expect(runIdDefect(scopedRunId("", `a/${"x".repeat(MAX_RUN_ID_LENGTH - 2)}`))).toBe(
      "is 257 characters long; the limit is 256",
    );
  });

  it('refuses a tenant holding "/", and whatever a tag may not be', () => {
    expect(tenantDefect("acme")).toBeUndefined();
    expect(tenantDefect("team ünï 🚀")).toBeUndefined();
    expect(tenantDefect("acme/eu")).toMatch(/contains "\/"/);
    expect(tenantDefect("/")).toMatch(/contains "\/"/);
    expect(tenantDefect("")).toBe("is empty");
    expect(tenantDefect("x".repeat(MAX_TAG_LENGTH + 1))).toMatch(/limit is 128/);
    expect(tenantDefect("a\u0000b")).toMatch(/control character/);
  });
});

describe("subjects", () => {
  const s = subjects("hf");

  it("puts one run's events under one wildcard and each type in the last token", () => {
    expect(s.runEvent("a.b", "StepStarted")).toBe(`hf.run.${runToken("a.b")}.StepStarted`);
    expect(s.run("a.b")).toBe(`hf.run.${runToken("a.b")}.*`);
    expect(s.ofType("StepFailed")).toBe("hf.run.*.StepFailed");
    expect(s.allRuns).toBe("hf.run.>");
    expect(s.eventsStream).toBe("HF_EVENTS");
  });

  it("recovers the run id from a subject", () => {
    for (const id of ["agent-7", "a.b.c", "🚀 x"])
      expect(s.runIdOf(s.runEvent(id, "StepCompleted"))).toBe(id);
  });

  it("rejects a prefix that is not a safe token", () => {
    expect(() => subjects("Bad.Prefix")).toThrow(/must match/);
  });
});

describe("the fleet's subject", () => {
  it("is the token _ for the empty id, which no run id can have, and reads back as empty", () => {
    expect(runToken("")).toBe("_");
    expect(runIdFromToken("_")).toBe("");
    expect(subjects("hf").run("")).toBe("hf.run._.*");
    for (const id of ["_", "a", "é", "_x"]) expect(runToken(id)).not.toBe("_");
  });
});
