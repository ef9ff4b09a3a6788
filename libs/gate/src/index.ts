export { type GatedAnswer, type HeldCall, type Hold, heldTool, ToolGate } from "./gate.js";
export { ArgumentRedactor, MAX_RECORDED_ARGUMENTS } from "./redact.js";
export { type GateConfig, type GateMatch, type OnMatch, ToolGateRules } from "./rules.js";
export { contentHash, toolCallsSignature } from "./signature.js";
