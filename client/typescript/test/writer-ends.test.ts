/**
 * How a streaming writer ends, and that no call on it hangs: the service ending its stream on a
 * graceful restart or killed, the writer's own cancel, its client closed, a refused batch; a
 * lease writer's calls after its close; and waits to try again, which a close ends at once.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ClientClosed, NotFound, SessionLogClient, Unavailable, ValidationError, WriterClosed } from "../src/index.js";
import { note, turnEnd, turnStart } from "./events.js";
import { answerLosingProxy, BACKENDS, sessionId, startServer } from "./support.js";

const CLOSE_WITH_WRITER = fileURLToPath(new URL("./fixtures/close-with-writer.js", import.meta.url));
const DROP_WRITER = fileURLToPath(new URL("./fixtures/drop-writer.js", import.meta.url));
const FIRE_AND_FORGET = fileURLToPath(new URL("./fixtures/fire-and-forget.js", import.meta.url));
const CLOSE_LEASE_WRITER_RETRYING = fileURLToPath(new URL("./fixtures/close-lease-writer-retrying.js", import.meta.url));

/** A retry policy whose wait to try again is far longer than a test gives a close to end it. */
const SLOW_RETRY = { attempts: 3, initialDelayMs: 300_000, maxDelayMs: 300_000 };

/** Whether `error` is the WriterClosed of a writer ended on purpose: not retryable. */
function closedOnPurpose(error: unknown): boolean {
  assert.ok(error instanceof WriterClosed, String(error));
  assert.equal(error.reason, "CANCELLED");
  assert.equal(error.retryable, false);
  return true;
}

/** `promise`, or a failure naming `what` if it has not settled within `ms`. */
async function settles<T>(promise: Promise<T>, what: string, ms = 30_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, hung]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs a fixture script in a Node process of its own: its exit code and what it printed, or a
 * failure if it has not exited within 20 s (the process is killed either way). */
async function runFixture(script: string, args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  try {
    return { code: await settles(exited, "the process's exit", 20_000), out: out.trim() };
  } finally {
    child.kill("SIGKILL"); // no-op once it exited
  }
}

for (const backend of BACKENDS) {
  describe(`writer ends on ${backend}`, () => {
    let env: Awaited<ReturnType<typeof startServer>>;
    before(async () => {
      // A short shutdown grace: stopping the service ends its streams at once.
      env = await startServer(backend, { SESSIONLOG_SHUTDOWN_GRACE_S: "0.2" });
    });
    after(async () => env.close());

    test("an idle writer whose stream a graceful restart ended takes its lease again with its token and goes on", async () => {
      const id = sessionId("sigterm");
      const writer = await env.client.writer(id, { createIfMissing: true });
      const header = { config: { model: "m-1" } };
      assert.equal((await writer.reportHeader(header)).reason, "initial");
      await writer.append([note(0)]);
      const epoch = writer.lease.epoch;
      assert.equal(writer.reconnects, 0);
      // The service acknowledges what is pending, ends the stream with UNAVAILABLE SHUTTING_DOWN
      // and leaves the lease live for the writer's reconnect.
      await env.server.stop();
      await env.server.start();
      assert.deepEqual((await settles(writer.append([note(1)]), "the append after the restart")).seqs, [2]);
      assert.equal(writer.lease.epoch, epoch + 1, "the same lease, at the next epoch");
      assert.equal(writer.reconnects, 1, "one reconnect, counted as the Python writers count it");
      assert.equal((await writer.reportHeader(header)).reason, null, "not a new lease: no resume header");
      await writer.close();
      const kinds = [];
      for await (const event of env.client.readEvents(id)) kinds.push(event.type);
      assert.deepEqual(kinds, ["request/header", "test/note", "test/note"]);
    });

    test("an idle writer in a turn goes on after a graceful restart: the start-up repair leaves its turn alone", async () => {
      const id = sessionId("in-turn");
      const writer = await env.client.writer(id, { createIfMissing: true });
      await writer.append([turnStart(1)]);
      await env.server.stop();
      await env.server.start();
      assert.deepEqual((await settles(writer.append([turnEnd(1)]), "the append after the restart")).seqs, [1]);
      await writer.close();
      const events = [];
      for await (const event of env.client.readEvents(id)) events.push(event);
      assert.deepEqual(events.map((e) => e.type), ["turn/start", "turn/end"]);
      assert.deepEqual(events[1]?.data.reason, { kind: "completed" }, "the writer's own turn end, not a repair's");
    });

    test("a lease writer's calls after close() reject with WriterClosed (CANCELLED, not retryable), never throw", async () => {
      const id = sessionId("lease-closed");
      await env.client.createSession(id);
      const unary = await env.client.leaseWriter(id, { writerId: "unary" });
      await unary.append([note(0)]);
      await unary.close();
      await unary.close(); // a second close does nothing: it released the lease again and failed with OwnershipLost
      let append: Promise<unknown> | undefined;
      let header: Promise<unknown> | undefined;
      assert.doesNotThrow(() => {
        append = unary.append([note(1)]);
        header = unary.reportHeader({ config: { model: "m-1" } });
      }, "a rejected promise, not a synchronous throw");
      await assert.rejects(append!, closedOnPurpose);
      await assert.rejects(header!, closedOnPurpose);
      const kinds = [];
      for await (const event of env.client.readEvents(id)) kinds.push(event.type);
      assert.deepEqual(kinds, ["test/note"], "nothing was sent after close");
      const next = await env.client.leaseWriter(id, { writerId: "next" }); // the lease was given back
      await next.close();
    });

    test("closing the client ends its writers: pending and later calls fail with WriterClosed, and nothing reconnects", async () => {
      const id = sessionId("client-closed");
      const closing = new SessionLogClient({ target: env.server.target });
      const writer = await closing.writer(id, { createIfMissing: true });
      await writer.append([note(0)]);
      const epoch = writer.lease.epoch;
      const pending = writer.append([note(1)]);
      closing.close();
      await assert.rejects(settles(pending, "the pending append"), closedOnPurpose);
      await assert.rejects(settles(writer.append([note(2)]), "a later append"), closedOnPurpose);
      await assert.rejects(settles(writer.flush(), "flush"), closedOnPurpose);
      await settles(writer.close(), "close");
      await new Promise((r) => setTimeout(r, 1000)); // a reconnect would have taken the lease again by now
      assert.equal(writer.lease.epoch, epoch, "the writer reconnected");
      assert.equal((await env.client.getSession(id)).lease?.epoch, epoch, "the lease was taken again");
    });

    test("a closed client's calls fail with ClientClosed and send nothing; its lease writers stop renewing", async () => {
      const id = sessionId("closed-calls");
      const closing = new SessionLogClient({ target: env.server.target });
      await closing.createSession(id);
      const unary = await closing.leaseWriter(id, { heartbeatMs: 100 });
      closing.close();
      const held = (await env.client.getSession(id)).lease;
      await new Promise((r) => setTimeout(r, 600)); // six heartbeats, had they gone on
      assert.deepEqual((await env.client.getSession(id)).lease, held, "a closed client's lease writer renewed its lease");
      await assert.rejects(unary.append([note(0)]), closedOnPurpose);
      await settles(unary.close(), "the lease writer's close"); // the lease is left to lapse, as the Python writers leave it
      assert.equal((await env.client.getSession(id)).lease?.epoch, held?.epoch, "the lease was released through a closed client");
      const other = sessionId("never-created");
      const calls: [string, () => Promise<unknown>][] = [
        ["createSession", () => closing.createSession(other)],
        ["getSession", () => closing.getSession(id)],
        ["listSessions", async () => closing.listSessions().next()],
        ["readEvents", async () => closing.readEvents(id).next()],
        ["modelHistory", () => closing.modelHistory(id)],
        ["stats", () => closing.stats(id)],
        ["acquireLease", () => closing.acquireLease(id, { takeover: true })],
        ["leaseWriter", () => closing.leaseWriter(id, { takeover: true })],
        ["writer", () => closing.writer(id, { takeover: true })],
        // Not an empty subscription that ends quietly, as if cancelled: the caller would take
        // the session for one without events.
        ["subscribe", async () => closing.subscribe(id)[Symbol.asyncIterator]().next()],
      ];
      for (const [what, call] of calls) {
        await assert.rejects(settles(call(), what), (e: unknown) => {
          assert.ok(e instanceof ClientClosed, `${what}: ${String(e)}`);
          assert.equal(e.reason, "CANCELLED", what);
          assert.equal(e.retryable, false, what);
          return true;
        });
      }
      await assert.rejects(env.client.getSession(other), NotFound, "a closed client created a session");
      assert.equal((await env.client.getSession(id)).lease?.epoch, held?.epoch, "a closed client took the lease");
    });

    test("closing the client ends a call's and a read's wait to try again at once, with ClientClosed", async () => {
      const id = sessionId("close-ends-wait");
      await env.client.createSession(id);
      const seeding = await env.client.leaseWriter(id);
      await seeding.append([note(0)]); // a read's first page is lost, so there must be one
      await seeding.close();
      const calls: [string, (client: SessionLogClient) => Promise<unknown>][] = [
        ["GetSession", (client) => client.getSession(id)],
        ["ReadEvents", async (client) => client.readEvents(id).next()],
      ];
      for (const [method, call] of calls) {
        const proxy = await answerLosingProxy(env.server.target, method);
        // No shorter budget: it would refuse a wait longer than what is left of it.
        const lossy = new SessionLogClient({ target: proxy.target, retry: SLOW_RETRY, timeoutMs: 600_000 });
        try {
          const waiting = call(lossy);
          waiting.catch(() => undefined); // rejected before it is awaited below
          await new Promise((r) => setTimeout(r, 1000)); // the first answer is lost by now: it waits
          lossy.close();
          await assert.rejects(settles(waiting, `${method} after the close`, 10_000), ClientClosed);
        } finally {
          lossy.close();
          await proxy.close();
        }
      }
    });

    test("a writer whose every reconnect opens and breaks again gives up by its reconnect policy", async () => {
      // Each open renewed the reconnect attempts: cut at every acknowledgement, the writer
      // reconnected without end and its append never settled. They now count from its last
      // progress, as the Python writers'.
      const id = sessionId("flapping");
      await env.client.createSession(id);
      const proxy = await answerLosingProxy(env.server.target, "Write", 1000, 1); // keep `opened`, lose the ack
      const flapping = new SessionLogClient({ target: proxy.target });
      try {
        const writer = await flapping.writer(id, { reconnect: { attempts: 3, initialDelayMs: 10, maxDelayMs: 10 } });
        await assert.rejects(settles(writer.append([note(0)]), "the append on a flapping stream"), Unavailable);
        assert.equal(writer.reconnects, 3, "each attempt opened, and its stream broke again");
      } finally {
        flapping.close();
        await proxy.close();
      }
    });

    test("a process whose lease writer was closed while a renewal waited to try again exits at once", async () => {
      const id = sessionId("renewal-wait");
      await env.client.createSession(id);
      const proxy = await answerLosingProxy(env.server.target, "RenewLease");
      try {
        const { code, out } = await runFixture(CLOSE_LEASE_WRITER_RETRYING, [proxy.target, id]);
        assert.equal(code, 0);
        assert.equal(out, "released true");
      } finally {
        await proxy.close();
      }
    });

    test("a process whose client was closed exits though its writer had an append pending", async () => {
      const { code, out } = await runFixture(CLOSE_WITH_WRITER, [env.server.target, sessionId("exits")]);
      assert.equal(code, 0);
      assert.equal(out, "WriterClosed");
    });

    test("a process that drops its writer unclosed waits for its pending append, then exits", async () => {
      const id = sessionId("dropped");
      const { code, out } = await runFixture(DROP_WRITER, [env.server.target, id]);
      assert.equal(code, 0);
      assert.deepEqual(out.split("\n"), ["dropped", "acknowledged"]);
      const notes = [];
      for await (const event of env.client.readEvents(id)) notes.push(event.data.n);
      assert.deepEqual(notes, [0, 1]);
    });

    test("appends nobody awaits do not end the process when refused, here or by the service", async () => {
      // A bad event, or an append after close, returned a rejection not marked handled: Node
      // ended a fire-and-forget caller's process, where a refusal from the service did not.
      const id = sessionId("unawaited");
      const { code, out } = await runFixture(FIRE_AND_FORGET, [env.server.target, id]);
      assert.equal(code, 0);
      assert.deepEqual(out.split("\n"), ["close: ValidationError", "survived"]);
      assert.equal((await env.client.getSession(id)).nextSeq, 0, "nothing was written");
    });

    test("calls made while close() flushes reject with WriterClosed; what came before it lands", async () => {
      // Queued past maxInFlight behind the close, they were never sent nor answered.
      const id = sessionId("closing");
      const writer = await env.client.writer(id, { createIfMissing: true, maxInFlight: 1 });
      const before = [writer.append([note(0)]), writer.append([note(1)])];
      const closing = writer.close();
      const during = await settles(
        Promise.allSettled([writer.append([note(2)]), writer.append([note(3)]), writer.reportHeader({ config: {} })]),
        "the calls made while closing",
      );
      for (const outcome of during) {
        assert.equal(outcome.status, "rejected");
        assert.ok(closedOnPurpose(outcome.reason) && /closing/.test((outcome.reason as Error).message));
      }
      await settles(closing, "close");
      assert.deepEqual((await Promise.all(before)).map((r) => r.seqs), [[0], [1]]);
      const notes = [];
      for await (const event of env.client.readEvents(id)) notes.push(event.data.n);
      assert.deepEqual(notes, [0, 1]);
    });

    test("cancel fails pending and later calls with WriterClosed, which is not retryable", async () => {
      const id = sessionId("cancel");
      const writer = await env.client.writer(id, { createIfMissing: true });
      const pending = writer.append([note(0)]);
      writer.cancel();
      await assert.rejects(pending, closedOnPurpose);
      await assert.rejects(writer.append([note(1)]), closedOnPurpose);
      const closed = await env.client.writer(sessionId("closed"), { createIfMissing: true });
      await closed.close();
      await assert.rejects(closed.append([note(0)]), (e: unknown) => closedOnPurpose(e) && /closed/.test((e as Error).message));
    });

    test("a refused batch ends the writer: later calls fail with an error naming it, not describing their events", async () => {
      const id = sessionId("refused");
      const writer = await env.client.writer(id, { createIfMissing: true });
      const refused = writer.append([{ type: "made/up", data: {} }]);
      const after = writer.append([note(1)]); // pipelined: sent before the refusal comes back
      const original = await refused.then(() => assert.fail("the unknown type was accepted"), (e: unknown) => e);
      assert.ok(original instanceof ValidationError && original.reason === "UNKNOWN_TYPE", String(original));
      assert.equal(original.metadata.type, "made/up");
      assert.doesNotMatch(original.message, /closed by an earlier error/);
      const namesIt = (what: RegExp) => (e: unknown): boolean => {
        assert.ok(e instanceof ValidationError, String(e)); // the class and reason of what ended it
        assert.equal(e.reason, "UNKNOWN_TYPE");
        assert.match(e.message, /^the writer was closed by an earlier error \(UNKNOWN_TYPE: /);
        assert.match(e.message, what);
        assert.equal(e.cause, original);
        assert.equal(e.metadata.type, undefined, "the metadata of another call's event");
        return true;
      };
      await assert.rejects(after, namesIt(/this batch was not acknowledged/));
      await assert.rejects(writer.append([note(2)]), namesIt(/nothing of this call was sent/));
      await assert.rejects(writer.reportHeader({ config: { model: "m" } }), namesIt(/nothing of this call was sent/));
      await assert.rejects(writer.flush(), namesIt(/nothing of this call was sent/));
      await settles(writer.close(), "close");
      const events = [];
      for await (const event of env.client.readEvents(id)) events.push(event);
      assert.deepEqual(events, [], "the service ended the stream at the refused batch");
    });

    test("an idle writer whose service was killed takes its lease again with its token and goes on", async () => {
      const id = sessionId("sigkill");
      const writer = await env.client.writer(id, { createIfMissing: true });
      await writer.append([note(0)]);
      const epoch = writer.lease.epoch;
      await env.server.kill();
      await env.server.start();
      assert.deepEqual((await settles(writer.append([note(1)]), "the append after the kill")).seqs, [1]);
      assert.equal(writer.lease.epoch, epoch + 1, "the same lease, at the next epoch");
      await writer.close();
    });
  });
}
