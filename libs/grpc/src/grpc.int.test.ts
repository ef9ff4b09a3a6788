import { once } from "node:events";
import { connect as http2Connect } from "node:http2";
import { type AddressInfo, createServer } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { freePort } from "@holdfast/test-harness";
import { service as healthService } from "grpc-health-check";
import { afterEach, describe, expect, it } from "vitest";
import { connect } from "./connect.js";
import { checkHealth } from "./inspect.js";
import { type GrpcServer, SERVER_BOUNDS, type ServerBounds, serve } from "./serve.js";
import { unary } from "./unary.js";

// A one-method service with JSON messages: enough to see what connect() and serve() add.
const json = {
  serialize: (value: unknown) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as unknown,
};
const EchoService = {
  echo: {
    path: "/test.v1.Echo/Echo",
    requestStream: false,
    responseStream: false,
    requestSerialize: json.serialize,
    requestDeserialize: json.deserialize,
    responseSerialize: json.serialize,
    responseDeserialize: json.deserialize,
  },
} satisfies grpc.ServiceDefinition;
const EchoClient = grpc.makeGenericClientConstructor(EchoService, "Echo") as unknown as new (
  address: string,
  credentials: grpc.ChannelCredentials,
  options?: Partial<grpc.ClientOptions>,
) => grpc.Client & {
  echo(request: unknown, callback: (error: grpc.ServiceError | null, response: unknown) => void): void;
};

type Handler = (request: unknown, metadata: grpc.Metadata) => Promise<unknown>;
const servers: GrpcServer[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await server.close();
});

async function echoServer(handler: Handler, port = 0, bounds?: Partial<ServerBounds>): Promise<GrpcServer> {
  const server = await serve({
    ...(bounds === undefined ? {} : { bounds }),
    host: "127.0.0.1",
    port,
    services: [
      {
        definition: EchoService,
        implementation: {
          echo: unary(
            (request, call) => handler(request, call.metadata),
            (error) => ({ code: (error as { code?: grpc.status }).code ?? grpc.status.INTERNAL }),
          ),
        },
      },
    ],
    health: true,
    reflection: undefined,
    graceMs: 500,
  });
  servers.push(server);
  return server;
}

function echo(client: InstanceType<typeof EchoClient>, request: unknown): Promise<unknown> {
  return new Promise((resolve, reject) =>
    client.echo(request, (error, response) => (error ? reject(error) : resolve(response))),
  );
}

const failing = (code: grpc.status) => Object.assign(new Error(grpc.status[code]), { code });

describe("connect()", () => {
  it("retries a call while the server is not there yet, and gets its answer", async () => {
    const port = await freePort();
    const client = connect(EchoClient, {
      address: `127.0.0.1:${port}`,
      retry: { maxAttempts: 10, initialBackoffMs: 50, maxBackoffMs: 200 },
    });
    const answer = echo(client, { say: "hello" });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await echoServer(async (request) => request, port);
    expect(await answer).toEqual({ say: "hello" });
    client.close();
  });

  it("tries to connect again at the retries' pace, not at the channel's own slower one", async () => {
    // A port where every connection is dropped at once: each is one attempt of the channel.
    let attempts = 0;
    const dropper = createServer((socket) => {
      attempts += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => dropper.listen(0, "127.0.0.1", resolve));
    const { port } = dropper.address() as AddressInfo;
    const client = connect(EchoClient, {
      address: `127.0.0.1:${port}`,
      retry: { maxAttempts: 100, initialBackoffMs: 50, maxBackoffMs: 200 },
      deadlineMs: 2_500,
    });
    const answer = echo(client, { say: "unheard" }).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    // At most 240 ms apart (200 ms, +-20%): at least 8 in 2 s. grpc-js alone waits 1 s
    // after a failed connection, then 1.6 times longer each time: 2 or 3.
    expect(attempts).toBeGreaterThanOrEqual(6);
    // Its deadline ends the retries, with the last attempt's status.
    expect(await answer).toMatchObject({ code: grpc.status.UNAVAILABLE });
    client.close();
    await new Promise<void>((resolve) => dropper.close(() => resolve()));
  });

  it("retries UNAVAILABLE from the server, and nothing else", async () => {
    let calls = 0;
    const server = await echoServer(async (request) => {
      calls += 1;
      if (calls < 3) throw failing(grpc.status.UNAVAILABLE);
      if ((request as { bad?: boolean }).bad) throw failing(grpc.status.INVALID_ARGUMENT);
      return { calls };
    });
    const client = connect(EchoClient, { address: server.address, retry: { initialBackoffMs: 10 } });
    expect(await echo(client, {})).toEqual({ calls: 3 });
    await expect(echo(client, { bad: true })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    expect(calls).toBe(4);
    client.close();
  });

  it("gives up after its attempts, with the last status", async () => {
    let calls = 0;
    const server = await echoServer(async () => {
      calls += 1;
      throw failing(grpc.status.UNAVAILABLE);
    });
    const client = connect(EchoClient, {
      address: server.address,
      retry: { maxAttempts: 3, initialBackoffMs: 10 },
    });
    await expect(echo(client, {})).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(calls).toBe(3);
    client.close();
  });

  it("puts a deadline on every call", async () => {
    const server = await echoServer(() => new Promise(() => {}));
    const client = connect(EchoClient, { address: server.address, deadlineMs: 200 });
    await expect(echo(client, {})).rejects.toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED });
    client.close();
  });

  it("sends its metadata with every call", async () => {
    const server = await echoServer(async (_request, metadata) => ({ auth: metadata.get("authorization") }));
    const client = connect(EchoClient, { address: server.address, metadata: { authorization: "Bearer t" } });
    expect(await echo(client, {})).toEqual({ auth: ["Bearer t"] });
    client.close();
  });
});

describe("serve()", () => {
  it("reports the server and each service SERVING on grpc.health.v1", async () => {
    const server = await echoServer(async (request) => request);
    expect(await checkHealth(server.address)).toBe("SERVING");
    expect(await checkHealth(server.address, "test.v1.Echo")).toBe("SERVING");
  });

  it("says which port it took when asked for any", async () => {
    const server = await echoServer(async (request) => request);
    expect(server.port).toBeGreaterThan(0);
    expect(server.address).toBe(`127.0.0.1:${server.port}`);
  });
});

// grpc.health.v1.Health, as any client (a load balancer, grpcurl, an attacker) calls it.
const HealthClient = grpc.makeClientConstructor(healthService as grpc.ServiceDefinition, "Health");
type HealthAnswer = { status: string | number };
type HealthStub = grpc.Client & {
  watch(request: { service: string }): grpc.ClientReadableStream<HealthAnswer>;
  check(
    request: { service: string },
    callback: (error: grpc.ServiceError | null, answer: HealthAnswer) => void,
  ): void;
};

/** A client on a connection of its own (grpc-js shares one per target unless told not to). */
function ownConnection(address: string): HealthStub {
  return new HealthClient(address, grpc.credentials.createInsecure(), {
    "grpc.use_local_subchannel_pool": 1,
  }) as unknown as HealthStub;
}

/** A Watch stream, and its first answer (or the error that ended it first). */
function watch(client: HealthStub) {
  const call = client.watch({ service: "" });
  const first = new Promise<string>((resolve) => {
    call.on("data", (answer: { status: string | number }) => resolve(String(answer.status)));
    call.on("error", (error: grpc.ServiceError) => resolve(grpc.status[error.code]));
  });
  return { call, first };
}

function check(client: HealthStub, service = ""): Promise<string> {
  return new Promise((resolve) =>
    client.check({ service }, (error, answer) =>
      resolve(error ? grpc.status[error.code] : String(answer.status)),
    ),
  );
}

describe("serve(), against a caller with no token", () => {
  it("tells every connection it may open at most 100 streams at once", async () => {
    const server = await echoServer(async (request) => request);
    const session = http2Connect(`http://${server.address}`);
    try {
      const [settings] = (await once(session, "remoteSettings")) as [{ maxConcurrentStreams?: number }];
      expect(settings.maxConcurrentStreams).toBe(SERVER_BOUNDS.maxStreamsPerConnection);
      expect(SERVER_BOUNDS.maxStreamsPerConnection).toBe(100);
    } finally {
      session.destroy();
    }
  });

  it("does not refuse one connection's streams past its bound: they wait for a slot", async () => {
    const server = await echoServer(async (request) => request, 0, { maxStreamsPerConnection: 3 });
    const client = ownConnection(server.address);
    try {
      const watches = Array.from({ length: 5 }, () => watch(client));
      // Three open at once; the other two go on as soon as two of those end.
      const answered = await Promise.all(watches.slice(0, 3).map((w) => w.first));
      expect(answered).toEqual(["SERVING", "SERVING", "SERVING"]);
      for (const w of watches.slice(0, 2)) w.call.cancel();
      expect(await Promise.all(watches.slice(3).map((w) => w.first))).toEqual(["SERVING", "SERVING"]);
      for (const w of watches) w.call.cancel();
    } finally {
      client.close();
    }
  });

  it("refuses a Watch past the server's bound of open streams, whatever the connections, and still answers a Check", async () => {
    const server = await echoServer(async (request) => request, 0, {
      maxStreamsPerConnection: 2,
      maxOpenUnauthenticatedStreams: 4,
    });
    const clients = Array.from({ length: 3 }, () => ownConnection(server.address));
    try {
      const open = [0, 0, 1, 1].map((i) => watch(clients[i]!));
      expect(await Promise.all(open.map((w) => w.first))).toEqual([
        "SERVING",
        "SERVING",
        "SERVING",
        "SERVING",
      ]);
      // A fifth, on a connection of its own with room to spare: refused.
      const fifth = watch(clients[2]!);
      expect(await fifth.first).toBe("RESOURCE_EXHAUSTED");
      expect(await check(clients[2]!)).toBe("SERVING");
      // One ends: there is room for one more.
      open[0]!.call.cancel();
      await new Promise<void>((resolve) => open[0]!.call.on("error", () => resolve()));
      const again = await waitForWatch(clients[2]!);
      expect(again).toBe("SERVING");
    } finally {
      for (const client of clients) client.close();
    }
  });

  it("closes a connection that holds no call open", async () => {
    const server = await echoServer(async (request) => request, 0, { idleConnectionMs: 200 });
    const session = http2Connect(`http://${server.address}`);
    session.on("error", () => undefined);
    await once(session, "remoteSettings");
    // Closed by the server, with nothing but the connection held: no timeout of the test's own.
    await once(session, "close");
    expect(session.destroyed).toBe(true);
  });

  it("refuses a message over its bound, before any handler reads it", async () => {
    const server = await echoServer(async (request) => request, 0, { maxMessageBytes: 1_024 });
    const client = ownConnection(server.address);
    try {
      expect(await check(client, "x".repeat(2_048))).toBe("RESOURCE_EXHAUSTED");
      expect(await check(client)).toBe("SERVING");
    } finally {
      client.close();
    }
  });
});

/** A new Watch's first answer, trying again while the server has not yet seen the last one end. */
async function waitForWatch(client: HealthStub): Promise<string> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const w = watch(client);
    const first = await w.first;
    w.call.cancel();
    if (first !== "RESOURCE_EXHAUSTED") return first;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return "RESOURCE_EXHAUSTED";
}
