import { prefixHash } from "@holdfast/providers";
import { describe, expect, it } from "vitest";
import { chatCall } from "../pipeline/call.fixture.js";
import { Compacting, type CompactingOptions } from "./compacting.js";

/** Prediction's compaction for a run whose log recorded these compactions. */
function compactingWith(compactions: unknown[]): Compacting {
  return new Compacting({
    config: { compaction: "off", compaction_keep: 4, summary_model: "" },
    ledger: { cached: () => ({ compactions, compactNext: 0 }) },
  } as unknown as CompactingOptions);
}

describe("a run's recorded compactions, applied to its next call", () => {
  it("are applied once per call: an agent that repeats the turns they dropped keeps its later turns", async () => {
    const dropped = [
      { role: "user", content: "status?" },
      { role: "assistant", content: "still running" },
    ];
    const compacting = compactingWith([
      { prefixHash: prefixHash(dropped), prefixMessages: 2, replacementJson: "[]" },
    ]);
    const call = chatCall({
      model: "gpt-4o",
      messages: [{ role: "system", content: "poll the job" }, ...dropped, ...dropped, ...dropped],
    });
    const first = await compacting.asRecorded(call);
    expect(first?.kind).toBe("rewrite");
    call.rewrite(first!.body);
    // Asked again for the call as it now is (the pipeline does after a rewrite): it goes as it is.
    expect(await compacting.asRecorded(call)).toBeUndefined();
    expect((call.body.value as { messages: unknown[] }).messages).toHaveLength(5);
  });
});
