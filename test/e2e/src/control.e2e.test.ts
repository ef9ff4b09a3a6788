import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { appendFileSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { connect } from "@holdfast/grpc";
import { ControlClient, type GetStepResponse } from "@holdfast/proto";
import { makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// An operator's day through the built CLI: `holdfast init` (the credentials and a
// configuration file), `holdfast up` with that file, then hold, resume, stop, rules, approve
// and deny against the control API `up` started, while an agent's call waits on the gateway.
const BIN = fileURLToPath(new URL("../../../libs/cli/dist/bin.js", import.meta.url));
const run = promisify(execFile);

let dir: Awaited<ReturnType<typeof makeTempDir>>;
let up: ChildProcess | undefined;
let upOutput = "";

function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  return { ...env, ...extra };
}

async function holdfast(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ stdout: string; stderr: string; code: number }> {
  const where = ["--data-dir", dir.path];
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, ...args, ...where], {
      env: cleanEnv(env),
      cwd: dir.path,
      timeout: 60_000,
    });
    return { stdout, stderr, code: 0 };
  } catch (error) {
    const e = error as { stdout: string; stderr: string; code: number };
    return { stdout: e.stdout, stderr: e.stderr, code: e.code };
  }
}

/** A token `holdfast init` made for this stack. */
function token(name: "control" | "read"): string {
  return readFileSync(join(dir.path, "credentials", `${name}.token`), "utf8").trim();
}

function stack(): { gatewayUrl: string; controlUrl: string; controlGrpc: string } {
  return JSON.parse(readFileSync(join(dir.path, "holdfast.json"), "utf8"));
}

async function shown(
  runId: string,
): Promise<{ status: string; parked: number; control: { what: string }[] }> {
  const result = await holdfast(["show", runId, "--json"]);
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout);
}

beforeAll(async () => {
  dir = await makeTempDir("control-cli");
  const init = await holdfast(["init", "--config", join(dir.path, "holdfast.yaml")]);
  expect(init.code, init.stderr).toBe(0);
  // The tool-call gate, as an operator would add it to the file init wrote.
  appendFileSync(join(dir.path, "holdfast.yaml"), '\ntool_gate:\n  deny:\n    - "delete_*"\n');
  // The control API on free ports: other tests' stacks may hold 4142 and 4143.
  up = spawn(
    process.execPath,
    [BIN, "up", "--config", join(dir.path, "holdfast.yaml"), "--data-dir", dir.path, "--port", "0", "--demo"],
    { env: cleanEnv({ HOLDFAST_CONTROL__PORT: "0", HOLDFAST_CONTROL__GRPC_PORT: "0" }), cwd: dir.path },
  );
  up.stdout?.on("data", (chunk: Buffer) => {
    upOutput += chunk.toString();
  });
  up.stderr?.on("data", (chunk: Buffer) => {
    upOutput += chunk.toString();
  });
  await waitFor(() => upOutput.includes("Demo:"), {
    timeoutMs: 90_000,
    message: "holdfast up did not come up",
  });
}, 120_000);

afterAll(async () => {
  if (up && up.exitCode === null) {
    const exited = once(up, "exit");
    up.kill("SIGINT");
    await exited;
  }
  await dir?.[Symbol.asyncDispose]();
});

describe("holdfast init", () => {
  it("made the credentials, readable by their owner alone, wrote a file with no secret in it, and keeps an existing file", async () => {
    const file = readFileSync(join(dir.path, "holdfast.yaml"), "utf8");
    expect(file).not.toMatch(/^\s*(token|read_token):/m);
    expect(statSync(dir.path).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir.path, "credentials")).mode & 0o777).toBe(0o700);
    for (const name of ["control.token", "read.token", "budget.token", "worker.token", "nats-gateway.nk"]) {
      expect(statSync(join(dir.path, "credentials", name)).mode & 0o777).toBe(0o600);
    }
    expect(token("control")).toMatch(/^hfc_[A-Za-z0-9_-]{43}$/);
    const again = await holdfast(["init", "--config", join(dir.path, "holdfast.yaml")]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/exists; pass --force/);
    expect(readFileSync(join(dir.path, "holdfast.yaml"), "utf8")).toBe(file);
  });
});

describe("holdfast up", () => {
  it("starts the control API, says where and where its token is, and records it", () => {
    expect(upOutput).toContain(
      `gRPC ${stack().controlGrpc}  (token: ${join(dir.path, "credentials", "control.token")})`,
    );
    expect(stack().controlUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(upOutput).toContain(`secrets     ${join(dir.path, "credentials")}`);
  });

  it("gives every listener it starts a credential: nothing is changed, read or leased without one", async () => {
    const { controlUrl, analyticsUrl } = stack() as ReturnType<typeof stack> & { analyticsUrl: string };
    const hold = await fetch(`${controlUrl}/holdfast/v1/runs/demo-agent/hold`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ reason: "not mine to hold" }),
    });
    expect(hold.status).toBe(401);
    expect((await fetch(`${controlUrl}/holdfast/v1/runs`)).status).toBe(401);
    expect((await fetch(`${analyticsUrl}/v1/runs`)).status).toBe(401);
    // The read-only token reads, and may not change.
    const read = { authorization: `Bearer ${token("read")}` };
    expect((await fetch(`${controlUrl}/holdfast/v1/runs`, { headers: read })).status).toBe(200);
    const readHold = await fetch(`${controlUrl}/holdfast/v1/runs/demo-agent/hold`, {
      method: "POST",
      headers: { ...read, "content-type": "application/json" },
      body: "{}",
    });
    expect(readHold.status).toBe(403);
    expect((await shown("demo-agent")).status).not.toBe("held");
  });

  it("serves a step's snapshot to the read token: the CLI, REST and gRPC give the same bytes", async () => {
    // The demo's agent made its calls through the gateway as `up` came up.
    const cli = await holdfast(["show", "demo-agent", "1", "--raw"]);
    expect(cli.code, cli.stderr).toBe(0);
    const forwarded = JSON.parse(cli.stdout) as { model: string; messages: unknown[] };
    expect(forwarded.messages.length).toBeGreaterThan(0);
    const answer = await holdfast(["show", "demo-agent", "1", "--raw", "answer"]);
    expect(answer.code, answer.stderr).toBe(0);
    const person = await holdfast(["show", "demo-agent", "1"]);
    expect(person.stdout).toContain("Request as forwarded");
    // The run's listing names each step's conversation prefix hash: what --prompt selects on.
    const listing = (await holdfast(["show", "demo-agent"])).stdout;
    const prompt = /^prompt +([0-9a-f]{16})$/m.exec(listing)?.[1];
    expect(prompt).toBeDefined();
    const steps = (await shown("demo-agent")) as unknown as { steps: { prompt_hash: string }[] };
    expect(steps.steps.map((s) => s.prompt_hash)).toEqual(steps.steps.map(() => prompt));
    expect(listing.split(prompt!).length - 1).toBe(steps.steps.length + 1);

    const { controlUrl, controlGrpc } = stack();
    const url = `${controlUrl}/holdfast/v1/runs/demo-agent/steps/1`;
    expect((await fetch(url)).status).toBe(401);
    const response = await fetch(url, { headers: { authorization: `Bearer ${token("read")}` } });
    expect(response.status).toBe(200);
    const { step } = (await response.json()) as {
      step: { step: number; request: { forwarded: unknown }; answer: { status: number }; missing: string[] };
    };
    expect(step.step).toBe(1);
    expect(step.request.forwarded).toEqual(forwarded);
    expect(step.answer.status).toBe(200);
    expect(step.missing).toEqual([]);
    const missingStep = await fetch(`${controlUrl}/holdfast/v1/runs/demo-agent/steps/999`, {
      headers: { authorization: `Bearer ${token("read")}` },
    });
    expect(missingStep.status).toBe(404);

    const client = connect(ControlClient, {
      address: controlGrpc,
      deadlineMs: 5_000,
      metadata: { authorization: `Bearer ${token("read")}` },
    });
    try {
      const got = await new Promise<GetStepResponse>((resolve, reject) =>
        client.getStep({ runId: "demo-agent", step: 1 }, (error, value) =>
          error ? reject(error) : resolve(value),
        ),
      );
      expect(got.request.toString("utf8")).toBe(cli.stdout);
      expect(got.answer.toString("utf8")).toBe(answer.stdout);
      expect(got.answerStatus).toBe(200);
      expect(got.missing).toEqual([]);
    } finally {
      client.close();
    }
  });

  it("lists runs from the projector with the stack's token, and says where the token comes from when it is refused", async () => {
    expect((await holdfast(["ls"])).code).toBe(0);
    const wrong = join(dir.path, "wrong-tokens.yaml");
    writeFileSync(wrong, "control:\n  token: not-the-token\n  read_token: not-the-read-token\n");
    const refused = await holdfast(["ls", "--config", wrong]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/not one this analytics API knows/);
    expect(refused.stderr).toMatch(/control\.read_token or control\.token in the config file/);
  });
});

describe("hold, resume, stop from the CLI", () => {
  it("holds a run; its next call waits until the run is resumed, then goes on", async () => {
    const held = await holdfast(["hold", "demo-agent", "--reason", "looks stuck"]);
    expect(held.code, held.stderr).toBe(0);
    expect(held.stdout).toContain("Held run demo-agent (now held).");

    const answer = fetch(`${stack().gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-holdfast-run": "demo-agent",
        authorization: "Bearer sk-x",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "still there?" }] }),
    });
    await waitFor(async () => ((await shown("demo-agent")).parked === 1 ? true : undefined), {
      timeoutMs: 20_000,
      message: "the call was not parked",
    });
    const listed = await holdfast(["ls", "--status", "held"]);
    await waitFor(
      async () => {
        const result = await holdfast(["ls", "--status", "held"]);
        return /demo-agent.*operator: looks stuck \(1 call parked\)/.test(result.stdout) ? true : undefined;
      },
      { timeoutMs: 20_000, message: `ls --status held did not show demo-agent:\n${listed.stdout}` },
    );

    const resumed = await holdfast(["resume", "demo-agent", "--steps", "10", "--reason", "fixed"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toContain("Resumed run demo-agent (now idle).");
    expect((await answer).status).toBe(200);

    const text = await holdfast(["show", "demo-agent"]);
    expect(text.stdout).toMatch(/held\s+operator \(control token\)\s+"looks stuck"/);
    expect(text.stdout).toMatch(/resumed\s+operator \(control token\)\s+"fixed"; new window: 10 steps/);
  });

  it("holds by tag with a standing rule, lists it, and resume by the same tag lifts it", async () => {
    const held = await holdfast(["hold", "--tag", "demo", "--reason", "incident", "--json"]);
    expect(held.code, held.stderr).toBe(0);
    const answer = JSON.parse(held.stdout) as { runs: { run_id: string }[]; rule: { rule_id: string } };
    expect(answer.runs.map((r) => r.run_id)).toContain("demo-researcher");
    const rules = await holdfast(["rules"]);
    expect(rules.stdout).toMatch(new RegExp(`${answer.rule.rule_id}\\s+--tag demo\\s+incident`));

    const resumed = await holdfast(["resume", "--tag", "demo"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toContain(`Lifted standing rule ${answer.rule.rule_id} (--tag demo).`);
    expect((await holdfast(["rules"])).stdout).toContain("No standing rules.");
  });

  it("stops a run, and a stopped run's calls are refused with 409", async () => {
    const stopped = await holdfast(["stop", "demo-claude", "--reason", "enough"]);
    expect(stopped.stdout).toContain("Stopped run demo-claude (now stopped).");
    const response = await fetch(`${stack().gatewayUrl.replace(/\/v1$/, "")}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-holdfast-run": "demo-claude",
        "x-api-key": "sk-ant-x",
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({
        model: "claude-3-5-haiku-20241022",
        max_tokens: 10,
        messages: [{ role: "user", content: "hi" }],
      }),
    });
    expect(response.status).toBe(409);
  });

  it("refuses a wrong token, saying where the token comes from", async () => {
    const result = await holdfast(["hold", "demo-agent"], { HOLDFAST_CONTROL__TOKEN: "not-the-token" });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/not one this control API knows/);
    expect(result.stderr).toMatch(/HOLDFAST_CONTROL__TOKEN/);
  });
});

describe("approve and deny from the CLI", () => {
  /** An agent's call whose answer asks for delete_branch: the gate holds it. */
  const gatedCall = (runId: string) =>
    fetch(`${stack().gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-holdfast-run": runId, authorization: "Bearer sk-x" },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: '[[call:delete_branch {"branch":"main"}]]' }],
        tools: [{ type: "function", function: { name: "delete_branch", parameters: { type: "object" } } }],
      }),
    });
  const held = (runId: string) =>
    waitFor(
      async () => {
        const result = await holdfast(["show", runId]);
        return result.stdout.includes("PENDING") ? result.stdout : undefined;
      },
      { timeoutMs: 20_000, message: `no answer of ${runId} was held` },
    );

  it("show says what the model asked for and the rule; deny refuses the answer with the reason; approve delivers the next", async () => {
    const denied = gatedCall("cli-gate");
    const text = await held("cli-gate");
    expect(text).toMatch(
      /step 1 {2}gated {2}PENDING \(run held\): holdfast approve cli-gate \| holdfast deny cli-gate/,
    );
    expect(text).toMatch(/tool {7}delete_branch/);
    expect(text).toMatch(/arguments {2}\{"branch":"main"\}/);
    expect(text).toMatch(/rule {7}tool_gate\.deny\[0\]: delete_\*/);

    const deny = await holdfast(["deny", "cli-gate", "--reason", "not main"]);
    expect(deny.code, deny.stderr).toBe(0);
    expect(deny.stdout).toContain(
      "Denied step 1 (a call to delete_branch, tool_gate.deny[0]): its answer is refused.",
    );
    expect(deny.stdout).toContain("Run cli-gate is now idle.");
    const refused = await denied;
    expect(refused.status).toBe(403);
    expect(JSON.stringify(await refused.json())).toContain("not main");

    const approved = gatedCall("cli-gate");
    await held("cli-gate");
    const approve = await holdfast(["approve", "cli-gate", "--json"]);
    expect(approve.code, approve.stderr).toBe(0);
    expect(JSON.parse(approve.stdout)).toMatchObject({
      run: { run_id: "cli-gate", status: "idle" },
      gates: [{ step: 2, tool: "delete_branch", decision: "approved" }],
    });
    const answer = (await (await approved).json()) as {
      choices: { message: { tool_calls: { function: { name: string } }[] } }[];
    };
    expect(answer.choices[0]!.message.tool_calls[0]!.function.name).toBe("delete_branch");

    const again = await holdfast(["approve", "cli-gate"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("has no answer held by the tool-call gate");
  });
  it("exports a run with its decisions to a bundle that holdfast show reads with no stack", async () => {
    const file = join(dir.path, "cli-gate.json");
    const exported = await holdfast(["export", "cli-gate", "-o", file]);
    expect(exported.code, exported.stderr).toBe(0);
    const bundle = JSON.parse(readFileSync(file, "utf8")) as {
      format: string;
      decisions: { what: string; reason: string }[];
      steps: { step: number }[];
      events: unknown[];
    };
    expect(bundle.format).toBe("holdfast.run-bundle");
    expect(bundle.decisions.map((d) => d.what)).toEqual(expect.arrayContaining(["denied", "approved"]));
    expect(bundle.decisions.find((d) => d.what === "denied")?.reason).toBe("not main");
    expect(bundle.steps.map((s) => s.step)).toEqual([1, 2]);
    // Only the owner may read it: it holds what the agent sent.
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const lines = join(dir.path, "cli-gate.jsonl");
    expect((await holdfast(["export", "cli-gate", "--jsonl", "-o", lines])).code).toBe(0);
    expect(readFileSync(lines, "utf8").split("\n").filter(Boolean).length).toBe(
      1 + 1 + bundle.events.length + bundle.decisions.length + bundle.steps.length + 1,
    );

    // The run against itself: every step the same, as the command prints it.
    const same = await holdfast(["diff", "cli-gate", "cli-gate"]);
    expect(same.code, same.stderr).toBe(0);
    expect(same.stdout).toContain("step 2\n  model       ");
    expect(same.stdout).toContain('tool calls  delete_branch({"branch":"main"})');
    expect((await holdfast(["diff", "cli-gate", "no-such-run"])).stderr).toContain(
      'no run named "no-such-run"',
    );

    // Read back where no stack has ever run: an empty data directory.
    const empty = await makeTempDir("no-stack");
    try {
      const offline = async (...args: string[]) =>
        run(process.execPath, [BIN, "show", "--bundle", ...args, "--data-dir", empty.path], {
          env: cleanEnv(),
        });
      const live = await holdfast(["show", "cli-gate", "--json"]);
      for (const source of [file, lines]) {
        expect(JSON.parse((await offline(source, "--json")).stdout)).toEqual(JSON.parse(live.stdout));
        expect((await offline(source, "2", "--raw")).stdout).toBe(
          (await holdfast(["show", "cli-gate", "2", "--raw"])).stdout,
        );
        expect((await offline(source, "2", "--raw", "answer")).stdout).toBe(
          (await holdfast(["show", "cli-gate", "2", "--raw", "answer"])).stdout,
        );
      }
    } finally {
      await empty[Symbol.asyncDispose]();
    }
  });

  it("replays, compares and forks a recorded step through the gateway: under eval, with its origin, never held or gated", async () => {
    // A standing rule that holds every run tagged eval, and the gate's rule on delete_*:
    // neither applies to an operator's call from a recorded step.
    expect((await holdfast(["hold", "--tag", "eval", "--reason", "no evals now"])).code).toBe(0);
    try {
      const replayed = await holdfast(["replay", "cli-gate", "1", "--model", "gpt-4o", "--api-key", "sk-x"]);
      expect(replayed.code, replayed.stderr).toBe(0);
      const newRun = /as run (\S+)/.exec(replayed.stdout)?.[1];
      expect(newRun).toMatch(/^replay-1-of-cli-gate-/);
      expect(replayed.stdout).toContain("  model       - gpt-4o-mini\n              + gpt-4o");
      // The gated tool call came back, delivered: the gate did not hold it.
      expect(replayed.stdout).toContain('tool calls  delete_branch({"branch":"main"})');
      const run = (await shown(newRun!)) as unknown as {
        status: string;
        tag: string;
        steps: { origin: { kind: string; run_id: string; step: number } | null; status: string }[];
      };
      expect(run.tag).toBe("eval");
      expect(run.status).not.toBe("held");
      expect(run.steps).toMatchObject([
        { status: "completed", origin: { kind: "replay", run_id: "cli-gate", step: 1 } },
      ]);

      const compared = await holdfast([
        "compare",
        "demo-agent",
        "1",
        "--model",
        "gpt-4o",
        "--api-key",
        "sk-x",
        "--json",
      ]);
      expect(compared.code, compared.stderr).toBe(0);
      const diff = JSON.parse(compared.stdout) as {
        kind: string;
        diff: { a: { model: string }; b: { model: string }; text: { op: string }[] };
      };
      expect(diff.kind).toBe("compare");
      expect(diff.diff.a.model).toBe("gpt-4o-mini");
      expect(diff.diff.b.model).toBe("gpt-4o");

      const forked = await holdfast([
        "fork",
        "demo-agent",
        "1",
        "--set",
        'messages.1.content="A forked question."',
        "--as",
        "forked-demo",
        "--api-key",
        "sk-x",
      ]);
      expect(forked.code, forked.stderr).toBe(0);
      expect(forked.stdout).toContain("A forked question.");
      expect((await shown("forked-demo")) as unknown as { steps: { origin: unknown }[] }).toMatchObject({
        steps: [{ origin: { kind: "fork", run_id: "demo-agent", step: 1 } }],
      });
    } finally {
      await holdfast(["resume", "--tag", "eval"]);
    }

    // Only the control token makes a call from a recorded step: none, a wrong one or the
    // read-only one is refused before anything is recorded or sent.
    const presented: Record<string, string>[] = [
      {},
      { "x-holdfast-control-token": "guessed" },
      { "x-holdfast-control-token": token("read") },
    ];
    for (const headers of presented) {
      const response = await fetch(`${stack().gatewayUrl}/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: "Bearer sk-x",
          "x-holdfast-run": "forged-eval",
          "x-holdfast-tag": "eval",
          "x-holdfast-origin": "replay",
          "x-holdfast-origin-run": "cli-gate",
          "x-holdfast-origin-step": "1",
          ...headers,
        },
        body: JSON.stringify({
          model: "gpt-4o-mini",
          messages: [{ role: "user", content: "let me through" }],
        }),
      });
      expect(response.status).toBe(401);
      expect(JSON.stringify(await response.json())).toContain("needs the control token");
    }
    expect((await holdfast(["show", "forged-eval"])).stderr).toContain('no run named "forged-eval"');
    // The control token the replays carried is in no log and no byte of the stack's store.
    const control = Buffer.from(token("control"));
    const files = readdirSync(dir.path, { recursive: true, withFileTypes: true })
      .filter(
        (entry) => entry.isFile() && !join(entry.parentPath, entry.name).includes(`${dir.path}/credentials`),
      )
      .map((entry) => join(entry.parentPath, entry.name));
    expect(files.length).toBeGreaterThan(10);
    for (const file of files) expect(readFileSync(file).includes(control), file).toBe(false);
  });
});
