import { describe, expect, it } from "vitest";
import { redactKnownSecrets, redactSecretsDeep, scrubSecrets } from "./secrets.js";

describe("scrubSecrets", () => {
  it("given a configured secret anywhere in the text, then every occurrence is redacted", () => {
    const secret = "hf-upstream-9f8e7d6c5b4a";
    const text = `key ${secret} failed; retried with ${secret}.`;
    expect(scrubSecrets(text, [secret])).toBe("key [redacted] failed; retried with [redacted].");
  });

  it("given two secrets where one contains the other, then no remainder of the longer one survives", () => {
    expect(scrubSecrets("token=abcdef123456XYZ", ["abcdef", "abcdef123456XYZ"])).not.toMatch(/123456|XYZ/);
  });

  it("given an empty secret, then the text is not mangled", () => {
    expect(scrubSecrets("plain text", [""])).toBe("plain text");
  });

  it("given a bearer token, then the token goes and the word stays", () => {
    const text =
      "upstream said: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl was rejected";
    const scrubbed = scrubSecrets(text, []);
    expect(scrubbed).not.toContain("eyJ");
    expect(scrubbed).toContain("Bearer [redacted]");
  });

  it("given a bearer token that is not key-shaped, then it is still redacted", () => {
    expect(scrubSecrets("sent Bearer opaque_token_value_123", [])).toBe("sent Bearer [redacted]");
  });

  it("given OpenAI's masked key echo, then no fragment of the key survives and the sentence reads on", () => {
    const message =
      "Incorrect API key provided: sk-bad***...1234. You can find your API key at https://platform.openai.com/account/api-keys.";
    const scrubbed = scrubSecrets(message, []);
    expect(scrubbed).toBe(
      "Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys.",
    );
  });

  it.each([
    ["an OpenAI project key", "sk-proj-AbCdEf0123456789_xyz-ABCDEFGHIJ"],
    ["a masked project key", "sk-proj-********************************************wxyz"],
    ["an Anthropic key", "sk-ant-api03-AbC_dEf-0123456789abcdefghij-klmnOPQ"],
    ["an OpenRouter key", "sk-or-v1-0123456789abcdef0123456789abcdef"],
    ["a Groq key", "gsk_0123456789ABCDEFabcdef0123456789"],
    ["an xAI key", "xai-0123456789ABCDEFabcdef"],
    ["a Google key", "AIzaSyA1234567890abcdefghijklmnopqrstu"],
    ["a Holdfast tenant's gateway key", "hfk_Zm9vYmFyLWJhei1xdXV4LTAxMjM0NTY3ODlhYmNkZWY"],
    ["a masked key of unknown shape", "hfk_ab12***...yz89"],
    ["a starred key of unknown shape", "abc123**********wxyz"],
  ])("given %s in a message, then it is redacted whole", (_case, key) => {
    const scrubbed = scrubSecrets(`rejected key ${key} for this org`, []);
    expect(scrubbed).toBe("rejected key [redacted] for this org");
  });

  it("given an API key in an echoed header or URL, then the value is redacted and the name kept", () => {
    expect(scrubSecrets('headers: {"x-api-key": "my-custom-key-value"}', [])).toBe(
      'headers: {"x-api-key": "[redacted]"}',
    );
    expect(scrubSecrets("x-holdfast-key: some-tenant-key", [])).toBe("x-holdfast-key: [redacted]");
    expect(scrubSecrets("GET /v1/models?api_key=zzz999&x=1", [])).toBe(
      "GET /v1/models?api_key=[redacted]&x=1",
    );
  });

  it("given ordinary error prose, then it is left as it was", () => {
    const text =
      "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth. " +
      "This is a task-based, risk-free, **important** message with a rating of *** and model gpt-4o-mini.";
    expect(scrubSecrets(text, [])).toBe(text);
  });
});

describe("the request's own key, in the forms providers echo it", () => {
  const key = "sk-proj-SECRETgood7Qx9Zr2Lw4Mv8Nt6Kp3Hy5";

  it.each([
    [
      "named by its last characters",
      "rate limited for the key ending in 3Hy5, retry",
      "rate limited for the key ending in [redacted], retry",
    ],
    ["behind an ellipsis", "key sk-proj-…3Hy5 is revoked", "key [redacted] is revoked"],
    ["behind asterisks", "key ****3Hy5 is revoked", "key [redacted] is revoked"],
    ["in quotes", "key '3Hy5' is revoked", "key '[redacted]' is revoked"],
  ])("given the key %s, then it is redacted", (_case, text, expected) => {
    expect(scrubSecrets(text, [key])).toBe(expected);
  });

  it("given the tail inside a longer word, then the word stays", () => {
    expect(scrubSecrets("model x3Hy5z answered", [key])).toBe("model x3Hy5z answered");
  });

  it("given a recorded payload echoing the key, then every string in it is redacted and nothing else changes", () => {
    const payload = {
      model: `gpt-4o-${key}`,
      usage: { inputTokens: 12, reported: true },
      toolCalls: ["search", key],
      finishReason: "stop",
    };
    expect(redactSecretsDeep(payload, [key])).toEqual({
      model: "gpt-4o-[redacted]",
      usage: { inputTokens: 12, reported: true },
      toolCalls: ["search", "[redacted]"],
      finishReason: "stop",
    });
    const clean = { model: "gpt-4o", toolCalls: ["search"] };
    expect(redactSecretsDeep(clean, [key])).toBe(clean);
  });
});

describe("pieces of the request's own key", () => {
  const key = "sk-proj-SECRETgood7Qx9Zr2Lw4Mv8Nt6Kp3Hy5";
  const alphabet = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZabcd";

  // Found recorded verbatim in success payloads, which go through redactKnownSecrets only.
  it.each([
    ["the key minus its last four, masked", alphabet, "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ****"],
    ["a head of the key behind an ellipsis", key, "sk-proj-SECRETgood7Qx9..."],
    ["the key without its vendor prefix", key, "SECRETgood7Qx9Zr2Lw4Mv8Nt6Kp3Hy5"],
  ])("given %s as a tool name, then the recorded payload holds none of it", (_case, secret, name) => {
    const payload = { toolCalls: [name, "search"], model: "gpt-4o" };
    expect(redactSecretsDeep(payload, [secret])).toEqual({
      toolCalls: ["[redacted]", "search"],
      model: "gpt-4o",
    });
    expect(scrubSecrets(`tool ${name} failed`, [secret])).toBe("tool [redacted] failed");
  });

  it.each([
    ["a masked head and tail", "key sk-proj-SEC…3Hy5 is revoked"],
    ["a masked head and a three-character tail", "key sk-proj-SEC…Hy5 is revoked"],
    ["the vendor prefix, a mask and the tail", "key sk-...3Hy5 is revoked"],
    ["asterisks and a three-character tail", "key ****Hy5 is revoked"],
    ["a run from the middle of the secret", "key …7Qx9Zr2Lw… is revoked"],
    ["a run without any mask", "key good7Qx9Zr2 is revoked"],
    ["a head cut short mid-sentence", "key sk-proj-SECRETgood. is revoked"],
  ])("given %s, then no piece of the key is left", (_case, text) => {
    const scrubbed = redactKnownSecrets(text, [key]);
    expect(scrubbed).toMatch(/^key \[redacted\]\.? is revoked$/);
    for (let i = 8; i + 3 <= key.length; i++) expect(scrubbed).not.toContain(key.slice(i, i + 3));
  });

  it("given ordinary text sharing short runs with the key, then it is left as it was", () => {
    const text =
      "sk-proj- keys are 164 characters; SECRETg and 7Qx9Zr2 are seven, sk-proj-SE is two past the prefix, " +
      "the word good and the model gpt-4o-mini stay.";
    expect(redactKnownSecrets(text, [key])).toBe(text);
  });

  it("given an Anthropic key, then its long vendor prefix alone is not taken for a piece of it", () => {
    const anthropic = "sk-ant-api03-AbC_dEf-0123456789abcdefghij-klmnOPQ";
    expect(redactKnownSecrets("keys start sk-ant-api03-, like this", [anthropic])).toBe(
      "keys start sk-ant-api03-, like this",
    );
    expect(redactKnownSecrets("key sk-ant-api03-AbC_…nOPQ revoked", [anthropic])).toBe(
      "key [redacted] revoked",
    );
    expect(redactKnownSecrets("key AbC_dEf-01234 revoked", [anthropic])).toBe("key [redacted] revoked");
  });

  it("given a long text holding a piece of the key far in, then that piece goes and the rest stays", () => {
    const filler = "lorem ipsum dolor sit amet ".repeat(4_000);
    const scrubbed = redactKnownSecrets(`${filler}key Zr2Lw4Mv8Nt6… ${filler}`, [key]);
    expect(scrubbed.length).toBe(2 * filler.length + "key [redacted] ".length);
    expect(scrubbed.slice(filler.length, -filler.length)).toBe("key [redacted] ");
  });
});
