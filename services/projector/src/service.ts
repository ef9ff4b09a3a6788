import { join } from "node:path";
import { AccessPolicy, ANALYTICS_API, bindingProblem } from "@holdfast/access";
import { migrate, openAnalytics } from "@holdfast/analytics";
import { connectBus } from "@holdfast/bus";
import { type Config, natsConnection } from "@holdfast/config";
import { QUARANTINE_REASONS, type QuarantineReason } from "@holdfast/events";
import { gauge, listenOn, logReaderMetrics, renderMetrics } from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import { InsecureBindError } from "./errors.js";
import { buildAnalyticsApi } from "./http.js";
import { Projector } from "./projector.js";

export interface RunningProjector {
  /** Base URL of the analytics API, e.g. http://127.0.0.1:43210. */
  url: string;
  close(): Promise<void>;
}

/**
 * Wires the projector from configuration. `main.ts` adds process signals around it.
 * Refuses to start with its analytics API off loopback without a control token (read-only
 * or not) unless control.insecure is set.
 */
export async function startProjector(config: Config, log: Logger): Promise<RunningProjector> {
  const access = { ...config.control, host: config.projector.host };
  const problem = bindingProblem(access, ANALYTICS_API);
  if (problem !== undefined) throw new InsecureBindError(`The projector will not start: ${problem}`);
  if (!config.nats.url)
    throw new Error("nats.url is not set: the projector needs a NATS server (holdfast up sets it)");
  const analytics = await openAnalytics({
    url: config.clickhouse.url,
    dataDir: join(config.data_dir, "clickhouse"),
    database: config.clickhouse.database,
    username: config.clickhouse.username,
    password: config.clickhouse.password,
    readerUsername: config.clickhouse.reader_username,
    readerPassword: config.clickhouse.reader_password,
    limits: {
      maxRows: config.analytics.max_rows,
      maxExecutionMs: config.analytics.max_execution_ms,
      maxMemoryBytes: config.analytics.max_memory_bytes,
    },
  });
  if (analytics.reader.refusal !== undefined) log.warn(analytics.reader.refusal);
  const applied = await migrate(analytics);
  if (applied.length > 0) log.info({ applied }, "ClickHouse migrations applied");
  const bus = await connectBus({
    ...natsConnection(config.nats),
    name: "holdfast-projector",
    principal: "projector",
    log,
  });
  await bus.provision();
  const projector = new Projector({
    bus,
    analytics,
    log,
    consumer: config.projector.consumer,
    batchSize: config.projector.batch_size,
    lingerMs: config.projector.linger_ms,
    ackWaitMs: config.projector.ack_wait_ms,
    leaseMs: config.projector.lease_ms,
  });
  await projector.start();

  let streamLastSeq = 0;
  const refresh = async () => {
    try {
      streamLastSeq = (await bus.streamState()).lastSeq;
      await projector.refresh();
    } catch {
      // Keep the last known value; /health reports the projector's own error separately.
    }
  };
  await refresh();
  const ticker = setInterval(refresh, 1_000);
  ticker.unref();

  const metrics = [
    ...logReaderMetrics("projector", () => bus.quarantineCounts),
    // What the log holds set aside, as the projection keeps it (across restarts, and
    // whichever projector set it aside): what an alert on quarantined events reads.
    gauge({
      name: "holdfast_projection_events_quarantined",
      help: "Events of the log the projection holds set aside (the quarantined_events view), by reason.",
      labels: { reason: QUARANTINE_REASONS },
      value: ({ reason }) => projector.status.quarantined.by_reason[reason as QuarantineReason],
    }),
  ];
  const api = buildAnalyticsApi({
    analytics,
    access: new AccessPolicy(access, { name: "analytics API", readOnly: "query" }),
    log,
    limits: config.http,
    status: () => ({ ...projector.status, streamLastSeq }),
    metrics: () => renderMetrics(metrics),
  });
  const port = await listenOn(api, {
    host: config.projector.host,
    port: config.projector.port,
    freePortIfTaken: config.free_port_if_taken,
  });
  log.info(
    {
      port,
      engine: analytics.engine,
      projectedSeq: projector.status.projectedSeq,
      role: projector.status.role,
    },
    "projector running",
  );
  return {
    url: `http://${config.projector.host}:${port}`,
    async close() {
      clearInterval(ticker);
      await api.close();
      await projector.stop();
      await bus.close();
      await analytics.close();
    },
  };
}
