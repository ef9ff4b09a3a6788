/**
 * The analytics API would listen where anyone could read every recorded call: off
 * loopback without a control token, and not allowed by control.insecure. The projector
 * does not start.
 */
export class InsecureBindError extends Error {
  override readonly name = "InsecureBindError";
  readonly code = "HOLDFAST_PROJECTOR_INSECURE_BIND";
  readonly retryable = false;
}
