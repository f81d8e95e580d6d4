/**
 * The HTTP/2 connections of a client: Connect's session manager, with every session it opens
 * given an `error` listener of this client's own, and a connection that only idle writers'
 * streams keep open left out of what keeps the process alive.
 *
 * Node throws an `error` event nobody listens to. Connect listens while a session is its
 * current one, but its `abort()` (the client's `close()`) removes its listeners from a session
 * its keepalive has just destroyed ("PING timed out", a service that hangs) before Node emits
 * that session's `error`: the process crashed with "Unhandled 'error' event" right after the
 * caller had handled the failed call and closed the client. Connect still sees every error
 * while it listens; the listener here only keeps a late one from being thrown.
 *
 * Connect holds the process alive while any stream is open on a connection. A writer's stream
 * stays open for as long as the writer: a process that dropped a writer without closing it
 * never exited (a Python process exits, and the lease lapses as a dead writer's; a lease
 * writer's heartbeats keep no process alive either). So a writer stream holds the process only
 * while some writer has work the caller may be waiting for (`writerBusy`: opening, batches
 * unacknowledged, closing); every other stream (a call, a read, a subscription) holds it.
 */
import type * as http2 from "node:http2";
import { Http2SessionManager } from "@connectrpc/connect-node";
import { SessionService } from "./gen/sessionlog/v1/session_service_pb.js";

/**
 * The connection's keepalive: a PING after this long without a frame from the service, so a
 * service that hangs (its connections open, nothing answered) is noticed. The Python clients
 * use the same values (client/sessionlog/keepalive.py), and the service accepts PINGs half this
 * far apart (server/sessionlog_server/transport/keepalive.py).
 */
export const PING_INTERVAL_MS = 10_000;

/** How long a PING may go unanswered before the connection is given up. */
export const PING_TIMEOUT_MS = 5_000;

/** The path of a writer's stream (SessionService.Write). */
const WRITE_PATH = `/${SessionService.typeName}/${SessionService.method.write.name}`;

/** The streams open on one connection: writers', and every other. */
interface OpenStreams {
  writers: number;
  others: number;
}

/** What a writer tells its client's connections: whether it has work to wait for. */
export interface WriterHold {
  writerBusy(busy: boolean): void;
}

export class SessionManager extends Http2SessionManager implements WriterHold {
  private readonly guarded = new WeakSet<http2.Http2Session>();
  private readonly open = new Map<http2.Http2Session, OpenStreams>();
  /** Writers with work the caller may be waiting for. */
  private busyWriters = 0;

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options);
    const session = stream.session;
    if (session !== undefined) {
      if (!this.guarded.has(session)) {
        this.guarded.add(session);
        session.on("error", () => undefined); // reported to Connect, which fails the calls on it
      }
      this.track(session, stream, path === WRITE_PATH);
    }
    return stream;
  }

  writerBusy(busy: boolean): void {
    this.busyWriters += busy ? 1 : -1;
    for (const [session, streams] of this.open) this.hold(session, streams);
  }

  /** Count `stream` on `session` until it closes (after Connect's own count, which refs). */
  private track(session: http2.Http2Session, stream: http2.ClientHttp2Stream, writer: boolean): void {
    const streams = this.open.get(session) ?? { writers: 0, others: 0 };
    this.open.set(session, streams);
    if (writer) streams.writers += 1;
    else streams.others += 1;
    this.hold(session, streams);
    // Listened to after Connect's own listener, which unrefs a connection left without streams.
    stream.once("close", () => {
      if (writer) streams.writers -= 1;
      else streams.others -= 1;
      if (streams.writers + streams.others === 0) this.open.delete(session);
      else this.hold(session, streams);
    });
  }

  /** Whether `session` holds the process: any stream but a writer's, or a writer's with work. */
  private hold(session: http2.Http2Session, streams: OpenStreams): void {
    if (session.destroyed) return;
    if (streams.others > 0 || (streams.writers > 0 && this.busyWriters > 0)) session.ref();
    else session.unref();
  }
}
