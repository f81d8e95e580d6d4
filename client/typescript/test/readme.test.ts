/**
 * The TypeScript examples of the READMEs (the repository's "A harness in a few lines" and this
 * package's first), run as written against a real server: each is taken from its README as it
 * stands (only the address changes, to the test server's), written beside the build so that
 * `import ... from "@sessionlog/client"` resolves to this package, and run by node.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { BACKENDS, REPO_ROOT, startServer } from "./support.js";

const PACKAGE_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const DEFAULT_TARGET = "127.0.0.1:50051";

/** The first ```ts block of `readme` after the text `after`. */
function example(readme: string, after: string): string {
  const text = readFileSync(readme, "utf8");
  const start = text.indexOf(after);
  assert.ok(start >= 0, `${readme} has no "${after}"`);
  const found = /^```ts\n([\s\S]*?)^```$/m.exec(text.slice(start));
  assert.ok(found, `${readme} has no ts block after "${after}"`);
  return found[1]!;
}

/** `source` run by node against `target`, from a file inside this package; its stdout lines. */
async function run(source: string, target: string, name: string): Promise<string[]> {
  assert.ok(source.includes(DEFAULT_TARGET), "the example names the default address");
  const file = join(PACKAGE_ROOT, "build", `${name}.mjs`);
  writeFileSync(file, source.replaceAll(DEFAULT_TARGET, target));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [file], { timeout: 60_000 });
    return stdout.trimEnd().split("\n");
  } finally {
    rmSync(file, { force: true });
  }
}

const backend = BACKENDS[0]!;

test("the repository README's TypeScript harness runs as written", async () => {
  const { server, close } = await startServer(backend);
  try {
    const source = example(join(REPO_ROOT, "README.md"), "The same harness in TypeScript");
    const out = await run(source, server.target, "readme-example-harness");
    assert.equal(out[0], "[ 4 ] [ { role: 'user', content: 'list the files' } ] 0");
    assert.deepEqual(out.slice(1), ["0 request/header", "1 system/message", "2 user/message", "3 turn/start", "4 turn/end"]);
  } finally {
    await close();
  }
});

test("this package's README example runs as written", async () => {
  const { server, close } = await startServer(backend);
  try {
    const source = example(join(PACKAGE_ROOT, "README.md"), "# @sessionlog/client");
    const out = await run(source, server.target, "readme-example-package");
    assert.deepEqual(out, ["[ 2, 3, 4 ]", "[ { role: 'user', content: 'hi' } ]"]);
  } finally {
    await close();
  }
});
