// An agent written with @holdfast/sdk, as the README walks through it:
//
//   ./holdfast deploy libs/sdk/examples/research.mjs
//   ./holdfast worker libs/sdk/examples/research.mjs
//   ./holdfast runs submit research --input '{"question":"Why do lighthouses flash?"}' --wait
//
// Each model call and each tool call is a step: recorded when it returns, so a run that
// fails (or whose worker dies) goes on from the step it was in, not from the start.
import { agent, NonRetriable } from "@holdfast/sdk";

const TOOLS = {
  search: (q) => `3 sources on "${q}"`,
  encyclopedia: (q) => `an article about ${q}`,
};

export const research = agent(
  { name: "research", maxDurationSeconds: 600, concurrencyPerKey: 2, rateLimit: "30/min" },
  async (run, task) => {
    if (typeof task?.question !== "string") throw new NonRetriable("the input needs a question");
    // The model calls go through the gateway under this run's id (metered, held, gated).
    const openai = await run.openai({ apiKey: process.env.OPENAI_API_KEY ?? "sk-demo" });
    const plan = await run.step("model", async () => {
      const reply = await openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: `Plan research: ${task.question}` }],
      });
      return reply.choices[0]?.message.content ?? "";
    });
    // The turn's tool calls run at once, each checkpointed on its own.
    const found = await run.parallel(
      Object.entries(TOOLS).map(([name, tool]) => ({ label: `tool:${name}`, fn: () => tool(task.question) })),
    );
    const answer = await run.step("model", async () => {
      const reply = await openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [
          { role: "user", content: `Plan research: ${task.question}` },
          { role: "assistant", content: plan },
          { role: "user", content: `Sources: ${found.join("; ")}. Answer: ${task.question}` },
        ],
      });
      return reply.choices[0]?.message.content ?? "";
    });
    if (answer.length < 20) run.markDegraded("the answer came back short");
    return { question: task.question, answer, sources: found };
  },
);
