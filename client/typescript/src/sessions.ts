/**
 * The HTTP/2 connections of a client: Connect's session manager, with every session it opens
 * given an `error` listener of this client's own.
 *
 * Node throws an `error` event nobody listens to. Connect listens while a session is its
 * current one, but its `abort()` (the client's `close()`) removes its listeners from a session
 * its keepalive has just destroyed ("PING timed out", a service that hangs) before Node emits
 * that session's `error`: the process crashed with "Unhandled 'error' event" right after the
 * caller had handled the failed call and closed the client. Connect still sees every error
 * while it listens; the listener here only keeps a late one from being thrown.
 */
import type * as http2 from "node:http2";
import { Http2SessionManager } from "@connectrpc/connect-node";

/**
 * The connection's keepalive: a PING after this long without a frame from the service, so a
 * service that hangs (its connections open, nothing answered) is noticed. The Python clients
 * use the same values (client/sessionlog/keepalive.py), and the service accepts PINGs half this
 * far apart (server/sessionlog_server/transport/keepalive.py).
 */
export const PING_INTERVAL_MS = 10_000;

/** How long a PING may go unanswered before the connection is given up. */
export const PING_TIMEOUT_MS = 5_000;

export class SessionManager extends Http2SessionManager {
  private readonly guarded = new WeakSet<http2.Http2Session>();

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options);
    const session = stream.session;
    if (session !== undefined && !this.guarded.has(session)) {
      this.guarded.add(session);
      session.on("error", () => undefined); // reported to Connect, which fails the calls on it
    }
    return stream;
  }
}
