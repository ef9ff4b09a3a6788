/** The one line to change in an agent, for the OpenAI and Anthropic SDKs, Python and Node. */
export function pointYourAgent(gatewayUrl: string): string {
  const origin = new URL(gatewayUrl).origin;
  return `  Python   client = OpenAI(base_url="${gatewayUrl}")
           client = Anthropic(base_url="${origin}")
  Node     const client = new OpenAI({ baseURL: "${gatewayUrl}" })
           const client = new Anthropic({ baseURL: "${origin}" })
  or set   OPENAI_BASE_URL=${gatewayUrl}  ANTHROPIC_BASE_URL=${origin}`;
}
