/**
 * A status without a sessionlog ErrorInfo gets a reason of the catalogue (docs/errors.md), as in
 * the Python clients (tests/transport/test_transport_errors.py), against real servers: a gRPC
 * server's DEADLINE_EXCEEDED (TRANSPORT_ERROR), one that is not sessionlog (UNIMPLEMENTED:
 * UNEXPECTED_STATUS), and gRPC's own message size limit of a real service (RESOURCE_EXHAUSTED:
 * MESSAGE_TOO_LARGE). The client gave the code's name, which no reason of the catalogue is.
 */
import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { EventSchema } from "../src/gen/sessionlog/v1/event_pb.js";
import { ReadEventsResponseSchema } from "../src/gen/sessionlog/v1/session_service_pb.js";
import { isCataloguedReason, LimitExceeded, ServerError, SessionLogClient, Unavailable } from "../src/index.js";
import { BACKENDS, freePort, sessionId, startServer } from "./support.js";

const ONCE = { attempts: 1, initialDelayMs: 0, maxDelayMs: 0 };

async function listening(server: http2.Http2Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function closed(server: http2.Http2Server): Promise<void> {
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** An HTTP/2 server that answers every call with gRPC status `code` and no ErrorInfo. */
function answering(code: number, message: string): http2.Http2Server {
  return http2.createServer((request, response) => {
    request.resume();
    response.writeHead(200, { "content-type": "application/grpc", "grpc-status": String(code), "grpc-message": message });
    response.end();
  });
}

async function failure(server: http2.Http2Server): Promise<unknown> {
  const client = new SessionLogClient({ target: await listening(server), retry: ONCE });
  try {
    return await client.getSession("s").catch((e: unknown) => e);
  } finally {
    client.close();
    await closed(server);
  }
}

/**
 * An HTTP/2 server whose every call (a ReadEvents) is answered with `pages` pages of one event,
 * `gapMs` before each, then the stream's end, or nothing more when `hang`.
 */
function pacedReads(pages: number, gapMs: number, hang: boolean): http2.Http2Server {
  return http2.createServer((request, response) => {
    request.resume();
    response.writeHead(200, { "content-type": "application/grpc" });
    void (async () => {
      for (let seq = 0; seq < pages; seq++) {
        await new Promise((resolve) => setTimeout(resolve, gapMs));
        if (response.stream.closed) return;
        const event = create(EventSchema, { seq: BigInt(seq), timeUnixMs: 1n, type: "custom", dataJson: new TextEncoder().encode("{}") });
        const body = toBinary(ReadEventsResponseSchema, create(ReadEventsResponseSchema, { events: [event] }));
        const frame = Buffer.alloc(5 + body.length);
        frame.writeUInt32BE(body.length, 1);
        frame.set(body, 5);
        response.write(frame);
      }
      if (hang) return;
      response.addTrailers({ "grpc-status": "0" });
      response.end();
    })();
  });
}

/** The seqs `readEvents` delivers against `server` with `timeoutMs`, and what it threw, if anything. */
async function readFrom(server: http2.Http2Server, timeoutMs: number, lingerMs = 0): Promise<{ seqs: number[]; error: unknown; elapsed: number }> {
  const client = new SessionLogClient({ target: await listening(server), timeoutMs });
  const seqs: number[] = [];
  const started = Date.now();
  try {
    for await (const event of client.readEvents("s")) {
      seqs.push(Number(event.seq));
      await new Promise((resolve) => setTimeout(resolve, lingerMs));
    }
    return { seqs, error: undefined, elapsed: Date.now() - started };
  } catch (error) {
    return { seqs, error, elapsed: Date.now() - started };
  } finally {
    client.close();
    await closed(server);
  }
}

describe("readEvents: timeoutMs bounds the wait for each page, not the whole read", () => {
  // A read had no deadline: against a service that accepted the call and sent nothing it
  // waited forever (the Python clients: tests/transport/test_read_deadline.py).
  test("a read from a service that sends nothing fails within its timeoutMs, TRANSPORT_ERROR saying so", async () => {
    const { seqs, error, elapsed } = await readFrom(pacedReads(0, 0, true), 500);
    assert.ok(elapsed < 3_000, `the read took ${elapsed} ms with a timeoutMs of 500`);
    assert.deepEqual(seqs, []);
    assert.ok(error instanceof Unavailable, String(error));
    assert.equal(error.reason, "TRANSPORT_ERROR");
    assert.match(error.message, /no page within the client's timeoutMs of 500 ms/);
  });

  test("a read that stalls after some pages gives them, then fails (the caller's own time not counted)", async () => {
    const { seqs, error, elapsed } = await readFrom(pacedReads(2, 0, true), 500, 700);
    assert.deepEqual(seqs, [0, 1]);
    assert.ok(error instanceof Unavailable, String(error));
    assert.match(error.message, /no page within the client's timeoutMs of 500 ms/);
    assert.ok(elapsed < 5_000, `the read took ${elapsed} ms`);
  });

  test("pages 300 ms apart take longer than timeoutMs in all, and the read completes", async () => {
    const { seqs, error, elapsed } = await readFrom(pacedReads(5, 300, false), 500);
    assert.equal(error, undefined, String(error));
    assert.deepEqual(seqs, [0, 1, 2, 3, 4]);
    assert.ok(elapsed > 500);
  });
});

describe("statuses without a sessionlog ErrorInfo", () => {
  test("DEADLINE_EXCEEDED (a gRPC server's, past the call's deadline) is Unavailable with TRANSPORT_ERROR", async () => {
    const error = await failure(answering(4, "Deadline Exceeded"));
    assert.ok(error instanceof Unavailable, String(error));
    assert.equal(error.reason, "TRANSPORT_ERROR");
    assert.equal(error.code, Code.Unavailable);
    assert.ok(error.retryable);
  });

  test("a call's timeoutMs is the call's gRPC deadline: DEADLINE_EXCEEDED, TRANSPORT_ERROR saying the timeout passed", async () => {
    // Connect was given an AbortSignal.timeout: the call ended as CANCELLED ("The operation was
    // aborted"), and the server was never told the deadline, so it went on with a call the
    // client had given up on. The Python client sends its timeout as the call's deadline.
    const deadlines: (string | undefined)[] = [];
    const silent = http2.createServer((request) => {
      deadlines.push(request.headers["grpc-timeout"] as string | undefined);
      request.resume(); // and never answers
    });
    const client = new SessionLogClient({ target: await listening(silent), timeoutMs: 300, retry: ONCE });
    try {
      const started = Date.now();
      const error = await client.getSession("s").catch((e: unknown) => e);
      assert.ok(Date.now() - started < 5_000, "the call ended at its timeout");
      assert.ok(error instanceof Unavailable, String(error));
      assert.equal(error.reason, "TRANSPORT_ERROR");
      assert.equal(error.code, Code.Unavailable);
      assert.equal((error.cause as ConnectError).code, Code.DeadlineExceeded);
      assert.match(error.message, /timed out|deadline/i);
      assert.equal(deadlines.length, 1);
      assert.match(deadlines[0] ?? "", /^\d+m$/, "the server was told the call's deadline");
      assert.ok(Number(deadlines[0]!.slice(0, -1)) <= 300, deadlines[0]);
    } finally {
      client.close();
      await closed(silent);
    }
  });

  test("timeoutMs is the budget of the whole call: a retried read against a server that never answers fails within it", async () => {
    // Each attempt had the whole timeoutMs and a timed-out read was retried 8 times: with
    // timeoutMs 300, getSession took about 6 s to fail (4 minutes with the 30 s default).
    const deadlines: (string | undefined)[] = [];
    const silent = http2.createServer((request) => {
      deadlines.push(request.headers["grpc-timeout"] as string | undefined);
      request.resume(); // and never answers
    });
    const client = new SessionLogClient({ target: await listening(silent), timeoutMs: 500 });
    try {
      const started = Date.now();
      const error = await client.getSession("s").catch((e: unknown) => e);
      const elapsed = Date.now() - started;
      assert.ok(elapsed < 2_500, `the call took ${elapsed} ms with a timeoutMs of 500`);
      assert.ok(error instanceof Unavailable, String(error));
      assert.equal(error.reason, "TRANSPORT_ERROR");
      assert.match(error.message, /^the call's timeoutMs of 500 ms was spent after 1 attempt: /);
      assert.equal((error.cause as ConnectError).code, Code.DeadlineExceeded);
      assert.equal(deadlines.length, 1, "no attempt starts once the budget is spent");
    } finally {
      client.close();
      await closed(silent);
    }
  });

  test("no retry waits past the budget: the call fails when the backoff would spend it", async () => {
    const slow = { attempts: 8, initialDelayMs: 400, maxDelayMs: 400 };
    const client = new SessionLogClient({ target: `127.0.0.1:${await freePort()}`, timeoutMs: 1_000, retry: slow });
    try {
      const started = Date.now();
      const error = await client.getSession("s").catch((e: unknown) => e);
      const elapsed = Date.now() - started;
      assert.ok(elapsed < 2_000, `the call took ${elapsed} ms with a timeoutMs of 1000`); // it waited out 7 * 400 ms
      assert.ok(error instanceof Unavailable, String(error));
      assert.match(error.message, /^the call's timeoutMs of 1000 ms was spent after \d attempts: /);
    } finally {
      client.close();
    }
  });

  test("a server that is not sessionlog (UNIMPLEMENTED) is UNEXPECTED_STATUS, its code in the message", async () => {
    const error = await failure(answering(12, "Method not found"));
    assert.ok(error instanceof ServerError, String(error));
    assert.equal(error.reason, "UNEXPECTED_STATUS");
    assert.ok(isCataloguedReason(error.reason));
    assert.match(error.message, /^UNIMPLEMENTED: /);
    assert.equal(error.retryable, false);
  });

  for (const backend of BACKENDS.slice(0, 1)) {
    test(`a request over the service's message limit is MESSAGE_TOO_LARGE and creates nothing (${backend})`, async () => {
      const env = await startServer(backend, { SESSIONLOG_MAX_MESSAGE_BYTES: String(16 * 1024) });
      try {
        const id = sessionId("too-large");
        const error = await env.client.createSession(id, { metadata: { notes: "x".repeat(32 * 1024) } }).catch((e: unknown) => e);
        assert.ok(error instanceof LimitExceeded, String(error));
        assert.equal(error.reason, "MESSAGE_TOO_LARGE");
        assert.equal(error.code, Code.ResourceExhausted);
        const found = await env.client.getSession(id).catch((e: unknown) => e);
        assert.ok(found instanceof Error && (found as ServerError).reason === "SESSION_NOT_FOUND", String(found));
      } finally {
        await env.close();
      }
    });
  }
});
