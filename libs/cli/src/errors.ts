/** An error the CLI reports as one line to the operator, with a non-zero exit code. */
export class CliError extends Error {
  override readonly name = "CliError";
  readonly code = "HOLDFAST_CLI";
  readonly retryable = false;
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}
