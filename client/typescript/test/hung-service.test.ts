/**
 * A service that hangs (stopped with SIGSTOP: its connections stay open and nothing answers,
 * not even a PING): the client's keepalive gives the connection up, and what the caller does
 * then, such as closing the client, must not crash the process. The transport is the same on
 * every backend, so this runs on the first one only.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { CLOSE_WITHIN_MS, SessionLogClient, Unavailable } from "../src/index.js";
import { note } from "./events.js";
import { BACKENDS, sessionId, startServer } from "./support.js";

const CLOSE_AFTER_HANG = fileURLToPath(new URL("./fixtures/close-after-hang.js", import.meta.url));

describe(`a hung service, on ${BACKENDS[0]}`, () => {
  let env: Awaited<ReturnType<typeof startServer>>;
  before(async () => {
    env = await startServer(BACKENDS[0]!);
  });
  after(async () => {
    env.server.unpause();
    await env.close();
  });

  test("a writer's close waits at most CLOSE_WITHIN_MS for a hung service to end its stream, as the asyncio writer's", async () => {
    const writer = await env.client.writer(sessionId("hung-close"), { createIfMissing: true });
    await writer.append([note(0)]);
    env.server.pause();
    try {
      const started = performance.now();
      await writer.close(); // flushed: only the stream's end is waited for
      const took = performance.now() - started;
      // Without a bound it waited for the keepalive to give the connection up (15 s).
      assert.ok(took < CLOSE_WITHIN_MS + 2000, `close took ${Math.round(took)} ms`);
    } finally {
      env.server.unpause();
    }
  });

  test("a writer's open fails within the client's timeoutMs while the service hangs", async () => {
    // It waited for the keepalive to give the connection up (15 s), then tried again, each
    // attempt waiting as long: about two minutes. Its attempts now share timeoutMs, as a unary call's.
    const client = new SessionLogClient({ target: env.server.target, timeoutMs: 1000 });
    const id = sessionId("hung-open");
    try {
      await client.createSession(id); // the connection is up before the service hangs
      env.server.pause();
      const started = performance.now();
      await assert.rejects(client.writer(id), (e: unknown) => {
        assert.ok(e instanceof Unavailable, String(e));
        assert.equal(e.reason, "TRANSPORT_ERROR");
        // Told once: as a spent budget it named the timeout twice, the second time as the
        // attempt's share ("the call's timeoutMs of 1000 ms was spent after 1 attempt: ...").
        assert.equal(e.message, "the writer's open got no answer within the client's timeoutMs of 1000 ms");
        return true;
      });
      const took = performance.now() - started;
      assert.ok(took < 10_000, `the open took ${Math.round(took)} ms`);
      env.server.unpause();
      const writer = await client.writer(id); // the service is back: an open goes through
      assert.deepEqual((await writer.append([note(0)])).seqs, [0]);
      await writer.close();
    } finally {
      env.server.unpause();
      client.close();
    }
  });

  test("closing the client after the keepalive gave up a hung connection does not crash the process", async () => {
    env.server.pause();
    const child = spawn(process.execPath, [CLOSE_AFTER_HANG, env.server.target], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<"hung">((resolve) => (timer = setTimeout(() => resolve("hung"), 60_000)));
    try {
      const code = await Promise.race([exited, hung]);
      assert.equal(out.split("\n")[0], "Unavailable TRANSPORT_ERROR", "the writer failed as the keepalive gave up");
      assert.equal(code, 0, `the process crashed after closing its client:\n${err}`);
      assert.equal(out.trim().split("\n").at(-1), "alive");
    } finally {
      clearTimeout(timer);
      child.kill("SIGKILL"); // no-op once it exited
      env.server.unpause();
    }
  });
});
