export { type AssembledAnswer, assembleAnswer } from "./assemble.js";
export { sseEvents, stepJson } from "./json.js";
export { type Get, openSnapshots, SnapshotReader, type StepSnapshot } from "./reader.js";
export { pieceEnds, SPLIT_KEYS, splitPieces } from "./split.js";
export {
  type AnswerManifest,
  CHUNK_CHARS,
  contentKey,
  INLINE_CHARS,
  manifestKey,
  patternDigest,
  type Redaction,
  type RequestManifest,
  redactionOf,
  type StoredText,
  storedValues,
} from "./store.js";
export { type Put, SnapshotWriter, type SnapshotWriterOptions } from "./writer.js";
