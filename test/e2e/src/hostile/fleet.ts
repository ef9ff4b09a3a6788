import { type RunningBudget, startBudget } from "@holdfast/budget";
import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { type RunningControl, startControl } from "@holdfast/control";
import { createLogger } from "@holdfast/log";
import { type RunningScheduler, startScheduler } from "@holdfast/scheduler";
import { type Stack, startStack } from "../stack.js";

/** Every HTTP listener of a stack: the gateway and projector, the control API and the scheduler's REST API. */
export interface Fleet {
  stack: Stack;
  /** Origins of each listener. */
  gateway: string;
  control: string;
  projector: string;
  scheduler: string;
  /** host:port of the scheduler's gRPC API (holdfast.v1.Runs). */
  schedulerGrpc: string;
  /** host:port of the control gRPC API (holdfast.v1.Control). */
  controlGrpc: string;
  /** host:port of the budget service's gRPC API (the stack's, or one started for the fleet). */
  budgetGrpc: string;
  /** A model call through the gateway, and its outcome in the log: the system goes on. */
  metered(runId: string): Promise<void>;
  close(): Promise<void>;
}

export async function startFleet(config: DeepPartial<Config>): Promise<Fleet> {
  const stack = await startStack({ config });
  const log = createLogger({ name: "hostile", level: "silent" });
  let control: RunningControl | undefined;
  let scheduler: RunningScheduler | undefined;
  let budget: RunningBudget | undefined;
  const close = async () => {
    await budget?.close();
    await scheduler?.close();
    await control?.close();
    await stack.close();
  };
  try {
    control = await startControl(
      loadConfig({
        env: {},
        overrides: {
          ...stack.configFor("control"),
          control: { ...stack.config.control, port: 0, grpc_port: 0, analytics_url: stack.analyticsUrl },
        },
      }),
      log,
    );
    scheduler = await startScheduler(
      loadConfig({
        env: {},
        overrides: {
          ...stack.configFor("scheduler"),
          scheduler: { host: "127.0.0.1", grpc_port: 0, port: 0 },
        },
      }),
      log,
    );
    // The stack starts a budget service only for budgets; without, one of the fleet's own.
    if (stack.config.budget.url === undefined)
      budget = await startBudget(
        loadConfig({
          env: {},
          overrides: { ...stack.configFor("budget"), budget: { ...stack.config.budget, port: 0 } },
        }),
        log,
      );
  } catch (error) {
    await close();
    throw error;
  }
  return {
    stack,
    gateway: new URL(stack.gatewayUrl).origin,
    control: new URL(control.url).origin,
    projector: stack.analyticsUrl,
    scheduler: scheduler.url,
    schedulerGrpc: scheduler.grpcAddress,
    controlGrpc: control.grpcAddress,
    budgetGrpc: budget?.address ?? stack.config.budget.url!,
    async metered(runId) {
      await stack.client({ headers: { "X-Holdfast-Run": runId } }).chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "still there?" }],
      });
      const run = await stack.settled(runId, 1);
      if (run.completed !== 1) throw new Error(`run ${runId} was not metered: ${JSON.stringify(run)}`);
    },
    close,
  };
}
