import type * as grpc from "@grpc/grpc-js";
import { connect } from "@holdfast/grpc";
import {
  type AgentView,
  type DeployAgentResponse,
  type DurableRun,
  type DurableStatus,
  type Envelope,
  RunsClient,
  type SubmitRunResponse,
} from "@holdfast/proto";
import type { Agent } from "./agent.js";

export interface RunsApiOptions {
  /** The scheduler's gRPC address (host:port); default HOLDFAST_SCHEDULER_URL, else 127.0.0.1:4144. */
  readonly scheduler?: string;
  /** The control token (HOLDFAST_TOKEN or HOLDFAST_CONTROL__TOKEN by default). */
  readonly token?: string;
  /** Deadline of a call (default 30 s). */
  readonly deadlineMs?: number;
}

export interface SubmitOptions {
  readonly partitionKey?: string;
  /** This run's ceiling (default the agent's). */
  readonly timeoutSeconds?: number;
  readonly idempotencyKey?: string;
  readonly tenant?: string;
  readonly tag?: string;
}

/** holdfast.v1.Runs as promises: submit, watch and operate durable runs; deploy agents. */
export class RunsApi {
  private readonly client: RunsClient;

  constructor(options: RunsApiOptions = {}) {
    const token = options.token ?? process.env.HOLDFAST_TOKEN ?? process.env.HOLDFAST_CONTROL__TOKEN;
    this.client = connect(RunsClient, {
      address: options.scheduler ?? process.env.HOLDFAST_SCHEDULER_URL ?? "127.0.0.1:4144",
      deadlineMs: options.deadlineMs ?? 30_000,
      // A run's view carries its recorded steps: a long run's is past grpc-js's 4 MiB default.
      maxReceiveBytes: -1,
      ...(token === undefined || token === "" ? {} : { metadata: { authorization: `Bearer ${token}` } }),
    });
  }

  /** Queues a run of the agent's latest deployed version; `input` is any JSON value. */
  async submit(
    agent: string,
    input: unknown,
    options: SubmitOptions = {},
  ): Promise<{ run: DurableRun; created: boolean }> {
    const response = await unaryCall<SubmitRunResponse>((cb) =>
      this.client.submit(
        {
          agent,
          inputJson: input === undefined ? "null" : JSON.stringify(input),
          partitionKey: options.partitionKey ?? "",
          timeoutSeconds: options.timeoutSeconds ?? 0,
          idempotencyKey: options.idempotencyKey ?? "",
          tenant: options.tenant ?? "",
          tag: options.tag ?? "",
        },
        cb,
      ),
    );
    if (response.run === undefined) throw new Error("the scheduler answered a submission without its run");
    return { run: response.run, created: response.created };
  }

  get(runId: string): Promise<DurableRun> {
    return unaryCall((cb) => this.client.get({ runId }, cb));
  }

  async list(filter: { agent?: string; status?: DurableStatus; limit?: number } = {}): Promise<DurableRun[]> {
    const response = await unaryCall<{ runs: DurableRun[] }>((cb) =>
      this.client.list(
        { agent: filter.agent ?? "", status: filter.status ?? 0, limit: filter.limit ?? 0 },
        cb,
      ),
    );
    return response.runs;
  }

  cancel(runId: string, reason = ""): Promise<DurableRun> {
    return unaryCall((cb) => this.client.cancel({ runId, reason }, cb));
  }

  redrive(runId: string, reason = ""): Promise<DurableRun> {
    return unaryCall((cb) => this.client.redrive({ runId, reason }, cb));
  }

  replay(runId: string, reason = ""): Promise<DurableRun> {
    return unaryCall((cb) => this.client.replay({ runId, reason }, cb));
  }

  /** Registers an agent's version and caps (what `holdfast deploy` does); says what changed. */
  deploy(agent: Agent<never, unknown>): Promise<DeployAgentResponse> {
    const o = agent.options;
    return unaryCall((cb) =>
      this.client.deploy(
        {
          agent: agent.name,
          version: agent.version,
          maxDurationSeconds: o.maxDurationSeconds ?? 0,
          concurrencyPerKey: o.concurrencyPerKey ?? 0,
          rateLimit: o.rateLimit ?? "",
        },
        cb,
      ),
    );
  }

  async agents(): Promise<AgentView[]> {
    return (await unaryCall<{ agents: AgentView[] }>((cb) => this.client.listAgents({}, cb))).agents;
  }

  /**
   * The run's events from its first, then as they are appended, until it ends. The
   * iterator ends when the run does (or `signal` aborts).
   */
  async *watch(runId: string, signal?: AbortSignal): AsyncIterable<Envelope> {
    const call = this.client.watch({ runId }, { deadline: Number.POSITIVE_INFINITY });
    const stop = () => call.cancel();
    signal?.addEventListener("abort", stop, { once: true });
    try {
      for await (const event of call as AsyncIterable<Envelope>) yield event;
    } catch (error) {
      if ((error as grpc.ServiceError).code === 1 /* CANCELLED */ && signal?.aborted) return;
      throw error;
    } finally {
      signal?.removeEventListener("abort", stop);
    }
  }

  /** Waits until the run has finished or failed (watching it), and returns it as it ended. */
  async result(runId: string, signal?: AbortSignal): Promise<DurableRun> {
    for await (const _ of this.watch(runId, signal)) {
      // Each event: the watch ends with the run's.
    }
    return this.get(runId);
  }

  close(): void {
    this.client.close();
  }
}

function unaryCall<T>(
  start: (callback: (error: grpc.ServiceError | null, value: T) => void) => unknown,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    start((error, value) => (error === null ? resolve(value) : reject(error)));
  });
}
