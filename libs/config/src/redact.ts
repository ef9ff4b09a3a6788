import type { Config } from "./schema.js";

/** Hides credentials written into a URL, e.g. nats://token@host or http://user:pass@host. */
export const maskUserinfo = (value: string): string =>
  value.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/?#]*@/i, "$1***@");

/** A copy safe to print: the ClickHouse password and any credentials inside URLs are masked. */
export const redactConfig = (config: Config): Config => {
  const copy = structuredClone(config);
  // An empty password stays visible: "no password set" is worth seeing and reveals nothing.
  if (copy.clickhouse.password !== "") copy.clickhouse.password = "***";
  if (copy.clickhouse.url !== undefined) copy.clickhouse.url = maskUserinfo(copy.clickhouse.url);
  if (copy.nats.url !== undefined) copy.nats.url = maskUserinfo(copy.nats.url);
  return copy;
};
