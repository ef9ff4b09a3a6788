import { holdfastCommand } from "./invocation.js";
/**
 * Tiny agents against the demo provider, so a fresh `holdfast up --demo` has runs to look
 * at on every API Holdfast meters: Chat Completions with a tool call, the tool's answer and
 * a streamed reply; Responses continued by previous_response_id; Anthropic Messages; and
 * an agent that Holdfast identifies by fingerprint alone.
 */
export async function runDemo(
  gatewayUrl: string,
  analyticsUrl: string,
  /** A control token (read-only or not), when the analytics API needs one. */
  token: string | undefined,
): Promise<string> {
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
  // OpenAI Responses: the second call names no run, only the response it continues.
  const researcher = { "X-Holdfast-Run": "demo-researcher", "X-Holdfast-Tag": "demo" };
  const opened = await post(gatewayUrl, "/responses", researcher, {
    model: "gpt-4o-mini",
    instructions: "You research lighthouses.",
    input: "Which lighthouse is the oldest still working?",
  });
  await post(
    gatewayUrl,
    "/responses",
    {},
    {
      model: "gpt-4o-mini",
      previous_response_id: opened.id,
      input: "And the tallest?",
      stream: true,
    },
  );
  // Anthropic Messages, named by metadata.user_id.
  const anthropic = { "x-api-key": "sk-ant-demo-key", "anthropic-version": "2023-06-01" };
  for (const stream of [false, true]) {
    await post(gatewayUrl, "/messages", anthropic, {
      model: "claude-3-5-haiku-20241022",
      max_tokens: 200,
      stream,
      metadata: { user_id: "demo-claude" },
      messages: [{ role: "user", content: "Write a haiku about the sea." }],
    });
  }
  await projected(analyticsUrl, token, ["demo-agent", "demo-researcher", "demo-claude"]);
  const hf = holdfastCommand();
  return `
Demo: three agents, one per API Holdfast meters.
  demo-agent       OpenAI Chat Completions: 3 calls, one a tool call, one streamed
  demo-researcher  OpenAI Responses: 2 calls, the second joined by previous_response_id
  demo-claude      Anthropic Messages: 2 calls, named by metadata.user_id
and a fourth with no run id made 2 calls and was fingerprinted. Look:
  ${hf} ls
  ${hf} show demo-agent
  ${hf} query "SELECT run_id, api, model, input_tokens, output_tokens, cost_usd FROM steps"`;
}

/** Waits until ClickHouse has every call of these runs, so `ls` shows them at once. */
async function projected(analyticsUrl: string, token: string | undefined, runIds: string[]): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${analyticsUrl}/v1/runs?limit=1000`, {
        headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      });
      const { runs } = (await response.json()) as { runs: { run_id: string; in_flight: number | string }[] };
      const settled = runIds.every((id) => runs.some((r) => r.run_id === id && Number(r.in_flight) === 0));
      if (settled) return;
    } catch {
      // The projector may be busy; look again.
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function chat(gatewayUrl: string, headers: Record<string, string>, body: unknown) {
  return post(gatewayUrl, "/chat/completions", { authorization: "Bearer sk-demo-key", ...headers }, body);
}

async function post(
  gatewayUrl: string,
  path: string,
  headers: Record<string, string>,
  body: unknown,
  // biome-ignore lint/suspicious/noExplicitAny: the demo reads a few fields of a provider response
): Promise<any> {
  const response = await fetch(`${gatewayUrl}${path}`, {
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
