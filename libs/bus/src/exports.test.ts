import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

// The bus hides NATS: what a package importing @holdfast/bus can name is Holdfast's own
// shapes, so the client library can change (or go) without its users changing. Checked on
// what its users compile against: the declarations of this package's source, emitted now
// (no build needed), from index.d.ts through every declaration file it reaches.

const src = dirname(fileURLToPath(import.meta.url));

/** The declaration file of each of this package's sources, by its path, as tsc emits them. */
function declarations(): Map<string, string> {
  const parsed = ts.getParsedCommandLineOfConfigFile(join(src, "../tsconfig.json"), undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
      throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"));
    },
  });
  if (parsed === undefined) throw new Error("libs/bus/tsconfig.json could not be read");
  const roots = parsed.fileNames.filter((file) => !file.endsWith(".test.ts"));
  const program = ts.createProgram(roots, {
    ...parsed.options,
    // Workspace packages from their source, as the tests read them.
    customConditions: ["@holdfast/source"],
    composite: false,
    incremental: false,
    declarationMap: false,
    noEmit: false,
  });
  const emitted = new Map<string, string>();
  for (const root of roots) {
    const file = program.getSourceFile(root);
    if (file === undefined) continue;
    const result = program.emit(
      file,
      (name, text) => {
        if (name.endsWith(".d.ts")) emitted.set(relative(parsed.options.outDir ?? "", name), text);
      },
      undefined,
      true,
    );
    const errors = result.diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length > 0) throw new Error(ts.formatDiagnostics(errors, ts.createCompilerHost({})));
  }
  return emitted;
}

/** index.d.ts and every declaration file of this package it reaches, through imports and re-exports. */
function reachable(emitted: Map<string, string>): Map<string, string> {
  const seen = new Map<string, string>();
  const next = ["index.d.ts"];
  while (next.length > 0) {
    const name = next.pop()!;
    if (seen.has(name)) continue;
    const text = emitted.get(name);
    if (text === undefined) throw new Error(`${name} was not emitted`);
    seen.set(name, text);
    for (const match of text.matchAll(/(?:from\s+|import\(\s*)["']\.\/([^"']+)\.js["']/g)) {
      next.push(`${match[1]}.d.ts`);
    }
  }
  return seen;
}

describe("what @holdfast/bus exports", () => {
  it("names no NATS type: no declaration its users can reach refers to a @nats-io package", () => {
    const seen = reachable(declarations());
    // The walk went through the bus itself, its shapes and the lease: the check reads what it should.
    expect([...seen.keys()]).toEqual(expect.arrayContaining(["bus.d.ts", "model.d.ts", "lease.d.ts"]));
    const nats = [...seen].flatMap(([name, text]) =>
      text
        .split("\n")
        .filter((line) => line.includes("@nats-io"))
        .map((line) => `${name}: ${line.trim()}`),
    );
    expect(nats).toEqual([]);
    // Emitting declarations type-checks the package: seconds, on a busy machine more.
  }, 120_000);
});
