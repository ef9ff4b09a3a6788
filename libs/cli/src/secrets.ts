import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { connectBus, PRINCIPALS } from "@holdfast/bus";
import { natsConnection } from "@holdfast/config";
import { configFrom } from "./common.js";
import { credentialsDir, ensureCredentialsIn, natsAuthorization, TOKENS } from "./credentials.js";
import { CliError } from "./errors.js";
import { holdfastCommand } from "./invocation.js";
import { readStack } from "./stack.js";

export const CREDENTIALS_USAGE = `holdfast credentials [--data-dir DIR] [--dir DIR] [--rotate] [--nats-authorization] [--config FILE]

Makes what is missing of the credentials a stack runs with (holdfast up does it at its first
start) and says where each is: a NATS nkey per principal (admin, gateway, projector,
budget, control, scheduler, reader) and the tokens (control, read, budget, worker), in
DIR/credentials/ (--dir: a directory of your own, for a deployment's secrets), readable by
their owner alone. Nothing secret is printed.

--rotate                replaces every one of them; stop the stack on this data dir first
                        (it is refused while one runs), then start it again. To replace
                        one only, delete its file: what is missing is made
--nats-authorization    prints the accounts block a nats-server of your own needs for them
                        (the log's account with JetStream, an account per principal with
                        its public key, permissions and imports, for nats.prefix and
                        projector.consumer as configured): include it in its config

See SECURITY.md for who may do what with each.`;

export async function credentials(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      "data-dir": { type: "string" },
      config: { type: "string" },
      dir: { type: "string" },
      rotate: { type: "boolean", default: false },
      "nats-authorization": { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(CREDENTIALS_USAGE);
  if (positionals.length > 0) throw new CliError(`credentials takes no arguments\n\n${CREDENTIALS_USAGE}`, 2);
  const config = configFrom(values);
  const dir = values.dir === undefined ? credentialsDir(config.data_dir) : resolve(values.dir);
  const running = values.rotate ? readStack(config.data_dir) : undefined;
  if (running !== undefined && dir === credentialsDir(config.data_dir)) {
    // Its services and this CLI read these files: replaced under them, a service restarted
    // by the supervisor, or the next `hold` or `stop`, would present a credential the
    // running nats-server and services do not know, and be locked out.
    throw new CliError(
      `Holdfast is running on ${config.data_dir} (pid ${running.pid}) with these credentials: stop it (Ctrl-C), rotate, then start it again with ${holdfastCommand()} up.`,
    );
  }
  const made = ensureCredentialsIn(dir, { rotate: values.rotate });
  const access = { prefix: config.nats.prefix, projectorConsumer: config.projector.consumer };
  if (values["nats-authorization"]) return void process.stdout.write(natsAuthorization(made, access));
  const rows = [
    ...PRINCIPALS.map(
      (principal) =>
        `  nats ${principal.padEnd(10)} ${made.nats[principal].file}  (${made.nats[principal].publicKey})`,
    ),
    ...Object.keys(TOKENS).map(
      (name) => `  ${`${name} token`.padEnd(15)} ${made.tokenFiles[name as keyof typeof TOKENS]}`,
    ),
  ];
  console.log(`${values.rotate ? "Replaced" : "The"} credentials in ${made.dir}:\n${rows.join("\n")}`);
}

export const PROVISION_USAGE = `holdfast provision [--config FILE]

Makes the event stream and the KV buckets on the NATS server at nats.url (or brings them to
this version's settings), with the admin credential nats.credentials names. A deployment
runs it once before its services start (holdfast up does it itself): the services' own
credentials may use the stream and the buckets, never make or change them.`;

export async function provision(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      "data-dir": { type: "string" },
      config: { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(PROVISION_USAGE);
  if (positionals.length > 0) throw new CliError(`provision takes no arguments\n\n${PROVISION_USAGE}`, 2);
  const config = configFrom(values);
  if (config.nats.url === undefined) {
    throw new CliError(
      "nats.url is not set: provision makes the stream on a NATS server of your own (holdfast up provisions its own)",
      2,
    );
  }
  const bus = await connectBus({
    ...natsConnection(config.nats),
    name: "holdfast provision",
    principal: "admin",
  });
  try {
    await bus.provision();
    await bus.provisionBuckets({ snapshotMaxBytes: config.snapshots.max_storage_bytes });
  } finally {
    await bus.close();
  }
  console.log(`Provisioned ${bus.eventsStream} and its buckets on ${config.nats.url}.`);
}
