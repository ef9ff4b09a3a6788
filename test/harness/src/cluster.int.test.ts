import { setTimeout as sleep } from "node:timers/promises";
import { type JetStreamClient, jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { startCluster } from "./index.js";

const STREAM = "SURVIVOR";

/**
 * Publishes until the stream acknowledges, under one message id so a retried publish that
 * had in fact landed is not stored twice; returns the stream sequence and how long it took.
 */
async function publishAcked(js: JetStreamClient, id: string): Promise<{ seq: number; ms: number }> {
  const started = Date.now();
  for (;;) {
    try {
      const ack = await js.publish(`survivor.${id}`, id, { msgID: id, timeout: 1_000 });
      return { seq: ack.seq, ms: Date.now() - started };
    } catch (error) {
      // No stream leader yet (an election after the kill), or the connection is moving.
      if (Date.now() - started > 30_000) throw error;
      await sleep(100);
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("startCluster", () => {
  it("keeps an R3 stream taking writes while any one server is killed, and the killed one catches up", async () => {
    await using cluster = await startCluster({ nodes: 3 });
    expect(cluster.nodes.map((node) => node.name)).toEqual(["n1", "n2", "n3"]);
    expect(cluster.urls.split(",")).toEqual(cluster.nodes.map((node) => node.url));
    expect(cluster.nodes.map((node) => node.name)).toContain(await cluster.metaLeader());

    const nc = await connect({
      servers: cluster.urls.split(","),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 100,
    });
    try {
      const jsm = await jetstreamManager(nc);
      const js = jetstream(nc);
      const created = await jsm.streams.add({
        name: STREAM,
        subjects: ["survivor.>"],
        storage: StorageType.File,
        num_replicas: 3,
      });
      expect(created.config.num_replicas).toBe(3);

      let published = 0;
      const publishSome = async (count: number) => {
        const acks = [];
        for (let i = 0; i < count; i++) acks.push(await publishAcked(js, `m${++published}`));
        return acks;
      };
      await publishSome(10);

      // The stream's leader first (the case that needs an election), then each of the others.
      const first = await cluster.streamLeader(STREAM);
      const victims = [first, ...cluster.nodes.filter((node) => node !== first)];
      for (const victim of victims) {
        const pid = victim.pid;
        await victim.kill("SIGKILL");
        expect(alive(pid)).toBe(false);

        // The two left keep a quorum: every publish is acknowledged, each once, in order.
        const before = published;
        const acks = await publishSome(20);
        expect(acks.map((ack) => ack.seq)).toEqual(Array.from({ length: 20 }, (_, i) => before + i + 1));
        const leader = await cluster.streamLeader(STREAM);
        expect(leader.name).not.toBe(victim.name);
        console.log(
          `killed ${victim.name} (pid ${pid}); first publish after it took ${acks[0]!.ms} ms; ` +
            `stream leader now ${leader.name}`,
        );

        // Back on its store and ports, it replicates what it missed.
        await victim.restart();
        expect(victim.pid).not.toBe(pid);
        expect(await victim.stream(STREAM)).toMatchObject({ messages: published, lastSeq: published });
      }

      const info = await jsm.streams.info(STREAM);
      expect(info.state.messages).toBe(published);
      expect(info.cluster?.replicas?.map((replica) => replica.current)).toEqual([true, true]);
    } finally {
      await nc.close();
    }
  });

  it("stops every server it started", async () => {
    const cluster = await startCluster({ nodes: 3 });
    const pids = cluster.nodes.map((node) => node.pid);
    expect(pids.every(alive)).toBe(true);
    await cluster.stop();
    expect(pids.filter(alive)).toEqual([]);
  });
});
