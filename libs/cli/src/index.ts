export { CliError } from "./errors.js";
export { readStack, type StackFile } from "./stack.js";
export { RAW_SIDES, type RawSide, rawSide, readStep, renderStep, type ShownStep, stepJson } from "./step.js";
