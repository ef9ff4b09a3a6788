export { InsecureBindError } from "./errors.js";
export { type AnalyticsApiDeps, buildAnalyticsApi } from "./http.js";
export { type ProjectedRows, project } from "./projection.js";
export { Projector, type ProjectorOptions, type ProjectorStatus } from "./projector.js";
export { type RunningProjector, startProjector } from "./service.js";
