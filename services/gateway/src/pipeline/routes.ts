import { type ApiShape, openAIChatShape, SHAPES } from "@holdfast/providers";
import type { FastifyInstance } from "fastify";
import { handleCall, type PipelineDeps } from "./call.js";
import { finishDeps } from "./finish.js";
import { PipelineHooks, shared } from "./hooks.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /** The API shape a provider route speaks: its errors are answered in that shape. */
    shape?: ApiShape;
  }
}

/** One route per API shape, all through the one pipeline; `app.pipeline` takes the features' hooks. */
export function pipelineRoutes(deps: PipelineDeps) {
  return shared(async (app: FastifyInstance) => {
    const hooks = new PipelineHooks(deps.waiting);
    app.decorate("pipeline", hooks);
    const finishing = finishDeps(deps, hooks);
    for (const shape of SHAPES) {
      app.post(shape.path, { config: { shape } }, (request, reply) =>
        handleCall(shape, hooks, deps, finishing, request, reply),
      );
    }
  });
}

/** The shape whose errors a path's client expects, for errors raised before routing. */
export function shapeForPath(path: string): ApiShape {
  return (
    SHAPES.find((shape) => path === shape.path || path.startsWith(`${shape.path}/`)) ?? familyShape(path)
  );
}

function familyShape(path: string): ApiShape {
  // Anthropic's other routes (/v1/messages/count_tokens, …, its legacy /v1/complete) expect Anthropic's errors.
  const anthropic = path.startsWith("/v1/messages") || path === "/v1/complete";
  return (anthropic && SHAPES.find((s) => s.family === "anthropic")) || openAIChatShape;
}
