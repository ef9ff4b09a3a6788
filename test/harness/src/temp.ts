import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TempDir extends AsyncDisposable {
  readonly path: string;
}

/** A fresh directory under the OS temp dir, removed with everything in it on dispose. */
export async function makeTempDir(prefix: string): Promise<TempDir> {
  const path = await mkdtemp(join(tmpdir(), `holdfast-${prefix.replace(/[^A-Za-z0-9_-]/g, "-")}-`));
  return {
    path,
    [Symbol.asyncDispose]: () => rm(path, { recursive: true, force: true }),
  };
}
