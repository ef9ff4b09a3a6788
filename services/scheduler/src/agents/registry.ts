import type { Bus, Watch, WatchedEvent } from "@holdfast/bus";
import { type Actor, type DurableCaps, isKnown, makeEnvelope, type StoredEnvelope } from "@holdfast/events";
import { InvalidArgumentError } from "../errors.js";
import { parseRateLimit } from "../queue/caps.js";

/** An agent's latest deployment: the version new runs run on, and the caps they are queued with. */
export interface Deployment {
  readonly agent: string;
  readonly version: string;
  readonly caps: DurableCaps;
  readonly deployedMs: number;
}

export interface DeployRequest {
  readonly agent: string;
  readonly version: string;
  /** 0: 30 minutes. */
  readonly maxDurationSeconds: number;
  readonly concurrencyPerKey: number;
  readonly rateLimit: string;
}

export const DEFAULT_CEILING_S = 30 * 60;
export const MAX_CEILING_S = 24 * 60 * 60;
const AGENT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * The agents' deployments, from the log: each `holdfast deploy` of a changed agent is an
 * AgentDeployed event on the agent's own subject, and the latest one per agent is what a
 * submission runs on. Every scheduler follows the others' deploys as they are stored.
 */
export class AgentRegistry {
  private readonly latest = new Map<string, Deployment>();
  private watch: Watch | undefined;

  constructor(
    private readonly bus: Bus,
    private readonly newId: () => string,
    private readonly clock: () => number,
  ) {}

  async start(): Promise<void> {
    const afterSeq = (await this.bus.streamState()).lastSeq;
    this.watch = await this.bus.follow(["AgentDeployed"], (event) => this.heard(event), {
      agents: true,
      afterSeq,
    });
    const found = await this.bus.lastOnSubjects([this.bus.subjects.ofAgentType("AgentDeployed")]);
    found.sort((a, b) => a.streamSequence - b.streamSequence);
    for (const { envelope } of found) this.take(envelope);
  }

  async stop(): Promise<void> {
    await this.watch?.stop();
  }

  get(agent: string): Deployment | undefined {
    return this.latest.get(agent);
  }

  all(): Deployment[] {
    return [...this.latest.values()].sort((a, b) => a.agent.localeCompare(b.agent));
  }

  /**
   * Registers a version of an agent with its caps. Says what changed against the latest
   * deployment (nothing: no event is appended); runs queued before keep their caps.
   */
  async deploy(
    request: DeployRequest,
    actor: Actor,
  ): Promise<{ deployment: Deployment; changes: string[]; previous: Deployment | undefined }> {
    const agent = checkAgentName(request.agent);
    const version = request.version.trim();
    if (version === "" || version.length > 128) {
      throw new InvalidArgumentError("version must be 1 to 128 characters (a content hash, a release tag)");
    }
    const seconds = request.maxDurationSeconds === 0 ? DEFAULT_CEILING_S : request.maxDurationSeconds;
    if (!Number.isInteger(seconds) || seconds < 1 || seconds > MAX_CEILING_S) {
      throw new InvalidArgumentError(`max_duration_seconds must be between 1 and ${MAX_CEILING_S} (24 h)`);
    }
    let startsPerMinute: number;
    try {
      startsPerMinute = parseRateLimit(request.rateLimit) ?? 0;
    } catch (error) {
      throw new InvalidArgumentError((error as Error).message);
    }
    const caps: DurableCaps = {
      ceilingMs: seconds * 1_000,
      concurrencyPerKey: request.concurrencyPerKey,
      startsPerMinute,
    };
    const previous = this.latest.get(agent);
    const changes = changesBetween(previous, version, caps);
    if (changes.length === 0) return { deployment: previous!, changes, previous };
    const envelope = makeEnvelope({
      id: this.newId(),
      runId: "",
      sequence: 0,
      timestampMs: this.clock(),
      tag: "",
      payload: { $case: "agentDeployed", value: { agent, version, caps, actor } },
    });
    await this.bus.appendAgentEvent(agent, envelope);
    this.take(envelope);
    return { deployment: this.latest.get(agent)!, changes, previous };
  }

  private heard(event: WatchedEvent): void {
    // An event the bus quarantines changes no deployment.
    const envelope = this.bus.decode(event);
    if (envelope !== undefined) this.take(envelope);
  }

  private take(envelope: StoredEnvelope): void {
    if (!isKnown(envelope) || envelope.payload.$case !== "agentDeployed") return;
    const e = envelope.payload.value;
    const before = this.latest.get(e.agent);
    if (before !== undefined && before.deployedMs > envelope.timestampMs) return;
    this.latest.set(e.agent, {
      agent: e.agent,
      version: e.version,
      caps: e.caps ?? { ceilingMs: DEFAULT_CEILING_S * 1_000, concurrencyPerKey: 0, startsPerMinute: 0 },
      deployedMs: envelope.timestampMs,
    });
  }
}

/** An agent's name as it may be written: letters, digits, ".", "_", "-" (it names a subject token). */
export function checkAgentName(name: string): string {
  const trimmed = name.trim();
  if (!AGENT_NAME.test(trimmed)) {
    throw new InvalidArgumentError(
      `agent name ${JSON.stringify(name)} must be 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit`,
    );
  }
  return trimmed;
}

function changesBetween(previous: Deployment | undefined, version: string, caps: DurableCaps): string[] {
  const describe = (c: DurableCaps) => ({
    ceiling: `${c.ceilingMs / 1_000} s`,
    concurrency: c.concurrencyPerKey === 0 ? "no cap" : String(c.concurrencyPerKey),
    rate: c.startsPerMinute === 0 ? "no cap" : `${c.startsPerMinute}/min`,
  });
  const now = describe(caps);
  if (previous === undefined) {
    return [
      `new agent, version ${version}`,
      `max_duration: ${now.ceiling}`,
      `concurrency_per_key: ${now.concurrency}`,
      `rate_limit: ${now.rate}`,
    ];
  }
  const was = describe(previous.caps);
  const changes: string[] = [];
  if (previous.version !== version) changes.push(`version: ${previous.version} -> ${version}`);
  if (was.ceiling !== now.ceiling) changes.push(`max_duration: ${was.ceiling} -> ${now.ceiling}`);
  if (was.concurrency !== now.concurrency)
    changes.push(`concurrency_per_key: ${was.concurrency} -> ${now.concurrency}`);
  if (was.rate !== now.rate) changes.push(`rate_limit: ${was.rate} -> ${now.rate}`);
  return changes;
}
