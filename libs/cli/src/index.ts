export { CliError } from "./errors.js";
export { readStack, type StackFile } from "./stack.js";
