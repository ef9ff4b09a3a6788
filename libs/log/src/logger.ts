import { hostname } from "node:os";
import { type DestinationStream, type LevelWithSilent, type Logger, pino } from "pino";
import { CENSOR, REDACT_PATHS, scrub } from "./scrub.js";

export type LogLevel = LevelWithSilent;

export interface CreateLoggerOptions {
  /** The service name, bound as `service` on every line. */
  name: string;
  /** Defaults to "info". */
  level?: LogLevel;
  /** Where JSON lines go; defaults to stdout. */
  destination?: DestinationStream;
}

/**
 * The logger every Holdfast service uses: one JSON object per line, `service` bound, and no
 * credential ever written, whatever shape or depth it is logged in.
 */
export const createLogger = ({ name, level = "info", destination }: CreateLoggerOptions): Logger => {
  const options: pino.LoggerOptions = {
    level,
    base: { service: name, pid: process.pid, hostname: hostname() },
    // Lines are read raw (there is no pretty printer), so level names and ISO times.
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: [...REDACT_PATHS], censor: CENSOR },
    formatters: {
      level: (label) => ({ level: label }),
      log: (object) => scrub(object) as Record<string, unknown>,
    },
    // `scrub` has already turned errors into plain objects; serializing again would lose the type.
    serializers: { err: (value: unknown) => value },
    hooks: {
      // Arguments interpolated into the message (`%o`, `%j`) bypass `formatters.log`.
      logMethod(args, method) {
        const [first, ...rest] = args;
        method.apply(this, [first, ...rest.map(scrub)] as Parameters<typeof method>);
      },
    },
  };
  const logger = destination === undefined ? pino(options) : pino(options, destination);
  // pino applies `formatters.bindings` to the root only, so a child's bindings are scrubbed
  // here; children inherit this method from the root, so grandchildren are covered too.
  const child = logger.child;
  logger.child = function scrubbedChild(this: Logger, bindings, childOptions) {
    return child.call(this, scrub(bindings) as pino.Bindings, childOptions);
  } as Logger["child"];
  return logger;
};
