import { tenantDefect } from "@holdfast/events";
import * as z from "zod";

// Every leaf carries its own "expected …" phrase so that an error reads the same whichever
// check failed (type, range or format) and whichever layer supplied the value.

const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const FIELD_PATH = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;
const GO_DURATION = /^(always|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$/;

const integer = (min: number, max: number) => {
  const error = `expected an integer from ${min} to ${max}`;
  return z.int({ error }).min(min, { error }).max(max, { error });
};

const positiveInteger = () => {
  const error = "expected a positive integer";
  return z.int({ error }).positive({ error });
};

const positiveNumber = () => {
  const error = "expected a number greater than 0";
  return z.number({ error }).positive({ error });
};

const usdPerMillionTokens = () => {
  const error = "expected a number of at least 0 (USD per million tokens)";
  return z.number({ error }).nonnegative({ error });
};

const text = (what: string) => {
  const error = `expected ${what}`;
  return z.string({ error }).min(1, { error });
};

const matching = (pattern: RegExp, what: string) => {
  const error = `expected ${what} matching ${pattern.source}`;
  return z.string({ error }).regex(pattern, { error });
};

const url = (...schemes: string[]) =>
  z.url({
    protocol: new RegExp(`^(${schemes.join("|")})$`),
    error: `expected a URL starting with ${schemes.map((scheme) => `${scheme}://`).join(" or ")}`,
  });

// `~user/…` would otherwise be taken as a relative directory literally named "~user".
const path = () =>
  text("a path").refine((value) => !/^~[^/\\]/.test(value), {
    error: "expected a path; only a leading ~/ is expanded (to the home directory)",
  });

const upstreamUrl = (shape: string) =>
  url("http", "https")
    .transform((value) => value.replace(/\/+$/, ""))
    .optional()
    .describe(`Base URL (with its version, …/v1) for ${shape} calls; unset, gateway.upstream decides.`);

const list = <T extends z.ZodType>(item: T, what: string) =>
  z.array(item, { error: `expected a list of ${what}` });

const flag = () => z.boolean({ error: "expected true or false" });

const headerName = () => {
  const error = "expected an HTTP header name";
  return z.string({ error }).regex(HTTP_TOKEN, { error });
};

// A section may be omitted entirely: `prefault({})` (unlike `default({})`) still runs the
// inner defaults on the empty object.
const mapping = { error: "expected a mapping of keys to values" };

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

const usd = () => {
  const error = "expected a number of at least 0 (USD)";
  return z.number({ error }).nonnegative({ error });
};

const count = () => {
  const error = "expected an integer of at least 0";
  return z.int({ error }).nonnegative({ error });
};

const LIMIT_FIELDS = {
  max_cost_usd: usd().describe("Most a run may spend in one window, in USD; 0 for no limit."),
  max_steps: count().describe("Most model calls a run may make in one window; 0 for no limit."),
  max_minutes: usd().describe("Longest a run's window may last, in minutes; 0 for no limit."),
  max_tokens_per_minute: count().describe(
    "Most tokens (input and output) a run may use in any minute; 0 for no limit.",
  ),
};

const limitsSection = z.strictObject(
  {
    max_cost_usd: LIMIT_FIELDS.max_cost_usd.default(0),
    max_steps: LIMIT_FIELDS.max_steps.default(0),
    max_minutes: LIMIT_FIELDS.max_minutes.default(0),
    max_tokens_per_minute: LIMIT_FIELDS.max_tokens_per_minute.default(0),
  },
  mapping,
);

const tagLimits = z.strictObject(
  {
    max_cost_usd: LIMIT_FIELDS.max_cost_usd.optional(),
    max_steps: LIMIT_FIELDS.max_steps.optional(),
    max_minutes: LIMIT_FIELDS.max_minutes.optional(),
    max_tokens_per_minute: LIMIT_FIELDS.max_tokens_per_minute.optional(),
  },
  { error: "expected a mapping of limits (max_cost_usd, max_steps, max_minutes, max_tokens_per_minute)" },
);

const budget = z.strictObject(
  {
    daily_usd: usd().optional().describe("Most the runs under this key may spend in one UTC day, in USD."),
    monthly_usd: usd()
      .optional()
      .describe("Most the runs under this key may spend in one UTC month, in USD."),
  },
  { error: "expected a mapping with daily_usd and/or monthly_usd" },
);

// Tool-call gate patterns are JavaScript regular expressions with the `u` flag, checked
// when the configuration loads so a bad one names its key instead of failing a call.
export const GATE_REGEX_FLAGS = "u";

const regex = (what: string) =>
  text(what).superRefine((value, context) => {
    try {
      new RegExp(value, GATE_REGEX_FLAGS);
    } catch (error) {
      context.addIssue({
        code: "custom",
        message: `expected ${what}: ${(error as Error).message.replace(/^Invalid regular expression: /, "")}`,
      });
    }
  });

// A rule is a tool name glob, or {name: glob, args: regex}; a bare glob is {name: glob}.
const gateRule = z.preprocess(
  (value) => (typeof value === "string" ? { name: value } : value),
  z.strictObject(
    {
      name: text("a glob over tool names")
        .default("*")
        .describe('Glob over the tool\'s name ("delete_*", "*").'),
      args: regex("a regular expression over the tool call's JSON arguments")
        .optional()
        .describe("Regular expression searched in the tool call's arguments, as the model sent them (JSON)."),
    },
    { error: "expected a tool name glob, or a mapping with name (a glob) and args (a regular expression)" },
  ),
);

const onMatch = z
  .enum(["hold", "stop"], { error: "expected hold or stop" })
  .describe(
    "What a matched tool call does to the run while its answer waits: hold the run, or stop it (409 for its other calls).",
  );

const gateRules = list(gateRule, "tool name globs or {name, args} rules").describe(
  "Tool calls whose answers are held for an operator's approval.",
);

const dimensionHeaders = z.strictObject(
  {
    limit: headerName().describe("Header carrying the dimension's limit."),
    remaining: headerName().describe("Header carrying what is left of it."),
    reset: headerName().describe("Header carrying when it is whole again."),
  },
  { error: "expected a mapping with limit, remaining and reset header names" },
);

// Where a provider writes its window: a preset, or the header names of each dimension.
const rateLimitHeaders = z
  .union(
    [
      z.enum(["openai", "anthropic"]),
      z.strictObject({
        reset_format: z
          .enum(["duration", "timestamp"], { error: "expected duration or timestamp" })
          .default("duration")
          .describe('How resets are written: "duration" (1s, 6m0s, 120ms) or "timestamp" (RFC 3339).'),
        requests: dimensionHeaders.optional(),
        tokens: dimensionHeaders.optional(),
        input_tokens: dimensionHeaders.optional(),
        output_tokens: dimensionHeaders.optional(),
      }),
    ],
    {
      error:
        'expected "openai", "anthropic", or a mapping of dimensions (requests, tokens, input_tokens, output_tokens) to {limit, remaining, reset} header names',
    },
  )
  .describe(
    'The upstream\'s rate-limit headers: "openai" (x-ratelimit-*), "anthropic" (anthropic-ratelimit-*), or {reset_format, requests, tokens, input_tokens, output_tokens: {limit, remaining, reset}}.',
  );

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

const routeTarget = z.strictObject(
  {
    upstream: url("http", "https")
      .transform((value) => value.replace(/\/+$/, ""))
      .describe("The provider's base URL (with its version, …/v1); it must speak the API the call uses."),
    model: text("a model name").describe("The model asked of this upstream."),
    key_env: matching(ENV_NAME, "an environment variable name")
      .optional()
      .describe(
        "The environment variable holding this upstream's API key; unset, the caller's own key is sent.",
      ),
  },
  { error: "expected a mapping with upstream, model and optionally key_env" },
);

const routeTargets = list(routeTarget, "route targets ({upstream, model, key_env})").min(1, {
  error: "expected at least one route target",
});

const route = z
  .union(
    [
      routeTargets,
      z.strictObject(
        {
          targets: routeTargets,
          expose_model: flag()
            .default(false)
            .describe("Answers name the model that served them, not the alias the agent asked for."),
        },
        { error: "expected a mapping with targets and optionally expose_model" },
      ),
    ],
    {
      error:
        "expected a list of route targets ({upstream, model, key_env}), or {targets: [...], expose_model: true|false}",
    },
  )
  .transform((value) => (Array.isArray(value) ? { targets: value, expose_model: false } : value))
  .describe(
    "Where calls asking for this model go: a list of {upstream, model, key_env}, or {targets, expose_model}; each call takes the target with the most headroom for its estimate, then falls back in order.",
  );

const routingSection = z.strictObject(
  {
    breaker_failures: integer(1, 1_000)
      .default(3)
      .describe(
        "Consecutive 5xx answers (or unreachable attempts) from a route target that open its circuit breaker.",
      ),
    breaker_open_s: positiveNumber()
      .default(30)
      .describe("How long an open breaker keeps calls off its target before one call probes it (half-open)."),
    cooldown_s: positiveNumber()
      .default(10)
      .describe(
        "How long a target that answered 429 is passed over when the provider named no reset or retry-after.",
      ),
  },
  mapping,
);

const declaredLimit = z
  .strictObject(
    {
      window_s: positiveNumber()
        .max(86_400, { error: "expected at most 86400 (a day)" })
        .default(60)
        .describe("The window the limits are per, in seconds (at most a day)."),
      requests: positiveInteger().optional().describe("Requests a key may make per window."),
      tokens: positiveInteger().optional().describe("Tokens (input and output) a key may use per window."),
      input_tokens: positiveInteger().optional().describe("Input tokens a key may use per window."),
      output_tokens: positiveInteger().optional().describe("Output tokens a key may use per window."),
    },
    mapping,
  )
  .refine(
    (l) =>
      l.requests !== undefined ||
      l.tokens !== undefined ||
      l.input_tokens !== undefined ||
      l.output_tokens !== undefined,
    { error: "expected at least one of requests, tokens, input_tokens or output_tokens" },
  );

const predictSection = z
  .strictObject(
    {
      enabled: flag()
        .default(true)
        .describe(
          "Read providers' rate-limit headers and act before a 429: a call goes on, waits for the key's window, or checkpoints its run.",
        ),
      wait_threshold_s: positiveNumber()
        .default(15)
        .describe(
          "A call that must wait up to this long for its key's window waits in place; longer, its run is checkpointed (held with reason rate_limit).",
        ),
      max_wait_s: positiveNumber()
        .default(300)
        .describe(
          "The longest one call waits (in place or checkpointed) before it is answered with the provider's own 429 and retry-after.",
        ),
      on_checkpoint: z
        .enum(["auto_resume", "hold"], { error: "expected auto_resume or hold" })
        .default("auto_resume")
        .describe(
          "A checkpointed run resumes by itself when the window allows (auto_resume), or waits for an operator (hold).",
        ),
      compaction: z
        .enum(["off", "truncate", "summarize"], { error: "expected off, truncate or summarize" })
        .default("off")
        .describe(
          "A call too large for its key's whole window: refused (off), or sent with the run's oldest messages dropped (truncate) or replaced by a summary (summarize); later calls of the run are sent compacted the same way.",
        ),
      summary_model: z
        .string({ error: "expected a model name" })
        .default("")
        .describe(
          "The model that writes a compaction's summary, through the call's own upstream and key; empty: the call's own model.",
        ),
      compaction_keep: integer(1, 1_000)
        .default(4)
        .describe(
          "Messages at the end of a conversation a compaction keeps as they are (system prompts are always kept).",
        ),
      k: z
        .number({ error: "expected a number of at least 0" })
        .nonnegative({ error: "expected a number of at least 0" })
        .default(3)
        .describe("The margin: a call is granted its estimate plus k·σ of the estimates' error."),
      k_max: z
        .number({ error: "expected a number of at least 0" })
        .nonnegative({ error: "expected a number of at least 0" })
        .default(8)
        .describe("Each 429 that slips through adds k_step to k, up to this."),
      k_step: z
        .number({ error: "expected a number of at least 0" })
        .nonnegative({ error: "expected a number of at least 0" })
        .default(1)
        .describe("What each 429 that slips through adds to k."),
      max_retries: integer(0, 10)
        .default(2)
        .describe(
          "A 429 that slips through is retried inside the gateway (after its retry-after) this many times before the agent sees it.",
        ),
      estimator: z
        .enum(["moving_average", "features"], { error: "expected moving_average or features" })
        .default("moving_average")
        .describe(
          "moving_average: each run's own history; features: ridge regression over predict.features across the fleet.",
        ),
      features: list(
        z.enum(["model", "tag", "tools", "messages", "input"], {
          error: "expected model, tag, tools, messages or input",
        }),
        "features",
      )
        .default(["model", "tag", "tools", "messages", "input"])
        .describe("What the features estimator learns output tokens and latency from."),
      shared: flag()
        .default(true)
        .describe(
          "Share each provider key's window across every gateway through the budget service (budget.url): calls take room from one account, queued by priority; off, or while the service cannot be reached, each gateway decides from what it has read.",
        ),
      slice_ms: integer(100, 60_000)
        .default(2_000)
        .describe(
          "How long a gateway may spend a slice of a shared window before it asks again (what it did not spend goes back).",
        ),
      priority_by_tag: z
        .record(
          text("a tag"),
          integer(-1_000, 1_000).describe("The tag's priority, from -1000 to 1000 (default 0)."),
          {
            error: "expected a mapping of tags to integer priorities",
          },
        )
        .default({})
        .describe(
          "A run's priority for a shared window by its tag (X-Holdfast-Priority overrides it): higher is served first.",
        ),
      priority_aging_s: positiveNumber()
        .default(10)
        .describe(
          "A call waiting for a shared window gains one priority level per this many seconds waited, so none starves.",
        ),
      window_shapes: z
        .record(
          url("http", "https"),
          z
            .enum(["auto", "continuous", "fixed"], { error: "expected auto, continuous or fixed" })
            .describe("An upstream origin's window shape: auto, continuous or fixed."),
          { error: "expected a mapping of upstream origins to auto, continuous or fixed" },
        )
        .default({})
        .describe(
          "How each upstream's windows refill, when known: continuous (a token bucket, refilled evenly to its reset), fixed (whole again at once at its reset); auto (or unset): learnt from its readings, nothing counted back before a reset until they show it refills as it goes.",
        ),
      limits: z
        .record(url("http", "https"), declaredLimit, {
          error:
            "expected a mapping of upstream origins to {window_s, requests, tokens, input_tokens, output_tokens}",
        })
        .default({})
        .describe(
          "The limits an upstream enforces per key, by origin, for one that sends no rate-limit headers: each key's account starts whole and is kept by the budget service (needs predict.shared) until its answers carry headers; refilled evenly when predict.window_shapes says continuous, else counted as a sliding log of what was granted.",
        ),
      headers: z
        .record(url("http", "https"), rateLimitHeaders, {
          error: "expected a mapping of upstream origins to rate-limit header names",
        })
        .default({})
        .describe(
          'Rate-limit header names per upstream origin ("openai", "anthropic", or per dimension); unset, by the API shape\'s family.',
        ),
    },
    mapping,
  )
  // Declared limits are kept in the fleet's account of each key: a gateway alone has no ledger.
  .refine((p) => p.shared || Object.keys(p.limits).length === 0, {
    path: ["limits"],
    error: "needs predict.shared: the budget service keeps the account of each key a limit is declared for",
  });

const price = z.strictObject(
  {
    input_per_mtok: usdPerMillionTokens().describe("USD per million input (prompt) tokens."),
    output_per_mtok: usdPerMillionTokens().describe("USD per million output (completion) tokens."),
    cached_input_per_mtok: usdPerMillionTokens()
      .optional()
      .describe("USD per million cached input tokens, for providers that discount them."),
  },
  { error: "expected a mapping with input_per_mtok and output_per_mtok" },
);

const SHA256_HEX = /^[0-9A-Fa-f]{64}$/;

const tenant = z.strictObject(
  {
    keys_sha256: list(
      matching(SHA256_HEX, "the SHA-256 of a gateway key, 64 hex digits"),
      "SHA-256 hashes (hex) of gateway keys",
    )
      .min(1, { error: "expected at least one gateway key's SHA-256" })
      .transform((hashes) => hashes.map((hash) => hash.toLowerCase()))
      .describe(
        "SHA-256 (hex) of each gateway key issued to the tenant (`holdfast tenants key <tenant>` makes one and prints its line); only hashes, so the file holds no usable key.",
      ),
  },
  { error: "expected a mapping with keys_sha256 (a list of SHA-256 hashes of the tenant's gateway keys)" },
);

export const configSchema = z
  .strictObject({
    data_dir: path()
      .default("~/.holdfast")
      .describe("Where Holdfast keeps the embedded NATS store, embedded ClickHouse and its state."),
    free_port_if_taken: flag()
      .default(false)
      .describe(
        "A listener whose port another process holds listens on a free port instead of failing, and says which in its startup line (`holdfast up` sets it, so two stacks started at once both come up).",
      ),
    log_level: z
      .enum(LOG_LEVELS, { error: `expected one of ${LOG_LEVELS.join(", ")}` })
      .default("info")
      .describe("Least severe log level written by every service."),
    http: z
      .strictObject(
        {
          header_timeout_ms: integer(100, 3_600_000)
            .default(20_000)
            .describe(
              "How long a client may take to send a request's headers, from its connection's opening, in milliseconds; later, a 408 and the connection is closed.",
            ),
          request_timeout_ms: integer(100, 86_400_000)
            .default(120_000)
            .describe(
              "How long a client may take to send a whole request, headers and body, in milliseconds; later, a 408 and the connection is closed. Only receiving is timed: a held call or a long stream is answered for as long as it takes.",
            ),
          idle_timeout_ms: integer(100, 3_600_000)
            .default(75_000)
            .describe(
              "How long a kept-alive connection may wait idle for its next request before it is closed, in milliseconds.",
            ),
          max_headers: integer(10, 10_000)
            .default(500)
            .describe(
              "Most header fields a request may have; more gets a 431 (rather than the rest being dropped unread).",
            ),
          max_json_depth: integer(1, 1_000)
            .default(128)
            .describe(
              "Deepest nesting of objects and arrays a JSON request body may have; deeper gets a 400 naming this bound.",
            ),
        },
        mapping,
      )
      // Node refuses a server whose headers may take longer than the whole request.
      .refine((h) => h.header_timeout_ms <= h.request_timeout_ms, {
        path: ["header_timeout_ms"],
        error: "must be at most http.request_timeout_ms: the headers are part of the request",
      })
      .prefault({})
      .describe(
        "Limits every HTTP listener (the gateway, control, projector and scheduler) holds its clients to.",
      ),
    gateway: z
      .strictObject(
        {
          host: text("a host name or IP address")
            .default("127.0.0.1")
            .describe("Interface the gateway listens on."),
          port: integer(0, 65535).default(4141).describe("Port the gateway listens on; 0 picks a free port."),
          upstream: z
            .union(
              [
                z.literal("auto"),
                url("http", "https")
                  // The gateway appends the API path, so a trailing slash would double up.
                  .transform((value) => value.replace(/\/+$/, "")),
              ],
              { error: 'expected "auto" or a URL starting with http:// or https://' },
            )
            .default("auto")
            .describe(
              'Provider base URL with its version (…/v1), as an OpenAI SDK would use it; "auto" sends Anthropic Messages to https://api.anthropic.com/v1 and the rest to https://api.openai.com/v1.',
            ),
          upstreams: z
            .strictObject(
              {
                openai_chat_completions: upstreamUrl("Chat Completions"),
                openai_responses: upstreamUrl("Responses"),
                anthropic_messages: upstreamUrl("Anthropic Messages"),
              },
              mapping,
            )
            .prefault({})
            .describe("A base URL per API shape, overriding gateway.upstream for that shape."),
          max_body_bytes: positiveInteger()
            .default(33_554_432)
            .describe("Largest request body the gateway accepts, in bytes."),
          max_answer_bytes: integer(1_024, 4_294_967_296)
            .default(67_108_864)
            .describe(
              "Largest answer the gateway reads from a provider, in bytes, decompressed: a non-streamed answer (or error) whole, a stream in all its events. Past it the answer is cut off: the client gets a 502 upstream_answer_too_large in its API's shape (mid-stream, the stream's error event) and the step is recorded failed (upstream_too_large), charged from Holdfast's estimate.",
            ),
          max_event_bytes: integer(1_024, 4_294_967_296)
            .default(16_777_216)
            .describe(
              "Largest single event (its lines together) of a provider's stream the gateway holds while it is incomplete, in bytes; past it the stream is cut off as past gateway.max_answer_bytes.",
            ),
          upstream_timeout_ms: positiveInteger()
            .default(600_000)
            .describe(
              "How long the gateway waits for the provider before failing the step, in milliseconds.",
            ),
          upstream_connections: integer(0, 1_000_000)
            .default(0)
            .describe(
              "Most connections the gateway opens to one provider origin (calls beyond wait for one); 0 for no limit. Mind the process's open-files limit.",
            ),
          heartbeat_ms: positiveInteger()
            .default(10_000)
            .describe(
              "How often a gateway says it is alive; one silent for 3 beats is dead and its calls in flight are marked failed.",
            ),
          outcome_defer_ms: integer(0, 60_000)
            .default(2)
            .describe(
              "How long a call's outcome may wait, once the client has its answer, to share one write to the log with other events, in milliseconds; a gateway killed meanwhile leaves the call to be charged from its estimate.",
            ),
          instance_id: text("a non-empty string")
            .optional()
            .describe("Identifies this gateway in recorded events; when unset the gateway derives one."),
          passthrough: z
            .enum(["allow", "deny_models"], { error: "expected allow or deny_models" })
            .default("allow")
            .describe(
              "The /v1/* paths that are not metered: allow passes them through (a named run's stop, hold and limits govern them all the same); deny_models refuses (403) every write to a path that runs a model unmetered (/v1/completions, /v1/embeddings, /v1/batches, /v1/messages/batches, …), while reads such as /v1/models stay allowed.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("The HTTP gateway agents send their model calls to."),
    nats: z
      .strictObject(
        {
          url: url("nats", "tls")
            .optional()
            .describe("NATS server to use; when unset, `holdfast up` starts its own nats-server."),
          host: text("a host name or IP address")
            .default("127.0.0.1")
            .describe("Interface the embedded nats-server listens on."),
          port: integer(0, 65535)
            .default(0)
            .describe("Port of the embedded nats-server; 0 picks a free port."),
          credentials: path()
            .optional()
            .describe(
              "This process's NATS credential: a file holding its nkey seed (SU…), or a .creds file; `holdfast up` writes one per service under data_dir/credentials/. Unset, no credential is presented.",
            ),
          tls: z
            .strictObject(
              {
                ca_file: path()
                  .optional()
                  .describe(
                    "CA certificate the NATS server's certificate must chain to; unset, the system's.",
                  ),
                cert_file: path()
                  .optional()
                  .describe("Client certificate, for a NATS server that verifies clients (mutual TLS)."),
                key_file: path().optional().describe("The client certificate's private key."),
              },
              mapping,
            )
            .optional()
            .describe("TLS to the NATS server (for a tls:// URL, or a server that requires it)."),
          prefix: matching(/^[a-z][a-z0-9_]{0,31}$/, "a lowercase name")
            .default("hf")
            .describe("Prefix of every subject and stream name, so several installs can share a server."),
          replicas: integer(1, 5).default(1).describe("JetStream stream replicas."),
          server_bin: path()
            .optional()
            .describe("nats-server executable for the embedded server; a bare name is looked up on PATH."),
          sync_interval: matching(GO_DURATION, 'a duration like "2m" or "always"')
            .optional()
            .describe('How often the embedded nats-server fsyncs JetStream data, e.g. "2m" or "always".'),
          watch_linger_ms: integer(1, 10_000)
            .default(100)
            .describe(
              "How often a service that follows the whole log (the gateways, budget, control and scheduler) reads what was appended since its last read, while events come: how late it may see another process's event that is not pushed at once, in milliseconds. Holds, resumes, rules, gate decisions and rate-limit readings are pushed as they are stored.",
            ),
          gomaxprocs: integer(0, 1024)
            .optional()
            .describe(
              "CPUs the embedded nats-server's Go runtime may run on at once (GOMAXPROCS); 0 is Go's own default, every CPU. Unset: a quarter of the machine's CPUs, at least 1, since the server shares its machine with the rest of the stack.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("The NATS JetStream server that carries Holdfast's events."),
    clickhouse: z
      .strictObject(
        {
          url: url("http", "https")
            .optional()
            .describe("ClickHouse HTTP endpoint; when unset, embedded chDB under data_dir/clickhouse."),
          database: matching(/^[A-Za-z_][A-Za-z0-9_]*$/, "a database name")
            .default("holdfast")
            .describe("Database holding Holdfast's tables."),
          username: text("a user name").default("default").describe("ClickHouse user."),
          password: z
            .string({ error: "expected a string (quote it in YAML if it looks like a number)" })
            .default("")
            .describe("ClickHouse password."),
          reader_username: text("a user name")
            .optional()
            .describe(
              "Read-only ClickHouse user (server only) that operator SQL runs as; unset, a server refuses operator SQL.",
            ),
          reader_password: z
            .string({ error: "expected a string (quote it in YAML if it looks like a number)" })
            .default("")
            .describe("Password of clickhouse.reader_username."),
        },
        mapping,
      )
      .prefault({})
      .describe("The ClickHouse database the projector writes and queries read."),
    analytics: z
      .strictObject(
        {
          max_rows: integer(1, 1_000_000)
            .default(10_000)
            .describe("Most rows an operator query returns; the engine stops reading past it."),
          max_execution_ms: positiveInteger()
            .default(30_000)
            .describe("Longest an operator query may run before the engine cancels it, in milliseconds."),
          max_memory_bytes: positiveInteger()
            .default(1_073_741_824)
            .describe("Most memory one operator query (and its result) may use, in bytes."),
        },
        mapping,
      )
      .prefault({})
      .describe("Limits the engine enforces on operator SQL (holdfast query)."),
    projector: z
      .strictObject(
        {
          host: text("a host name or IP address")
            .default("127.0.0.1")
            .describe("Interface the projector's HTTP API listens on."),
          port: integer(0, 65535)
            .default(0)
            .describe("Port of the projector's HTTP API; 0 picks a free port."),
          batch_size: integer(1, 50_000)
            .default(5_000)
            .describe("Most events written to ClickHouse per insert (and unacknowledged at once)."),
          linger_ms: integer(0, 60_000)
            .default(1_000)
            .describe(
              "How long the projector waits between takes of what the log holds (each take one batch, one insert per table): how far the projection may trail the log, in milliseconds.",
            ),
          consumer: matching(/^[A-Za-z0-9_-]+$/, "a consumer name")
            .default("projector")
            .describe("Durable JetStream consumer name the projector reads through."),
          ack_wait_ms: positiveInteger()
            .default(30_000)
            .describe("How long a batch a projector took may stay unacknowledged before it is redelivered."),
          lease_ms: integer(1_000, 600_000)
            .default(10_000)
            .describe(
              "How long a projector's lease on its consumer lasts unrenewed before a standby projector takes over, in milliseconds.",
            ),
        },
        mapping,
      )
      // A batch still lingering when its ack_wait runs out is delivered again meanwhile.
      .refine((p) => p.linger_ms * 2 < p.ack_wait_ms, {
        path: ["linger_ms"],
        error:
          "must be less than half of projector.ack_wait_ms, or batches are redelivered while they linger",
      })
      .prefault({})
      .describe("The projector, which folds events into ClickHouse tables."),
    identification: z
      .strictObject(
        {
          headers: list(headerName(), "header names")
            .default(["X-Holdfast-Run", "X-Run-Id", "X-Session-Id", "X-Conversation-Id"])
            .describe("Request headers that name the run, in order of preference."),
          body_fields: list(matching(FIELD_PATH, "a dotted field path"), "dotted field paths")
            .default([
              "metadata.run_id",
              "metadata.session_id",
              "metadata.conversation_id",
              "metadata.thread_id",
              "metadata.trace_id",
              // Anthropic's only metadata field.
              "metadata.user_id",
            ])
            .describe("Request body fields that name the run, in order of preference, after the headers."),
          traceparent: flag()
            .default(true)
            .describe("Identify the run by the trace id of a W3C traceparent header."),
          idle_minutes: positiveNumber()
            .default(30)
            .describe(
              "Minutes of silence after which a fingerprinted agent's next call starts a new run (generation).",
            ),
          tag_headers: list(headerName(), "header names")
            .default(["X-Holdfast-Tag"])
            .describe("Request headers whose values tag the run."),
          tag_fields: list(matching(FIELD_PATH, "a dotted field path"), "dotted field paths")
            .default(["metadata.tag"])
            .describe("Request body fields whose values tag the run."),
          tenant_headers: list(headerName(), "header names")
            .default(["X-Holdfast-Tenant"])
            .describe(
              "Request headers whose values name the run's tenant; every event of the run carries it.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("How the gateway tells which run a request belongs to."),
    tenants: z
      .record(text("a tenant name"), tenant, {
        error: "expected a mapping of tenant names to their gateway keys",
      })
      .superRefine((tenants, context) => {
        // One key, one tenant: a key listed under two would give its calls either's runs.
        const owner = new Map<string, string>();
        for (const [name, { keys_sha256 }] of Object.entries(tenants)) {
          // The rule every reader of a tenant applies (a run is `<tenant>/<run id>`).
          const problem = tenantDefect(name);
          if (problem !== undefined) {
            context.addIssue({
              code: "custom",
              path: [name],
              message: `expected a tenant name: it ${problem}`,
            });
          }
          for (const hash of keys_sha256) {
            const first = owner.get(hash);
            if (first !== undefined && first !== name) {
              context.addIssue({
                code: "custom",
                path: [name, "keys_sha256"],
                message: `expected each key under one tenant: ${hash} is ${JSON.stringify(first)}'s too`,
              });
            }
            owner.set(hash, first ?? name);
          }
        }
      })
      .default({})
      .describe(
        "Tenants and their gateway keys. Set, every /v1/* call must carry one of the keys (X-Holdfast-Key) or is refused (401), and a call's tenant is its key's: X-Holdfast-Tenant is ignored.",
      ),
    prices: z
      .record(text("a model name"), price, { error: "expected a mapping of model names to prices" })
      .default({})
      .describe("Price per model in USD per million tokens, used to cost each step."),
    pricing: z
      .strictObject(
        {
          unknown_usd_per_mtok: usdPerMillionTokens()
            .default(75)
            .describe(
              "What a call of a model with no known price (none in prices, none in the bundled list) is charged, in USD per million tokens of any kind, where a cost limit or budget applies to its run; elsewhere its cost stays unknown.",
            ),
          unknown: z
            .enum(["charge", "refuse"], { error: "expected charge or refuse" })
            .default("charge")
            .describe(
              "A call of a model with no known price, in a run under a cost limit or budget: charge it at unknown_usd_per_mtok, or refuse it (400) before it is sent.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("How calls of models without a known price count against cost limits and budgets."),
    limits: limitsSection
      .prefault({})
      .describe("Per-run limits, checked before each call; a run that crosses one trips (on_trip)."),
    limits_by_tag: z
      .record(text("a tag"), tagLimits, { error: "expected a mapping of tags to limits" })
      .default({})
      .describe("Per-run limits for runs with this tag, over `limits` key by key."),
    budgets: z
      .record(text('a tag, or "*" for every run'), budget, {
        error: 'expected a mapping of tags (or "*") to budgets',
      })
      .default({})
      .describe(
        'Spend across runs per UTC day and month, per tag ("*": all runs); a spent budget trips its runs.',
      ),
    tool_gate: z
      .strictObject({ on_match: onMatch.default("hold"), deny: gateRules.default([]) }, mapping)
      .prefault({})
      .describe(
        "The tool-call gate: an answer asking for a tool a rule names is held before the agent sees it, until approved or denied.",
      ),
    tool_gate_by_tag: z
      .record(
        text("a tag"),
        z.strictObject(
          { on_match: onMatch.optional(), deny: gateRules.optional() },
          { error: "expected a mapping with on_match and/or deny" },
        ),
        { error: "expected a mapping of tags to tool-gate rules" },
      )
      .default({})
      .describe("Tool-gate rules for runs with this tag, added to tool_gate's; on_match replaces its."),
    max_repeated_tool_calls: count()
      .default(0)
      .describe(
        "Loop detection: hold the run when an answer asks for the same tool calls (same arguments) this many times in a row; 0 is off.",
      ),
    redact: z
      .strictObject(
        {
          patterns: list(regex("a regular expression"), "regular expressions")
            .default([])
            .describe(
              "Regular expressions whose matches are replaced by [redacted] in tool arguments recorded in events and in the requests and answers snapshots store (credentials always are).",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("What is redacted from content recorded in events and snapshots."),
    snapshots: z
      .strictObject(
        {
          enabled: flag()
            .default(true)
            .describe(
              "Store every step's request (as forwarded, and as the client sent it where Holdfast changed it) and answer by content in JetStream, redacted, for holdfast show <run> <step>.",
            ),
          max_bytes: integer(1_024, 4_294_967_296)
            .default(32 * 1024 * 1024)
            .describe(
              "Largest request or answer a snapshot keeps, in bytes; a larger one is recorded as not stored, with its size.",
            ),
          max_storage_bytes: integer(-1, Number.MAX_SAFE_INTEGER)
            .default(4 * 1024 * 1024 * 1024)
            .describe(
              "Most bytes each of the two snapshot buckets keeps on JetStream, so snapshots never take the disk the event log needs; past it new snapshots are not stored (counted in holdfast_snapshots_total) and nothing stored is lost; -1 for no bound. Set where the stream is provisioned (holdfast up, holdfast provision).",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("Snapshots: what each step asked and was answered, kept by content."),
    predict: predictSection
      .prefault({})
      .describe("Rate-limit prediction: act on each provider key's window before the provider answers 429."),
    routes: z
      .record(text("a model alias"), route, { error: "expected a mapping of model aliases to routes" })
      .default({})
      .describe(
        "Model aliases served by several upstreams (providers, keys, models): each call goes where its window has the most headroom, around 429 cooldowns and open breakers.",
      ),
    routing: routingSection
      .prefault({})
      .describe("How routes treat a target that fails: 429 cooldowns and the 5xx circuit breaker."),
    on_trip: z
      .enum(["hold", "stop"], { error: "expected hold or stop" })
      .default("hold")
      .describe("What a crossed limit or budget does to the run: hold its next call, or stop it (409)."),
    hold: z
      .strictObject(
        {
          keepalive_ms: integer(1_000, 600_000)
            .default(15_000)
            .describe("How often a held call gets a keepalive (SSE comment, or a 1xx the client tolerates)."),
          keepalive_1xx: flag()
            .default(true)
            .describe(
              "Send held non-streaming calls the 1xx interim responses their client is known to tolerate.",
            ),
          max_parked: integer(1, 10_000_000)
            .default(10_000)
            .describe(
              "Most calls one gateway keeps parked at once, over every held run; past it a held run's call is refused 429 (holdfast_too_many_parked, retry-after) and only counted.",
            ),
          max_parked_per_run: integer(1, 10_000_000)
            .default(100)
            .describe(
              "Most calls of one held run a gateway keeps parked at once; past it the run's call is refused 429 (holdfast_too_many_parked, retry-after) and only counted.",
            ),
          max_parked_bytes: integer(1024 * 1024, 2 ** 40)
            .default(1024 * 1024 * 1024)
            .describe(
              "Most bytes of request bodies the calls one gateway keeps parked may hold at once (a parked call keeps its body until it goes on); past it a held run's call is refused 429 (holdfast_too_many_parked, retry-after) and only counted.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("How held (parked) calls are kept waiting."),
    control: z
      .strictObject(
        {
          host: text("a host name or IP address")
            .default("127.0.0.1")
            .describe(
              "Interface the control API (REST and gRPC) listens on; loopback unless you need it elsewhere.",
            ),
          port: integer(0, 65535)
            .default(4142)
            .describe("Port of the control REST API; 0 picks a free port."),
          grpc_port: integer(0, 65535)
            .default(4143)
            .describe("Port of the control gRPC API (holdfast.v1.Control); 0 picks a free port."),
          token: text("a token")
            .optional()
            .describe(
              "Bearer token that may read and change (hold, resume, stop); `holdfast init` makes one. Services that only check it take `sha256:<hex SHA-256>` instead, which cannot be presented.",
            ),
          read_token: text("a token")
            .optional()
            .describe(
              "Bearer token that may only read (runs, rules); every change refuses it. Services that only check it take `sha256:<hex SHA-256>` instead, which cannot be presented.",
            ),
          insecure: flag()
            .default(false)
            .describe("Allow the control API off loopback without a token (`--insecure`)."),
          analytics_url: url("http", "https")
            .transform((value) => value.replace(/\/+$/, ""))
            .optional()
            .describe(
              "The projector's analytics API, where the control service finds the runs a selector matches; `holdfast up` sets it.",
            ),
          url: url("http", "https")
            .transform((value) => value.replace(/\/+$/, ""))
            .optional()
            .describe(
              "Where the CLI reaches the control REST API; unset, the running stack's (holdfast.json), else http://control.host:control.port.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("The control API: runs, holds, resumes, stops, rules."),
    budget: z
      .strictObject(
        {
          host: text("a host name or IP address")
            .default("127.0.0.1")
            .describe("Interface the budget service's gRPC API listens on."),
          port: integer(0, 65535).default(0).describe("Port of the budget service; 0 picks a free port."),
          url: text("a host:port")
            .optional()
            .describe("Where gateways reach the budget service (host:port); `holdfast up` sets it."),
          token: text("a token")
            .optional()
            .describe(
              "Bearer token gateways present to the budget service, which refuses every other caller; `holdfast up` makes one (data_dir/credentials/budget.token). Services that only check it take `sha256:<hex SHA-256>` instead, which cannot be presented.",
            ),
          insecure: flag()
            .default(false)
            .describe("Allow the budget service off loopback without budget.token."),
          lease_ms: integer(1_000, 3_600_000)
            .default(30_000)
            .describe("How long a gateway's lease on a slice of a budget lasts before it must be renewed."),
        },
        mapping,
      )
      .prefault({})
      .describe("The budget service, which leases budget slices to gateways."),
    scheduler: z
      .strictObject(
        {
          host: text("a host name or IP address")
            .default("127.0.0.1")
            .describe(
              "Interface the durable-run API (holdfast.v1.Runs: clients and workers, and its REST) listens on.",
            ),
          grpc_port: integer(0, 65535)
            .default(4144)
            .describe("Port of the durable-run gRPC API (holdfast.v1.Runs); 0 picks a free port."),
          port: integer(0, 65535)
            .default(4145)
            .describe(
              "Port of the durable-run REST API (POST /v1/agents/{agent}/runs, GET /v1/runs/{id}); 0 picks a free port.",
            ),
          url: text("a host:port")
            .optional()
            .describe(
              "Where workers and the CLI reach the scheduler's gRPC API (host:port); unset, the running stack's (holdfast.json).",
            ),
          lease_ms: integer(1_000, 600_000)
            .default(30_000)
            .describe(
              "How long a worker's lease on a run lasts past its last heartbeat; a hung worker's run goes to another after it.",
            ),
          gateway_url: url("http", "https")
            .transform((value) => value.replace(/\/+$/, ""))
            .optional()
            .describe(
              "The gateway workers send their runs' model calls to (told to each worker); `holdfast up` sets it.",
            ),
          worker_token: text("a token")
            .optional()
            .describe(
              "Bearer token workers present to serve runs (Work, Heartbeat), and nothing else; `holdfast up` makes one (data_dir/credentials/worker.token). The control token may not serve runs. Services that only check it take `sha256:<hex SHA-256>` instead, which cannot be presented.",
            ),
        },
        mapping,
      )
      .prefault({})
      .describe("The scheduler: durable runs, submitted over gRPC or REST and run on workers."),
  })
  .describe("Holdfast configuration.");

/** The parsed configuration: snake_case keys as in the YAML file, defaults filled, paths absolute. */
export type Config = z.output<typeof configSchema>;

export type DeepPartial<T> = T extends readonly unknown[]
  ? T
  : T extends object
    ? { [K in keyof T]?: DeepPartial<T[K]> | undefined }
    : T;
