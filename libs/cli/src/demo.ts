import { holdfastCommand } from "./invocation.js";
/**
 * A tiny agent loop against the demo provider, so a fresh `holdfast up --demo` has runs
 * to look at: a tool call, the tool's answer, a streamed reply, and a second agent that
 * Holdfast identifies by fingerprint alone.
 */
export async function runDemo(gatewayUrl: string): Promise<string> {
  const tools = [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "Current weather for a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      },
    },
  ];
  const named = { "X-Holdfast-Run": "demo-agent", "X-Holdfast-Tag": "demo" };
  const messages: unknown[] = [
    { role: "system", content: "You are a travel assistant." },
    { role: "user", content: 'What should I wear in Paris today? [[call:get_weather {"city":"Paris"}]]' },
  ];
  const first = await chat(gatewayUrl, named, { model: "gpt-4o-mini", messages, tools });
  const call = first.choices[0].message.tool_calls[0];
  messages.push(first.choices[0].message, {
    role: "tool",
    tool_call_id: call.id,
    content: JSON.stringify({ city: "Paris", celsius: 11, sky: "light rain" }),
  });
  await chat(gatewayUrl, named, { model: "gpt-4o-mini", messages, tools });
  await chat(gatewayUrl, named, {
    model: "gpt-4o-mini",
    stream: true,
    messages: [...messages, { role: "user", content: "Summarise that in one line." }],
  });
  for (let i = 0; i < 2; i++) {
    await chat(
      gatewayUrl,
      {},
      {
        model: "gpt-4o",
        messages: [
          { role: "system", content: "You triage support tickets." },
          { role: "user", content: "Ticket 1: the export button does nothing." },
          ...Array.from({ length: i }, (_, n) => ({ role: "user", content: `Ticket ${n + 2}: follow-up.` })),
        ],
      },
    );
  }
  const hf = holdfastCommand();
  return `
Demo: an agent made 3 calls as run "demo-agent" (tag demo), one of them a tool call and
one streamed; a second agent with no run id made 2 calls and was fingerprinted. Look:
  ${hf} ls
  ${hf} show demo-agent
  ${hf} query "SELECT run_id, model, input_tokens, output_tokens, cost_usd FROM steps"`;
}

// biome-ignore lint/suspicious/noExplicitAny: the demo reads a few fields of a provider response
async function chat(gatewayUrl: string, headers: Record<string, string>, body: unknown): Promise<any> {
  const response = await fetch(`${gatewayUrl}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-demo-key", ...headers },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`demo call failed: ${response.status} ${await response.text()}`);
  if ((body as { stream?: boolean }).stream) {
    await response.text();
    return undefined;
  }
  return response.json();
}
