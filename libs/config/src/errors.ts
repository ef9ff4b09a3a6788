/** One thing wrong with the configuration, attributed to the layer that supplied it. */
export interface ConfigIssue {
  /** Dotted path of the offending key, e.g. "gateway.port"; undefined when the whole source is unusable. */
  readonly key: string | undefined;
  /** The file path, the env var name (e.g. "HOLDFAST_GATEWAY__PORT"), "flag" or "default". */
  readonly source: string;
  /** 1-based line in the config file, when the issue comes from one. */
  readonly line: number | undefined;
  /** Full sentence: `<source>: <key>: <what was expected>, got <what was found>`. */
  readonly message: string;
}

/**
 * The configuration cannot be used. Never retryable: the same inputs fail the same way,
 * so a service should exit with the message rather than loop.
 */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly code = "HOLDFAST_CONFIG_INVALID";
  readonly retryable = false;
  /** Every problem found; `key`, `source` and `line` repeat the first for the common one-typo case. */
  readonly issues: readonly ConfigIssue[];
  readonly key: string | undefined;
  readonly source: string;
  readonly line: number | undefined;

  constructor(issues: readonly [ConfigIssue, ...ConfigIssue[]], options?: { cause?: unknown }) {
    super(issues.map((issue) => issue.message).join("\n"), options);
    const [first] = issues;
    this.issues = issues;
    this.key = first.key;
    this.source = first.source;
    this.line = first.line;
  }
}
