export {
  type Bundle,
  type BundleRecord,
  bundleRecords,
  bundleRun,
  bundleStepShown,
  readBundle,
} from "./bundle.js";
export { diffRuns, lineDiff, renderDiff, type StepDiff } from "./diff.js";
export { CliError } from "./errors.js";
export { renderRun } from "./show.js";
export { readStack, type StackFile } from "./stack.js";
export { RAW_SIDES, type RawSide, rawSide, readStep, renderStep, type ShownStep, stepJson } from "./step.js";
