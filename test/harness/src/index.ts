export { type ClusterNode, type NatsCluster, type StartClusterOptions, startCluster } from "./cluster.js";
export { NATS_URL_KEY } from "./context.js";
export {
  HarnessError,
  type HarnessErrorCode,
  NatsUrlUnavailableError,
  PythonHttpxInstallError,
  PythonUnavailableError,
  WaitForTimeoutError,
} from "./errors.js";
export { uniqueNamespace } from "./namespace.js";
export { type LaunchNatsServerOptions, launchNatsServer, natsUrl } from "./nats.js";
export { freePort } from "./port.js";
export {
  defaultPythonToolsDir,
  type EnsurePythonGrpcOptions,
  type EnsurePythonHttpxOptions,
  ensurePythonGrpc,
  ensurePythonHttpx,
  MIN_PYTHON_VERSION,
  type NativePackages,
  PYTHON_GRPC_SUITE,
  PYTHON_GRPC_VERSION,
  PYTHON_HTTPX_SUITE,
  type PythonGrpc,
  type PythonHttpx,
  pythonEnv,
  resolvePythonPackages,
} from "./python.js";
export { publishRaw } from "./raw.js";
export { makeTempDir, type TempDir } from "./temp.js";
export { makeCertificates, type TestCertificates } from "./tls.js";
export { type WaitForOptions, waitFor } from "./wait.js";
