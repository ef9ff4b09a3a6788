import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  describeSearch,
  type NatsAccount,
  NatsServerNotFoundError,
  type NatsServerTls,
  type RunningNatsServer,
  searchNatsServer,
  startNatsServer,
} from "@holdfast/natsd";
import { freePort } from "./port.js";
import { waitFor } from "./wait.js";

export interface StartClusterOptions {
  /** Servers in the cluster (default 3: the smallest that keeps a quorum with one down). */
  readonly nodes?: number;
  /**
   * Each server's store and log go in a folder of its own under here. Default: a fresh temp
   * dir, removed by `stop()`; a dir the caller names is left for the caller to remove.
   */
  readonly dir?: string;
  /** Bounds the wait for a meta leader with every server current, at start and after a restart. */
  readonly readyTimeoutMs?: number;
  /** The accounts (and their users) each server admits; unset, clients present nothing. */
  readonly accounts?: readonly NatsAccount[];
  /**
   * What the routes between the servers present to each other (a user and password), and
   * TLS on them (each server verifying the other's certificate when `caFile` is set).
   */
  readonly routes?: { readonly user: string; readonly password: string; readonly tls?: NatsServerTls };
}

/** The signals that end a nats-server (others reload, reopen logs or enter lame duck mode). */
export type StopSignal = "SIGKILL" | "SIGTERM" | "SIGINT" | "SIGQUIT";

export interface ClusterNode {
  /** The server's `server_name`, as JetStream names it in leaders and peers. */
  readonly name: string;
  /** `nats://127.0.0.1:port`; the same port across restarts. */
  readonly url: string;
  /** The running process, or the last one while the node is down. */
  readonly pid: number;
  readonly running: boolean;
  /** `http://127.0.0.1:port` of the monitoring endpoint (a new port after each restart). */
  readonly monitorUrl: string;
  /** Signals the process (SIGKILL unless told) and resolves once it has exited. */
  kill(signal?: StopSignal): Promise<void>;
  /**
   * Starts the server again on its ports and store (stopping it first if it runs), and
   * resolves once it is back in the cluster and current with the meta leader and its streams.
   */
  restart(): Promise<void>;
  /** This server's own replica of a stream, as its monitoring endpoint reports it; undefined if it holds none. */
  stream(name: string): Promise<StreamReplica | undefined>;
}

export interface StreamReplica {
  /** Server name of the stream's leader as this server sees it; "" while there is none. */
  leader: string;
  messages: number;
  lastSeq: number;
}

export interface NatsCluster extends AsyncDisposable {
  /** Every server's client URL, comma-separated: what `nats.url` and `connect({ servers })` take. */
  readonly urls: string;
  readonly nodes: readonly ClusterNode[];
  /** The node by server name. */
  node(name: string): ClusterNode;
  /** Server name of the JetStream meta leader, once the running servers agree on one. */
  metaLeader(): Promise<string>;
  /** The node that leads a stream, once one does (waits out an election). */
  streamLeader(stream: string): Promise<ClusterNode>;
  /** Resolves once the running servers have a meta leader and all are current with it and their streams. */
  ready(): Promise<void>;
  /** Stops every server (SIGTERM, then SIGKILL) and removes the temp dir it made. Safe to call twice. */
  stop(): Promise<void>;
}

const CLUSTER_NAME = "holdfast-test";
const HOST = "127.0.0.1";

/**
 * A JetStream cluster of real nats-servers on loopback, for tests of what survives losing
 * one: each server with its own store, fixed client and route ports (so a restarted server
 * is found where it was), a route to every other, and JetStream on. Each is started through
 * `startNatsServer`, so it dies with the test process and its store is locked.
 */
export async function startCluster(options: StartClusterOptions = {}): Promise<NatsCluster> {
  const size = options.nodes ?? 3;
  const readyTimeoutMs = options.readyTimeoutMs ?? 30_000;
  const search = await searchNatsServer();
  if (!search.found) {
    throw new NatsServerNotFoundError(
      `${describeSearch(search)}\n\nRun \`npm run setup\` to install one into .tools, ` +
        "or point HOLDFAST_NATS_SERVER at a nats-server 2.11 or newer.",
    );
  }
  const binary = search.found.path;
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), "holdfast-test-cluster-")));

  // A route names its peer's port before that peer listens, so these are chosen up front.
  const ports = await distinctFreePorts(2 * size);
  const specs = Array.from({ length: size }, (_, i) => ({
    name: `n${i + 1}`,
    port: ports[2 * i]!,
    routePort: ports[2 * i + 1]!,
  }));
  const routes = specs.map((spec) => `nats-route://${HOST}:${spec.routePort}`);
  const running = () => nodes.filter((node) => node.running);
  const ready = async () => {
    await waitFor(() => clusterCurrent(running()), {
      timeoutMs: readyTimeoutMs,
      intervalMs: 100,
      message: `the NATS cluster in ${dir} to elect a meta leader with every running server current`,
    });
  };
  const leaderOf = (group: string) =>
    waitFor(async () => agreedLeader(await raftViews(running()), group).leader, {
      timeoutMs: readyTimeoutMs,
      intervalMs: 100,
      message: `a leader of ${group} that the running servers agree on`,
    });
  const nodes: Node[] = specs.map(
    (spec) =>
      new Node({
        name: spec.name,
        port: spec.port,
        rejoined: ready,
        launch: async () => {
          const home = join(dir, spec.name);
          await mkdir(home, { recursive: true });
          return startNatsServer({
            binary,
            storeDir: join(home, "store"),
            logFile: join(home, "nats-server.log"),
            host: HOST,
            port: spec.port,
            serverName: spec.name,
            monitor: true,
            cluster: { name: CLUSTER_NAME, port: spec.routePort, routes, ...options.routes },
            ...(options.accounts === undefined ? {} : { accounts: options.accounts }),
          });
        },
      }),
  );

  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      await Promise.all(nodes.map((node) => node.stop()));
      if (ownDir) await rm(dir, { recursive: true, force: true });
    })();
    return stopping;
  };

  const cluster: NatsCluster = {
    urls: nodes.map((node) => node.url).join(","),
    nodes,
    node: (name) => {
      const found = nodes.find((node) => node.name === name);
      if (found === undefined)
        throw new Error(`No node ${name} in the cluster (${specs.map((s) => s.name)})`);
      return found;
    },
    metaLeader: async () => (await leaderOf(META)).name,
    streamLeader: (stream) => leaderOf(`stream ${stream}`),
    ready,
    stop,
    [Symbol.asyncDispose]: stop,
  };

  try {
    await Promise.all(nodes.map((node) => node.start()));
    await ready();
  } catch (error) {
    await stop();
    throw error;
  }
  return cluster;
}

class Node implements ClusterNode {
  readonly name: string;
  readonly url: string;
  private server: RunningNatsServer | undefined;
  private lastPid = 0;

  constructor(
    private readonly spec: {
      name: string;
      port: number;
      launch: () => Promise<RunningNatsServer>;
      /** Resolves once the cluster, this node included, is current again. */
      rejoined: () => Promise<void>;
    },
  ) {
    this.name = spec.name;
    this.url = `nats://${HOST}:${spec.port}`;
  }

  get pid(): number {
    return this.server?.pid ?? this.lastPid;
  }

  get running(): boolean {
    return this.server !== undefined;
  }

  get monitorUrl(): string {
    const url = this.server?.monitorUrl;
    if (url === undefined) throw new Error(`${this.name} is down: it has no monitoring endpoint`);
    return url;
  }

  async start(): Promise<void> {
    this.server = await this.spec.launch();
    this.lastPid = this.server.pid;
  }

  async kill(signal: StopSignal = "SIGKILL"): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    process.kill(server.pid, signal);
    await server.exited;
    this.server = undefined;
    // Releases the store lock and removes the run dir; the process is already gone.
    await server.stop();
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
    await this.spec.rejoined();
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    await server?.stop();
  }

  async stream(name: string): Promise<StreamReplica | undefined> {
    const jsz = await readJsz(this.monitorUrl, "?streams=true");
    for (const account of jsz.account_details ?? []) {
      const stream = account.stream_detail?.find((s) => s.name === name);
      if (stream !== undefined) {
        return {
          leader: stream.cluster?.leader ?? "",
          messages: stream.state.messages,
          lastSeq: stream.state.last_seq,
        };
      }
    }
    return undefined;
  }
}

/** A raft group as one of its servers sees it: the leader, and (on the leader) its followers. */
interface RaftView {
  leader?: string;
  replicas?: { name: string; current: boolean; offline?: boolean; lag?: number }[];
}

/** What `/jsz` says; only the fields read here. */
interface Jsz {
  meta_cluster?: RaftView;
  account_details?: {
    name: string;
    stream_detail?: {
      name: string;
      cluster?: RaftView;
      state: { messages: number; last_seq: number };
      consumer_detail?: { name: string; cluster?: RaftView }[];
    }[];
  }[];
}

const META = "the meta group";

async function readJsz(monitorUrl: string, query = ""): Promise<Jsz> {
  const response = await fetch(`${monitorUrl}/jsz${query}`, { signal: AbortSignal.timeout(2_000) });
  if (!response.ok) throw new Error(`${monitorUrl}/jsz answered ${response.status}`);
  return (await response.json()) as Jsz;
}

/** Each running server's view of every raft group it is in: the meta group, streams, consumers. */
async function raftViews(nodes: readonly Node[]): Promise<{ node: Node; groups: Map<string, RaftView> }[]> {
  return Promise.all(
    nodes.map(async (node) => {
      const jsz = await readJsz(node.monitorUrl, "?streams=true&consumers=true");
      const groups = new Map<string, RaftView>([[META, jsz.meta_cluster ?? {}]]);
      for (const account of jsz.account_details ?? []) {
        for (const stream of account.stream_detail ?? []) {
          groups.set(`stream ${stream.name}`, stream.cluster ?? {});
          for (const consumer of stream.consumer_detail ?? []) {
            groups.set(`consumer ${stream.name} > ${consumer.name}`, consumer.cluster ?? {});
          }
        }
      }
      return { node, groups };
    }),
  );
}

/** The leader every running member of the group names, with its view; throws while they disagree or none leads. */
function agreedLeader(
  views: Awaited<ReturnType<typeof raftViews>>,
  group: string,
): { leader: Node; view: RaftView } {
  const members = views.filter((view) => view.groups.has(group));
  const named = members.map((member) => `${member.node.name}: ${member.groups.get(group)?.leader || "none"}`);
  const leaders = new Set(members.map((member) => member.groups.get(group)?.leader ?? ""));
  const [leader] = leaders;
  const leading = members.find((member) => member.node.name === leader);
  if (leaders.size !== 1 || !leader || leading === undefined) {
    throw new Error(
      `${group} has no running leader its servers agree on (${named.join(", ") || "no members"})`,
    );
  }
  return { leader: leading.node, view: leading.groups.get(group) ?? {} };
}

/**
 * True once, in every raft group (the meta group, each stream and consumer), the running
 * servers agree on a running leader and the leader counts each of them current with no lag,
 * and each server says it is healthy. A restarted server is counted only once it has
 * caught up with every stream it holds. Throws saying what is not so yet.
 */
async function clusterCurrent(nodes: readonly Node[]): Promise<true> {
  const views = await raftViews(nodes);
  const running = new Set(nodes.map((node) => node.name));
  for (const group of new Set(views.flatMap((view) => [...view.groups.keys()]))) {
    const { leader, view } = agreedLeader(views, group);
    for (const peer of view.replicas ?? []) {
      if (!running.has(peer.name)) continue;
      if (!peer.current || peer.offline || (peer.lag ?? 0) > 0) {
        throw new Error(
          `${peer.name} is not current in ${group} (leader ${leader.name}, lag ${peer.lag ?? 0})`,
        );
      }
    }
  }
  for (const node of nodes) {
    const health = await fetch(`${node.monitorUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
    if (!health.ok) throw new Error(`${node.name} is not healthy yet: ${(await health.text()).trim()}`);
  }
  return true;
}

async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort(HOST));
  return [...ports];
}
