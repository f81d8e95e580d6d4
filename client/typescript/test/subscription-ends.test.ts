/**
 * How a subscription ends when its caller stops iterating it (a `break`, a `return`, a throw in
 * the loop body): the stream is cancelled then and there, so nothing keeps the process alive
 * and the service does not go on feeding a subscriber that left.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { note } from "./events.js";
import { BACKENDS, sessionId, startServer } from "./support.js";

const BREAK_SUBSCRIPTION = fileURLToPath(new URL("./fixtures/break-subscription.js", import.meta.url));

for (const backend of BACKENDS) {
  describe(`subscription ends on ${backend}`, () => {
    let env: Awaited<ReturnType<typeof startServer>>;
    before(async () => {
      env = await startServer(backend);
    });
    after(async () => env.close());

    test("a process that breaks out of a subscription exits without closing its client", async () => {
      const id = sessionId("break");
      const writer = await env.client.writer(id, { createIfMissing: true });
      await writer.append([note(0), note(1)]);
      await writer.close();
      const child = spawn(process.execPath, [BREAK_SUBSCRIPTION, env.server.target, id], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      let timer: NodeJS.Timeout | undefined;
      const hung = new Promise<"hung">((resolve) => (timer = setTimeout(() => resolve("hung"), 20_000)));
      try {
        const code = await Promise.race([exited, hung]);
        assert.equal(out.trim(), "caught up after 2 events");
        assert.notEqual(code, "hung", "the process was still running 20 s after it broke out of its subscription");
        assert.equal(code, 0);
      } finally {
        clearTimeout(timer);
        child.kill("SIGKILL"); // no-op once it exited
      }
    });
  });
}
