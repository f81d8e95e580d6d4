/** The client against a real server, on SQLite and PostgreSQL. */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import {
  AlreadyExists,
  type CaughtUp,
  type Event,
  ErrorReason,
  isEventOfType,
  NotFound,
  OutOfRange,
  OwnershipLost,
  SessionLogClient,
  toSessionLogError,
  Unavailable,
  ValidationError,
  WriterHeld,
} from "../src/index.js";
import { assistant, note, stepEnd, stepStart, system, toolCall, toolResult, turnEnd, turnStart, usage, user } from "./events.js";
import { answerLosingProxy, BACKENDS, sessionId, startServer } from "./support.js";

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

for (const backend of BACKENDS) {
  describe(`client on ${backend}`, () => {
    let env: Awaited<ReturnType<typeof startServer>>;
    let client: SessionLogClient;
    before(async () => {
      env = await startServer(backend);
      client = env.client;
    });
    after(async () => env.close());

    test("a writer appends with eventIds always, and payload integers stay exact", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      const results = [writer.append([note(1)]), writer.append([note(12345678901234567890n), note(3, { eventId: "mine" })])];
      const [first, second] = await Promise.all(results);
      assert.deepEqual(first!.seqs, [0]);
      assert.deepEqual(second!.seqs, [1, 2]);
      await writer.close();
      const events = await collect(client.readEvents(id));
      assert.deepEqual(events.map((e) => e.seq), [0, 1, 2]);
      assert.ok(events.every((e) => typeof e.eventId === "string" && e.eventId.length > 0));
      assert.equal(events[2]!.eventId, "mine");
      assert.equal(events[1]!.data.n, 12345678901234567890n);
    });

    test("the request of a session without events ends at no seq; with one, at seq 0", async () => {
      const id = sessionId();
      await client.createSession(id);
      const empty = await client.request(id);
      assert.deepEqual([empty.request, empty.headerSeq, empty.atSeq], [{ messages: [] }, null, null]);
      const writer = await client.writer(id);
      await writer.append([note(1)]);
      await writer.close();
      assert.equal((await client.request(id)).atSeq, 0);
    });

    test("every projection of a session without events covers no seq: atSeq null in surface and the history copy too", async () => {
      // The request's atSeq was null, but surface().atSeq and the history copy's said 0, the seq
      // of an event that does not exist (atSeq 0 is SEQ_NOT_FOUND there).
      const id = sessionId();
      await client.createSession(id);
      const copy = client.historyCopy(id);
      await client.refreshHistory(copy);
      assert.deepEqual([(await client.surface(id)).atSeq, (await client.request(id)).atSeq, copy.atSeq], [null, null, null]);
      const writer = await client.writer(id);
      const head = (await writer.append([note(1)])).seqs[0]!;
      await writer.close();
      await client.refreshHistory(copy);
      assert.deepEqual([(await client.surface(id)).atSeq, (await client.request(id)).atSeq, copy.atSeq], [head, head, head]);
      assert.equal((await client.surface(id, { atSeq: 0 })).atSeq, 0);
    });

    test("a retried eventId returns the original seq instead of appending again", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      const once = await writer.append([note(1, { eventId: "e1" })]);
      const again = await writer.append([note(1, { eventId: "e1" }), note(2, { eventId: "e2" })]);
      await writer.close();
      assert.deepEqual(once.seqs, [0]);
      assert.deepEqual(again.seqs, [0, 1]);
      assert.equal((await client.getSession(id)).nextSeq, 2);
    });

    test("a session's traceId and namespace are what the service's spans carry: its key hashed (the id, in the default namespace) and `default`", async () => {
      const id = sessionId("trace");
      const made = await client.createSession(id);
      const expected = createHash("sha256").update(`sessionlog/trace\0${id}`).digest("hex").slice(0, 32);
      assert.equal(made.traceId, expected);
      assert.equal((await client.getSession(id)).traceId, expected);
      assert.equal(made.namespace, "default"); // the resource attribute its spans carry
    });

    test("a payload that repeats a key (a raw gRPC writer's) is refused (DUPLICATE_KEY) and nothing is appended", async () => {
      // It was stored as sent and read with its last value; one stored before is still read so (json.test.ts).
      const id = sessionId();
      await client.createSession(id);
      const lease = await client.acquireLease(id);
      const dataJson = new TextEncoder().encode('{"a":1,"a":2,"big":12345678901234567890}');
      const raw = client.rpc.appendEvents({ sessionId: id, leaseToken: lease.token!, events: [{ type: "test/raw", ignorable: true, dataJson, eventId: "raw" }] });
      await assert.rejects(raw, (e: unknown) => {
        const error = toSessionLogError(e);
        assert.ok(error instanceof ValidationError, String(error));
        assert.equal(error.reason, "DUPLICATE_KEY");
        return true;
      });
      await client.releaseLease(lease);
      assert.deepEqual(await collect(client.readEvents(id)), []);
    });

    test("pipelining past the in-flight limit keeps order and acknowledges every batch", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true, maxInFlight: 4 });
      const acks = await Promise.all(Array.from({ length: 50 }, (_, i) => writer.append([note(i)])));
      await writer.close();
      assert.deepEqual(acks.map((a) => a.seqs[0]), Array.from({ length: 50 }, (_, i) => i));
      const events = await collect(client.readEvents(id, { pageSize: 7 }));
      assert.deepEqual(events.map((e) => e.data.n), Array.from({ length: 50 }, (_, i) => i));
    });

    test("resume under a lease already held: leaseToken takes it again, as acquireLease's does", async () => {
      // A resume whose answer was lost left its lease held; the Python clients' resume(lease_token=)
      // takes it again (docs/leases.md), where this client's took no token: WRITER_HELD until it lapsed.
      const id = sessionId("resume-kept");
      await client.createSession(id);
      const kept = await client.acquireLease(id);
      await assert.rejects(client.resume(id), (e: unknown) => e instanceof WriterHeld);
      const resumed = await client.resume(id, { leaseToken: kept.token });
      assert.equal(resumed.lease.token, kept.token);
      assert.equal(resumed.lease.epoch, kept.epoch + 1, "taken again, at the next epoch");
      await client.append(resumed.lease, [note(0)]);
      await client.releaseLease(resumed.lease);
    });

    test("a writer opens under a lease already held: leaseToken takes it again", async () => {
      // Without the token the writer found the session held by that very lease (WRITER_HELD).
      const id = sessionId("kept");
      await client.createSession(id);
      const kept = (await client.resume(id)).lease;
      await assert.rejects(client.writer(id), (e: unknown) => e instanceof WriterHeld);
      const writer = await client.writer(id, { leaseToken: kept.token });
      assert.equal(writer.lease.token, kept.token);
      assert.equal(writer.lease.epoch, kept.epoch + 1, "taken again, at the next epoch");
      await writer.append([note(0)]);
      await writer.close();
    });

    test("errors are typed, with the catalogue reason and its metadata", async () => {
      const id = sessionId();
      await client.createSession(id);
      await assert.rejects(client.createSession(id, { cwd: "/elsewhere" }), (e: unknown) => e instanceof AlreadyExists && e.reason === "SESSION_EXISTS");
      await assert.rejects(client.getSession(sessionId("missing")), (e: unknown) => e instanceof NotFound && e.reason === "SESSION_NOT_FOUND");
      // A writer's names the option that creates the session; the service's message did not.
      await assert.rejects(client.writer(sessionId("missing")), (e: unknown) => {
        assert.ok(e instanceof NotFound && e.reason === "SESSION_NOT_FOUND");
        assert.match(e.message, /not found; open the writer with createIfMissing: true to create it$/);
        return true;
      });
      const holder = await client.writer(id, { writerId: "first" });
      await assert.rejects(client.writer(id, { writerId: "second" }), (e: unknown) => {
        assert.ok(e instanceof WriterHeld);
        assert.equal(e.reason, "WRITER_HELD");
        assert.equal(e.metadata.holder, "first");
        assert.ok(Number(e.metadata.expires_at) > Date.now() - 60_000);
        return true;
      });
      await assert.rejects(holder.append([{ type: "made/up", data: {} }]), (e: unknown) => {
        assert.ok(e instanceof ValidationError);
        assert.equal(e.reason, "UNKNOWN_TYPE");
        assert.ok(e.reason in ErrorReason, "the reason is in the catalogue");
        assert.equal(e.metadata.type, "made/up");
        return true;
      });
      holder.cancel();
    });

    test("projections are typed: history, transcript, request, stats, surface", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      const header = await writer.reportHeader({ config: { model: "m1", maxTokens: 4096 } });
      assert.equal(header.reason, "initial");
      await writer.append([system("be brief"), turnStart(1), user("hi"), stepStart(1, 1), note(12345678901234567890n)]);
      await writer.append([assistant(1, 1, "", [["c1", "read"]], usage(10, 5)), toolCall(1, 1, "c1", "read"), toolResult(1, 1, "c1", "ok")]);
      await writer.append([stepEnd(1, 1), stepStart(1, 2), assistant(1, 2, "done", [], usage(20, 7)), stepEnd(1, 2), turnEnd(1)]);
      await writer.close();

      const history = await client.modelHistory(id);
      assert.deepEqual(history.map((m) => m.role), ["system", "user", "assistant", "toolResult", "assistant"]);
      const rows = await client.transcript(id);
      assert.ok(rows.some((r) => r.kind === "message" && r.type === "user/message"));
      assert.ok(rows.some((r) => r.kind === "event" && r.type === "turn/start"));
      assert.ok(rows.some((r) => r.kind === "event" && r.data.n === 12345678901234567890n), "big integers stay exact in projections");
      const request = await client.request(id);
      assert.equal(request.request.model, "m1");
      assert.equal(request.request.maxTokens, 4096);
      assert.equal(request.request.messages.length, 5);
      assert.equal(request.sha256, createHash("sha256").update(request.requestJson).digest("hex"));
      const stats = await client.stats(id);
      assert.equal(stats.inputTokens, 30);
      assert.equal(stats.outputTokens, 12);
      assert.equal(stats.toolCalls, 1);
      assert.equal(stats.costUsd, 0.006);
      assert.equal(stats.unpricedEvents, 0, "every usage carried a price");
      const surface = await client.surface(id);
      assert.equal(surface.nodes.length, 5);
      assert.deepEqual(await client.modelHistory(id, { pageSize: 2 }), history, "pages add up to the whole history");
      assert.deepEqual(await client.transcript(id, { pageSize: 3 }), rows, "pages add up to the whole transcript");
      const paged = client.historyCopy(id);
      paged.pageSize = 2;
      assert.deepEqual(await client.refreshHistory(paged), history);
      const early = await client.modelHistory(id, { atSeq: 4 });
      assert.equal(early.length, 2);
      const events = await collect(client.readEvents(id));
      const call = events.find((e) => isEventOfType(e, "tool/call"));
      assert.ok(call && isEventOfType(call, "tool/call") && call.data.name === "read");
    });

    test("a history copy fetches only what it lacks, and after a replace what it changed", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      await writer.append([system("p"), user("one")]);
      const copy = client.historyCopy(id);
      assert.equal((await client.refreshHistory(copy)).length, 2);
      const firstMessage = copy.messages[0];
      await writer.append([user("two")]);
      const tail = await client.rpc.getModelHistory(copy.request());
      assert.equal(tail.fromIndex, 2n, "the service sent only the new message");
      copy.apply(tail);
      assert.equal(copy.messages.length, 3);
      assert.equal(copy.messages[0], firstMessage, "the copy kept its earlier messages");
      await writer.append([{ type: "user/message", data: { message: { role: "user", content: "summary" } }, surfaceOp: { op: "replace", startSeq: 1, endSeq: 2 }, sourceEventSeqs: [1, 2] }]);
      const changed = await client.rpc.getModelHistory(copy.request());
      assert.equal(changed.fromIndex, 1n, "the service sent the messages from the first one the replace changed");
      copy.apply(changed);
      assert.equal(copy.messages[0], firstMessage, "the copy kept the messages before it");
      const after = await client.refreshHistory(copy);
      assert.deepEqual(after.map((m) => m.content), ["p", "summary"]);
      assert.deepEqual(after, await client.modelHistory(id));
      await writer.close();
    });

    test("resume repairs an open turn; fork shares the prefix", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true, writerId: "crashed" });
      await writer.append([system("p"), turnStart(1), user("go"), stepStart(1, 1), assistant(1, 1, "", [["c1", "bash"]]), toolCall(1, 1, "c1", "bash")]);
      writer.cancel(); // the harness dies mid-tool
      const resumed = await client.writer(id, { resume: true, takeover: true });
      assert.ok(resumed.resumed);
      assert.equal(resumed.resumed.repairSeqs.length, 3);
      assert.equal(resumed.resumed.lastTurn, 1, "the repaired turn: the harness's next is turn 2");
      await resumed.close();
      const events = await collect(client.readEvents(id));
      const repair = events.slice(-4).map((e) => e.type);
      assert.deepEqual(repair, ["tool/result", "step/end", "turn/end", "session/end-seed"]);
      const result = events.find((e) => e.type === "tool/result")!;
      assert.equal((result.data.error as { code: string }).code, "TOOL_OUTCOME_UNKNOWN");

      const fork = await client.fork(id, 2);
      assert.deepEqual(fork.session.parent, { sessionId: id, forkSeq: 2 });
      const child = await collect(client.readEvents(fork.session.id));
      assert.deepEqual(child.slice(0, 3).map((e) => e.eventId), events.slice(0, 3).map((e) => e.eventId));
      const tail = child.slice(3).map((e) => e.type);
      assert.ok(tail.includes("session/end-seed") && tail.includes("turn/end"), tail.join(","));
      assert.deepEqual(child.find((e) => e.type === "turn/end")!.data.reason, { kind: "forked" });
      const childResumed = await client.resume(fork.session.id);
      assert.equal(childResumed.lastTurn, 1, "a fork's inherited turns count");
      await client.releaseLease(childResumed.lease);
    });

    test("a create asked for again answers with the session it made; under another cwd or metadata, or once written to, it is SESSION_EXISTS", async () => {
      const id = sessionId();
      const made = await client.createSession(id, { cwd: "/w", metadata: { task: 7 } });
      assert.deepEqual(await client.createSession(id, { cwd: "/w", metadata: { task: 7 } }), made);
      const exists = (e: unknown) => e instanceof AlreadyExists && e.reason === "SESSION_EXISTS";
      await assert.rejects(client.createSession(id, { cwd: "/w", metadata: { task: 8 } }), exists);
      await assert.rejects(client.createSession(id, { metadata: { task: 7 } }), exists);
      const writer = await client.writer(id);
      await writer.append([note(1)]);
      await writer.close();
      await assert.rejects(client.createSession(id, { cwd: "/w", metadata: { task: 7 } }), exists);
    });

    test("a create whose answer was lost is sent again and answered with the session it made, not a second one", async () => {
      const id = sessionId();
      const cwd = `/home/dev/${id}`;
      for (const named of [true, false]) {
        const proxy = await answerLosingProxy(env.server.target, "CreateSession");
        const lossy = new SessionLogClient({ target: proxy.target });
        try {
          const made = await lossy.createSession(named ? id : undefined, { cwd, metadata: { named } });
          if (named) assert.equal(made.id, id);
          assert.deepEqual(await client.getSession(made.id), made);
        } finally {
          lossy.close();
          await proxy.close();
        }
      }
      const sessions = (await collect(client.listSessions())).filter((s) => s.cwd === cwd);
      assert.deepEqual(sessions.map((s) => s.metadata.named).sort(), [false, true], "one session per create, not two");
    });

    test("a fork whose answer was lost is sent again and answered with the fork it made, not a second one", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      await writer.append([system("p"), turnStart(1), user("go"), stepStart(1, 1), assistant(1, 1, "", [["c1", "bash"]])]);
      await writer.close();
      const proxy = await answerLosingProxy(env.server.target, "ForkSession");
      const lossy = new SessionLogClient({ target: proxy.target });
      try {
        const named = await lossy.fork(id, 4, `${id}-plan1`);
        assert.equal(named.session.id, `${id}-plan1`);
        assert.deepEqual(named.repairSeqs, [6, 7, 8], "the repair seqs of the fork made the first time");
      } finally {
        lossy.close();
        await proxy.close();
      }
      const unnamedProxy = await answerLosingProxy(env.server.target, "ForkSession");
      const unnamedClient = new SessionLogClient({ target: unnamedProxy.target });
      try {
        await unnamedClient.fork(id, 4);
      } finally {
        unnamedClient.close();
        await unnamedProxy.close();
      }
      const forks = await collect(client.listSessions({ parentSessionId: id }));
      assert.equal(forks.length, 2, forks.map((f) => f.id).join(","));
    });

    test("an acquire or a resume whose answer was lost is sent again and gets the lease it granted, its repairs written once", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      await writer.append([system("p"), turnStart(1), user("go"), stepStart(1, 1), assistant(1, 1, "", [["c1", "bash"]])]);
      await writer.close();
      for (const method of ["ResumeSession", "AcquireLease"]) {
        const proxy = await answerLosingProxy(env.server.target, method);
        const lossy = new SessionLogClient({ target: proxy.target });
        try {
          if (method === "ResumeSession") {
            const resumed = await lossy.resume(id);
            assert.deepEqual([resumed.repairSeqs, resumed.endSeedSeq, resumed.nextSeq], [[5, 6, 7], 8, 9], "the first answer's");
            assert.deepEqual((await lossy.append(resumed.lease, [note(1)])).seqs, [9]);
            await lossy.releaseLease(resumed.lease);
          } else {
            const lease = await lossy.acquireLease(id, { writerId: "again" });
            assert.deepEqual((await lossy.append(lease, [note(2)])).seqs, [10]);
            await assert.rejects(client.acquireLease(id), WriterHeld, "the retry holds the lease it was granted");
          }
        } finally {
          lossy.close();
          await proxy.close();
        }
      }
      const events = await collect(client.readEvents(id));
      assert.deepEqual(events.map((e) => e.type).slice(5), ["tool/result", "step/end", "turn/end", "session/end-seed", "test/note", "test/note"]);
    });

    test("a writer's first open whose answer was lost is sent again: the lease it granted, its resume written once", async () => {
      const id = sessionId("open-lost");
      const crashed = await client.writer(id, { createIfMissing: true });
      await crashed.append([system("p"), turnStart(1), user("go"), stepStart(1, 1), assistant(1, 1, "", [["c1", "bash"]])]);
      await crashed.close();
      // Two lost answers: three attempts, one lease under one token (each attempt at the next epoch).
      const proxy = await answerLosingProxy(env.server.target, "Write", 2);
      const lossy = new SessionLogClient({ target: proxy.target });
      try {
        const writer = await lossy.writer(id, { resume: true });
        assert.equal(writer.lease.epoch, crashed.lease.epoch + 3, "the lost opens' lease, taken again");
        assert.equal(writer.reconnects, 0, "a first open tried again is no reconnect");
        assert.deepEqual([writer.resumed?.repairSeqs, writer.resumed?.endSeedSeq], [[5, 6, 7], 8], "the lost answer's");
        assert.deepEqual((await writer.append([note(1)])).seqs, [9]);
        await writer.close();
      } finally {
        lossy.close();
        await proxy.close();
      }
      const events = await collect(client.readEvents(id));
      assert.deepEqual(events.map((e) => e.type).slice(5), ["tool/result", "step/end", "turn/end", "session/end-seed", "test/note"]);
      assert.equal((await client.getSession(id)).lease, undefined, "given back on close, not left to lapse");
    });

    test("a writer's first open is tried again as the client retries a call, not for the reconnect minute", async () => {
      const id = sessionId("open-retry");
      await client.createSession(id);
      // Two answers lost and a client that tries a call twice: the open fails, where the writer's
      // reconnect policy (120 attempts) would have gone on to a third attempt and opened.
      const proxy = await answerLosingProxy(env.server.target, "Write", 2);
      const lossy = new SessionLogClient({ target: proxy.target, retry: { attempts: 2, initialDelayMs: 10, maxDelayMs: 10 } });
      try {
        await assert.rejects(lossy.writer(id), (error: Error) => error instanceof Unavailable);
      } finally {
        lossy.close();
        await proxy.close();
      }
    });

    test("a client's next writer on a session takes the lease its unanswered open got, not WriterHeld by it", async () => {
      // The open failed Unavailable after its one attempt (its answer lost, or given up at the
      // client's timeoutMs while the service hung), and the lease it was granted refused the
      // client's next writer() on the session until it lapsed. That writer now sends the
      // unanswered open's requestId: its retry, which takes the lease.
      const id = sessionId("open-unanswered");
      await client.createSession(id);
      const proxy = await answerLosingProxy(env.server.target, "Write", 1);
      const lossy = new SessionLogClient({ target: proxy.target, retry: { attempts: 1, initialDelayMs: 0, maxDelayMs: 0 } });
      try {
        await assert.rejects(lossy.writer(id), (error: Error) => error instanceof Unavailable);
        const granted = (await client.getSession(id)).lease;
        assert.ok(granted !== undefined, "the unanswered open was granted the lease");
        const writer = await lossy.writer(id, { resume: true });
        assert.equal(writer.lease.epoch, granted.epoch + 1, "that lease, taken again");
        assert.deepEqual((await writer.append([note(0)])).seqs, [1], "after the resume's seed");
        await writer.close();
        const next = await lossy.writer(id); // the id went with the open that sent it again
        assert.notEqual(next.lease.token, writer.lease.token);
        await next.close();
      } finally {
        lossy.close();
        await proxy.close();
      }
      assert.equal((await client.getSession(id)).lease, undefined);
    });

    test("a release whose answer was lost is not sent again: Unavailable (outcome unknown), not OwnershipLost", async () => {
      const id = sessionId();
      await client.createSession(id);
      const proxy = await answerLosingProxy(env.server.target, "ReleaseLease");
      const lossy = new SessionLogClient({ target: proxy.target });
      try {
        const unary = await lossy.leaseWriter(id);
        await unary.append([note(1)]);
        // Sent again, the release finds the lease it gave back gone: OWNERSHIP_LOST, as if the
        // lease had been taken over, where the Python clients say the outcome is unknown.
        await assert.rejects(unary.close(), (e: unknown) => {
          assert.ok(e instanceof Unavailable, String(e));
          assert.equal(e.reason, "TRANSPORT_ERROR");
          assert.match(e.message, /lost the answer/);
          return true;
        });
      } finally {
        lossy.close();
        await proxy.close();
      }
      assert.equal((await client.getSession(id)).lease, undefined, "the release was done, once");
      await (await client.leaseWriter(id)).close(); // the lease is free: no takeover needed
    });

    test("a lease writer heartbeats, and a takeover is OwnershipLost, never a quiet re-acquire", async () => {
      const id = sessionId();
      await client.createSession(id);
      const unary = await client.leaseWriter(id, { writerId: "unary", heartbeatMs: 50 });
      const first = await unary.append([note(1)]);
      assert.deepEqual(first.seqs, [0]);
      const before = unary.lease.expireTimeMs;
      await new Promise((r) => setTimeout(r, 200));
      assert.ok(unary.lease.expireTimeMs > before, "heartbeats renewed the lease");
      const thief = await client.writer(id, { takeover: true, writerId: "thief" });
      await assert.rejects(unary.append([note(2)]), OwnershipLost);
      await assert.rejects(unary.append([note(3)]), OwnershipLost, "it stays failed");
      await thief.append([note(4)]);
      await thief.close();
      const types = (await collect(client.readEvents(id))).map((e) => e.data.n);
      assert.deepEqual(types, [1, 4]);
      await unary.close();
    });

    test("both writers' nextSeq counts a header they logged, so it serves as expectedNextSeq", async () => {
      const id = sessionId();
      await client.createSession(id);
      const unary = await client.leaseWriter(id);
      await unary.append([turnStart(1)], { expectedNextSeq: unary.nextSeq });
      const report = await unary.reportHeader({ config: { model: "m-1" } });
      assert.equal(report.headerSeq, 1, "the header was logged");
      assert.equal(unary.nextSeq, 2, "the lease writer's nextSeq is past the header it logged");
      await unary.append([turnEnd(1)], { expectedNextSeq: unary.nextSeq });
      await unary.close();
      const stream = await client.writer(id);
      const changed = await stream.reportHeader({ config: { model: "m-2" } });
      assert.equal(changed.headerSeq, 3, "the changed header was logged");
      assert.equal(stream.nextSeq, 4, "the streaming writer's nextSeq is past the header it logged");
      await stream.append([turnStart(2)], { expectedNextSeq: stream.nextSeq });
      await stream.close();
    });

    test("a subscription replays, marks caught-up once, then follows the live tail", async () => {
      const id = sessionId();
      const writer = await client.writer(id, { createIfMissing: true });
      await writer.append([note(0), note(1)]);
      const subscription = client.subscribe(id);
      const seen: (Event | CaughtUp)[] = [];
      const done = (async () => {
        for await (const item of subscription) {
          seen.push(item);
          if ("seq" in item && item.seq === 3) break;
        }
      })();
      await new Promise((r) => setTimeout(r, 100));
      await writer.append([note(2), note(3)]);
      await done;
      await writer.close();
      assert.deepEqual(seen.map((i) => ("seq" in i ? i.seq : "caught-up")), [0, 1, "caught-up", 2, 3]);
      const beyond = client.subscribe(id, { fromSeq: 99 });
      await assert.rejects(collect(beyond), (e: unknown) => e instanceof OutOfRange && e.reason === "FROM_SEQ_PAST_HEAD");
      // A read from past the head is refused alike (it read nothing); from the head it is empty.
      assert.deepEqual(await collect(client.readEvents(id, { fromSeq: 4 })), []);
      await assert.rejects(
        collect(client.readEvents(id, { fromSeq: 99 })),
        (e: unknown) => e instanceof OutOfRange && e.reason === "FROM_SEQ_PAST_HEAD" && e.metadata.next_seq === "4",
      );
    });
  });
}
