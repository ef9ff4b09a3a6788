import { describe, expect, it } from "vitest";
import { ResponseMemory } from "./memory.js";

const response = { apiKey: "sk-a", inputTokens: 10, outputTokens: 5 };

describe("ResponseMemory", () => {
  it("recalls a response for the key that created it, and for no other key", () => {
    const memory = new ResponseMemory();
    memory.remember("resp_1", response);
    expect(memory.recall("sk-a", "resp_1")).toEqual(response);
    expect(memory.recall("sk-b", "resp_1")).toBeUndefined();
    expect(memory.recall("sk-a", "resp_2")).toBeUndefined();
  });

  it("forgets the oldest response past its capacity", () => {
    const memory = new ResponseMemory(2);
    memory.remember("resp_1", response);
    memory.remember("resp_2", response);
    memory.remember("resp_3", response);
    expect(memory.recall("sk-a", "resp_1")).toBeUndefined();
    expect(memory.recall("sk-a", "resp_3")).toEqual(response);
  });
});
