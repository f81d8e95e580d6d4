/**
 * Bad arguments fail at once with a ValidationError naming the argument, are not retried, and
 * send nothing; bigint seqs are taken as well as numbers.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { isResumableCut, type Lease, NotFound, type RetryPolicy, SessionLogClient, toSessionLogError, Unavailable, ValidationError } from "../src/index.js";
import { note } from "./events.js";
import { BACKENDS, freePort, sessionId, startServer } from "./support.js";

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** A lease that only has to reach the argument checks (they come before anything is sent). */
const ANY_LEASE: Lease = { sessionId: "any", writerId: "w", epoch: 1, expireTimeMs: 0, token: "t" };

/** Every call with a bad seq-like argument, by what it should name. */
function badCalls(client: SessionLogClient, id: string): [string, string, () => Promise<unknown>][] {
  return [
    ["readEvents fromSeq -1", "fromSeq", () => collect(client.readEvents(id, { fromSeq: -1 }))],
    ["readEvents fromSeq 1.5", "fromSeq", () => collect(client.readEvents(id, { fromSeq: 1.5 }))],
    ["readEvents toSeq 2^53", "toSeq", () => collect(client.readEvents(id, { toSeq: 2 ** 53 }))],
    ["modelHistory atSeq -1", "atSeq", () => client.modelHistory(id, { atSeq: -1 })],
    ["transcript atSeq NaN", "atSeq", () => client.transcript(id, { atSeq: Number.NaN })],
    ["stats atSeq -1n", "atSeq", () => client.stats(id, { atSeq: -1n })],
    ["fork atSeq -1", "atSeq", () => client.fork(id, -1)],
    ["subscribe fromSeq -1", "fromSeq", () => collect(client.subscribe(id, { fromSeq: -1 }))],
    ["append expectedNextSeq 0.5", "expectedNextSeq", () => client.append(ANY_LEASE, [note(1)], { expectedNextSeq: 0.5 })],
  ];
}

async function assertRefusedAtOnce(call: () => Promise<unknown>, field: string, reason: string, what: string): Promise<void> {
  const started = Date.now();
  await assert.rejects(call(), (e: unknown) => {
    assert.ok(e instanceof ValidationError, `${what}: ${String(e)}`);
    assert.equal(e.reason, reason, what);
    assert.equal(e.metadata.field, field, what);
    assert.equal(e.code, Code.InvalidArgument, what);
    assert.equal(e.retryable, false, what);
    return true;
  });
  assert.ok(Date.now() - started < 1000, `${what} took ${Date.now() - started} ms: it was retried`);
}

const backend = BACKENDS[0]!;

describe(`arguments on ${backend}`, () => {
  let env: Awaited<ReturnType<typeof startServer>>;
  let id: string;
  before(async () => {
    env = await startServer(backend);
    id = sessionId("args");
    const writer = await env.client.writer(id, { createIfMissing: true });
    await writer.append([note(0), note(1), note(2)]);
    await writer.close();
  });
  after(async () => env.close());

  test("a bad seq is a ValidationError (BAD_SEQ) at once, never retried", async () => {
    for (const [what, field, call] of badCalls(env.client, id)) await assertRefusedAtOnce(call, field, "BAD_SEQ", what);
  });

  test("a bad page size is a ValidationError (BAD_PAGE_SIZE) at once", async () => {
    await assertRefusedAtOnce(() => collect(env.client.readEvents(id, { pageSize: 1.5 })), "pageSize", "BAD_PAGE_SIZE", "readEvents pageSize 1.5");
    await assertRefusedAtOnce(() => env.client.modelHistory(id, { pageSize: -1 }), "pageSize", "BAD_PAGE_SIZE", "modelHistory pageSize -1");
  });

  test("nothing is sent: a client of an address nobody listens on gets the same ValidationError", async () => {
    const nowhere = new SessionLogClient({ target: `127.0.0.1:${await freePort()}`, retry: { attempts: 1, initialDelayMs: 0, maxDelayMs: 0 } });
    try {
      await assert.rejects(nowhere.getSession(id), Unavailable, "the address really is dead");
      for (const [what, field, call] of badCalls(nowhere, id)) await assertRefusedAtOnce(call, field, "BAD_SEQ", what);
      // The service refuses a NUL in an eventId too (PostgreSQL cannot store it); the client does first.
      await assertRefusedAtOnce(() => nowhere.append(ANY_LEASE, [{ ...note(0), eventId: "a\u0000b" }]), "eventId", "BAD_EVENT_ID", "append eventId with a NUL");
      await assertRefusedAtOnce(() => nowhere.append(ANY_LEASE, [{ ...note(0), eventId: "x".repeat(129) }]), "eventId", "BAD_EVENT_ID", "append eventId of 129 characters");
      await assertRefusedAtOnce(() => nowhere.append(ANY_LEASE, [{ ...note(0), eventId: "\udfff" }]), "eventId", "BAD_EVENT_ID", "append eventId with a lone surrogate");
      await assertRefusedAtOnce(() => nowhere.createSession(id, { cwd: "\udfff" }), "cwd", "UNSTORABLE_VALUE", "createSession cwd with a lone surrogate");
      await assertRefusedAtOnce(() => nowhere.writer(id, { writerId: "\udfff" }), "writerId", "BAD_WRITER_ID", "writer writerId with a lone surrogate");
      // The wire cannot tell an empty id from none: the service would make up a session.
      await assertRefusedAtOnce(() => nowhere.createSession(""), "sessionId", "BAD_SESSION_ID", "createSession with an empty id");
      await assertRefusedAtOnce(() => nowhere.fork(id, 1, ""), "newSessionId", "BAD_SESSION_ID", "fork to an empty id");
    } finally {
      nowhere.close();
    }
  });

  test("a cwd or writer id holding a lone surrogate is refused by the service's rule, before anything is sent", async () => {
    // They travelled as U+FFFD (protobuf's UTF-8 encoding replaces a lone surrogate): a session
    // was created with a cwd the caller never gave, and a writer held the lease under another id.
    const id = sessionId("surrogate");
    await assertRefusedAtOnce(() => env.client.createSession(id, { cwd: "/home/\ud800" }), "cwd", "UNSTORABLE_VALUE", "createSession cwd");
    await assert.rejects(env.client.getSession(id), NotFound, "no session was created");
    await env.client.createSession(id);
    const calls: [string, () => Promise<unknown>][] = [
      ["acquireLease", () => env.client.acquireLease(id, { writerId: "w\udc00" })],
      ["resume", () => env.client.resume(id, { writerId: "w\udc00" })],
      ["writer", () => env.client.writer(id, { writerId: "w\udc00" })],
      ["leaseWriter", () => env.client.leaseWriter(id, { writerId: "\ud83d" })],
      ["leaseWriter resume", () => env.client.leaseWriter(id, { writerId: "\ud83d", resume: true })],
    ];
    for (const [what, call] of calls) await assertRefusedAtOnce(call, "writerId", "BAD_WRITER_ID", what);
    const session = await env.client.getSession(id);
    assert.equal(session.nextSeq, 0);
    assert.equal(session.lease, undefined, "no writer holds the session");
    // A pair is one character, and taken: only a lone half is refused.
    assert.equal((await env.client.acquireLease(id, { writerId: "w\ud83d\ude00" })).writerId, "w\ud83d\ude00");
  });

  test("a retry policy missing a field, or holding a number it cannot mean, is a RangeError", async () => {
    // From plain JavaScript, `{ attempts: 3 }` made every delay NaN: no wait at all, its
    // attempts spent within milliseconds against a service restarting.
    const bad: [string, unknown][] = [
      ["a field missing", { attempts: 3 }],
      ["attempts 0", { attempts: 0, initialDelayMs: 10, maxDelayMs: 10 }],
      ["attempts 1.5", { attempts: 1.5, initialDelayMs: 10, maxDelayMs: 10 }],
      ["a negative delay", { attempts: 3, initialDelayMs: -1, maxDelayMs: 10 }],
      ["an infinite delay", { attempts: 3, initialDelayMs: 10, maxDelayMs: Number.POSITIVE_INFINITY }],
    ];
    for (const [what, policy] of bad) {
      const given = policy as RetryPolicy;
      assert.throws(() => new SessionLogClient({ target: env.server.target, retry: given }), RangeError, `client retry: ${what}`);
      assert.throws(() => env.client.subscribe(id, { retry: given }), /^RangeError: retry\./, `subscribe retry: ${what}`);
      await assert.rejects(env.client.writer(id, { reconnect: given }), /^RangeError: reconnect\./, `writer reconnect: ${what}`);
      await assert.rejects(env.client.writer(id, { openRetry: given }), /^RangeError: openRetry\./, `writer openRetry: ${what}`);
    }
    const writer = await env.client.writer(id, { reconnect: { attempts: 1, initialDelayMs: 0, maxDelayMs: 0 } });
    await writer.close(); // a whole policy of zero delays is one
  });

  test("seqs may be bigints", async () => {
    const events = await collect(env.client.readEvents(id, { fromSeq: 1n, toSeq: 2n }));
    assert.deepEqual(events.map((e) => e.seq), [1, 2]);
    assert.deepEqual((await env.client.surface(id, { atSeq: 1n })).atSeq, 1);
  });

  test("a bad event is a rejected append (ValidationError with the service's reason), and the writer goes on", async () => {
    const writer = await env.client.writer(sessionId("events"), { createIfMissing: true });
    const bad: [string, string, string, () => Promise<unknown>][] = [
      ["surfaceOp \"replace\"", "BAD_SURFACE_OP", "surfaceOp", () => writer.append([{ ...note(1), surfaceOp: "replace" as never }])],
      ["a replace without seqs", "BAD_SURFACE_OP", "surfaceOp.startSeq", () => writer.append([{ ...note(1), surfaceOp: { op: "replace" } as never }])],
      ["data {turn: NaN}", "NON_FINITE_NUMBER", "data", () => writer.append([note(1), { type: "turn/start", data: { turn: Number.NaN } }])],
      ["data an array", "DATA_NOT_OBJECT", "data", () => writer.append([{ type: "test/note", data: [1] as never }])],
      // It travelled as no type: the service refused it, and the writer ended with it.
      ["an empty type", "BAD_TYPE", "type", () => writer.append([{ type: "", data: {} }])],
      ["sourceEventSeqs [-1]", "BAD_SOURCE_EVENT_SEQS", "sourceEventSeqs[0]", () => writer.append([{ ...note(1), sourceEventSeqs: [-1] }])],
      // Dropped unseen, a misspelt eventId cost the event its retry protection (a fresh id was given).
      ["an event_id for eventId", "BAD_ENVELOPE", "event_id", () => writer.append([{ ...note(1), event_id: "e1" } as never])],
      ["a payload for data", "BAD_ENVELOPE", "payload", () => writer.append([{ type: "test/note", payload: { n: 1 } } as never])],
      ["a numeric eventId", "BAD_EVENT_ID", "eventId", () => writer.append([{ ...note(1), eventId: 7 as never }])],
      ["an empty eventId (it would travel as none)", "BAD_EVENT_ID", "eventId", () => writer.append([{ ...note(1), eventId: "" }])],
      ["an eventId holding a NUL (refused by the service on every database)", "BAD_EVENT_ID", "eventId", () => writer.append([{ ...note(1), eventId: "a\u0000b" }])],
      ["an eventId of 129 characters", "BAD_EVENT_ID", "eventId", () => writer.append([{ ...note(1), eventId: "é".repeat(129) }])],
      // UTF-8 cannot carry a lone surrogate: both would travel as "a\ufffd", one id for two events.
      ["an eventId holding a lone high surrogate", "BAD_EVENT_ID", "eventId", () => writer.append([{ ...note(1), eventId: "a\ud800" }])],
      ["an eventId holding a lone low surrogate", "BAD_EVENT_ID", "eventId", () => writer.append([{ ...note(1), eventId: "a\udc00" }])],
      ["expectedNextSeq 0.5", "BAD_SEQ", "expectedNextSeq", () => writer.append([note(1)], { expectedNextSeq: 0.5 })],
      ["a header with Infinity", "NON_FINITE_NUMBER", "header", () => writer.reportHeader({ config: { temperature: Number.POSITIVE_INFINITY } })],
      // JSON would have stored these as {}, left them out, or made them null, without a word.
      ["data holding a Map", "NOT_CANONICALIZABLE", "data", () => writer.append([{ type: "test/note", data: { results: new Map([["c1", "ok"]]) } as never }])],
      ["data holding a Set", "NOT_CANONICALIZABLE", "data", () => writer.append([{ type: "test/note", data: { tags: new Set(["a"]) } as never }])],
      ["data holding a function", "NOT_CANONICALIZABLE", "data", () => writer.append([{ type: "test/note", data: { f: () => 1 } as never }])],
      ["data with undefined in an array", "NOT_CANONICALIZABLE", "data", () => writer.append([{ type: "test/note", data: { list: [1, undefined] } as never }])],
      ["a header holding a Map", "NOT_CANONICALIZABLE", "header", () => writer.reportHeader({ config: { cache: new Map() } } as never)],
      // Sent, the service's refusal ended the writer: a harness with no tools sent tools: [].
      ["a header with tools: []", "HEADER_EMPTY_TOOLS", "header.tools", () => writer.reportHeader({ config: { model: "m" }, tools: [] })],
      ["a header with config.messages", "HEADER_CONFIG_RESERVED_KEY", "header.config.messages", () => writer.reportHeader({ config: { messages: [] } })],
      ["a header without config", "HEADER_CONFIG_MISSING", "header.config", () => writer.reportHeader({ tools: [{ name: "t" }] } as never)],
    ];
    for (const [what, reason, field, call] of bad) {
      let returned: Promise<unknown> | undefined;
      assert.doesNotThrow(() => (returned = call()), `${what}: thrown, not a rejected promise`);
      await assert.rejects(returned!, (e: unknown) => {
        assert.ok(e instanceof ValidationError, `${what}: ${String(e)}`);
        assert.equal(e.reason, reason, what);
        assert.equal(e.metadata.field, field, what);
        return true;
      });
    }
    await assert.rejects(env.client.append(ANY_LEASE, [note(0), note(Number.NaN)]), (e: unknown) => e instanceof ValidationError && e.metadata.event_index === "1");
    await assert.rejects(env.client.append(ANY_LEASE, [note(0), { ...note(1), eventId: "" }]), (e: unknown) => e instanceof ValidationError && e.reason === "BAD_EVENT_ID");
    await assert.rejects(
      env.client.append(ANY_LEASE, [note(0), { ...note(1), eventId: "\u0000" }]),
      (e: unknown) => e instanceof ValidationError && e.reason === "BAD_EVENT_ID" && e.metadata.event_index === "1",
    );
    assert.deepEqual((await writer.append([note(1)])).seqs, [0], "the writer still works: nothing bad was sent");
    await assert.rejects(writer.append([{ type: "test/note", data: { results: new Map() } as never }]), /holds a Map at data\.results/);
    // What JSON writes by its own rule stays written so: a Date as its ISO text, an object's undefined field left out.
    assert.deepEqual((await writer.append([note(1, { data: { at: new Date(0) as never, gone: undefined } })])).seqs, [1]);
    const [dated] = await collect(env.client.readEvents(writer.sessionId, { fromSeq: 1n, toSeq: 1n }));
    assert.deepEqual(dated?.data, { at: "1970-01-01T00:00:00.000Z" });
    // 128 characters, each two UTF-16 units: the service's limit counts characters, and takes it.
    assert.deepEqual((await writer.append([{ ...note(2), eventId: "😀".repeat(128) }])).seqs, [2]);
    await writer.close();
  });

  test("a writer's maxInFlight that is not a positive integer is refused at once (no batch could ever be sent)", async () => {
    for (const maxInFlight of [0, -1, 1.5, Number.NaN]) {
      const id = sessionId("in-flight");
      await assert.rejects(env.client.writer(id, { createIfMissing: true, maxInFlight }), (e: unknown) => {
        assert.ok(e instanceof RangeError, `maxInFlight ${maxInFlight}: ${String(e)}`);
        assert.match(e.message, /maxInFlight/);
        return true;
      });
      await assert.rejects(env.client.getSession(id), NotFound, `maxInFlight ${maxInFlight}: nothing was sent`);
    }
  });

  test("a lease writer's heartbeatMs that is not a positive number is refused before the lease is taken", async () => {
    // With 0 (or less, or NaN, or past a timer's longest delay) the timer fired at once: a busy loop of renewals.
    const id = sessionId("heartbeat");
    await env.client.createSession(id);
    for (const heartbeatMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, "1" as unknown as number]) {
      await assert.rejects(env.client.leaseWriter(id, { heartbeatMs }), (e: unknown) => {
        assert.ok(e instanceof RangeError, `heartbeatMs ${String(heartbeatMs)}: ${String(e)}`);
        assert.match(e.message, /heartbeatMs/);
        return true;
      });
    }
    await env.client.releaseLease(await env.client.acquireLease(id)); // no lease was taken: no takeover needed
  });

  test("a request Connect cannot encode is a ValidationError (MALFORMED_REQUEST), not a transport failure", async () => {
    // The generated client, below the argument checks: Connect's encoder refuses -1 as a uint64.
    const raw = await collect(env.client.rpc.readEvents({ sessionId: id, fromSeq: -1n })).catch((e: unknown) => e);
    assert.ok(raw instanceof ConnectError && raw.code === Code.Internal, `Connect reports INTERNAL: ${String(raw)}`);
    const error = toSessionLogError(raw);
    assert.ok(error instanceof ValidationError, String(error));
    assert.equal(error.reason, "MALFORMED_REQUEST");
    assert.equal(error.retryable, false);
  });

  test("a transport failure is Unavailable with TRANSPORT_ERROR and the code docs/errors.md gives it", () => {
    for (const code of [Code.Internal, Code.Canceled, Code.Aborted, Code.Unknown]) {
      const error = toSessionLogError(new ConnectError("the stream broke", code));
      assert.ok(error instanceof Unavailable, String(error));
      assert.equal(error.reason, "TRANSPORT_ERROR");
      assert.equal(error.code, Code.Unavailable, `Connect's code ${Code[code]} is kept in cause, not in code`);
      assert.ok(error.retryable);
    }
  });

  test("a stream cut inside a message is a transport failure too, not the caller's INVALID_ARGUMENT", () => {
    // What Connect says when the stream ends part-way through a message (the service stopped,
    // or a proxy reset the stream, as one was on its way): a subscription resubscribes on it.
    const error = toSessionLogError(new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
    assert.ok(error instanceof Unavailable, String(error));
    assert.equal(error.reason, "TRANSPORT_ERROR");
    assert.ok(isResumableCut(error));
    const refused = toSessionLogError(new ConnectError("a bad request", Code.InvalidArgument));
    assert.ok(!(refused instanceof Unavailable) && !isResumableCut(refused), "another INVALID_ARGUMENT is not a cut");
  });
});

describe("the target", () => {
  // Node's URL parser refused these as "Invalid URL", naming neither the address nor the fault;
  // the Python clients' check_target says what is wrong, and so does this client now.
  test("an empty or blank target is refused at construction, as by the Python clients", () => {
    for (const target of ["", "  ", "http://"]) {
      assert.throws(
        () => new SessionLogClient({ target }),
        (e: unknown) => e instanceof TypeError && /^the server address is empty: give HOST:PORT/.test(e.message),
        JSON.stringify(target),
      );
    }
  });

  test("a port past 65535 is refused at construction, naming the target", () => {
    assert.throws(
      () => new SessionLogClient({ target: "127.0.0.1:99999" }),
      (e: unknown) => e instanceof TypeError && e.message.startsWith('"127.0.0.1:99999": the port must be from 1 to 65535'),
    );
    assert.doesNotThrow(() => new SessionLogClient({ target: "127.0.0.1:65535" }).close());
  });
});
