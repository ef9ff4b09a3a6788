export {
  type ControlStanza,
  DEFAULT_DEBIAN_MIRROR,
  type DebianArchive,
  type DebianRelation,
  type DebianRelationGroup,
  type OpenDebianArchiveOptions,
  openDebianArchive,
  parseControl,
  parseRelations,
} from "./debian.js";
export {
  DebianArchiveError,
  DebianArchiveUnsupportedError,
  NatsdError,
  type NatsdErrorCode,
  NatsServerInstallError,
  NatsServerInstallUnsupportedError,
  NatsServerNotFoundError,
  NatsServerStartError,
  NatsServerStartTimeoutError,
  NatsStoreInUseError,
} from "./errors.js";
export {
  defaultToolsDir,
  describeSearch,
  type FindNatsServerOptions,
  findNatsServer,
  findWorkspaceRoot,
  NATS_SERVER_ENV,
  type NatsServerBinary,
  type NatsServerSearch,
  type SearchOutcome,
  type SearchSource,
  type SearchStep,
  searchNatsServer,
} from "./find.js";
export { type NatsServerInfo, type ReadServerInfoOptions, readServerInfo } from "./info.js";
export {
  type EnsureNatsServerOptions,
  ensureNatsServer,
  type InstallNatsServerOptions,
  installNatsServer,
  MANUAL_INSTALL_HINT,
} from "./install.js";
export { supportsParentDeathSignal } from "./parent-death.js";
export {
  type NatsAccount,
  type NatsClusterOptions,
  type NatsServerTls,
  type NatsUser,
  parsePortsFile,
  type RunningNatsServer,
  renderAccounts,
  type StartNatsServerOptions,
  startNatsServer,
} from "./start.js";
export type { Exec, ExecOptions, ExecResult, System, Which } from "./system.js";
export {
  compareVersions,
  formatVersion,
  MIN_NATS_SERVER_VERSION,
  parseVersion,
  satisfiesMinimum,
  type Version,
} from "./version.js";
