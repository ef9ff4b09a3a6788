// Lets a child process of a test run this package's TypeScript source, as vitest itself
// does, so a test can kill the process that started a server without building first:
// `node --import <this file> owner.ts`.
import { readFile } from "node:fs/promises";
import { register } from "node:module";
import { isMainThread } from "node:worker_threads";

// The hooks below run on a thread of their own, which loads this file again.
if (isMainThread) register(import.meta.url);

export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (error) {
    // Sources import each other as "./x.js", the name of the compiled file.
    if (error?.code !== "ERR_MODULE_NOT_FOUND" || !/^\.\.?\/.*\.js$/.test(specifier)) throw error;
    return next(`${specifier.slice(0, -3)}.ts`, context);
  }
}

export async function load(url, context, next) {
  if (!url.startsWith("file:") || !url.endsWith(".ts")) return next(url, context);
  const { default: ts } = await import("typescript");
  const source = await readFile(new URL(url), "utf8");
  const { outputText } = ts.transpileModule(source, {
    fileName: new URL(url).pathname,
    compilerOptions: {
      module: ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      verbatimModuleSyntax: true,
    },
  });
  return { format: "module", source: outputText, shortCircuit: true };
}
