/**
 * The sessionlog client for Node (gRPC over HTTP/2, via Connect).
 *
 * ```ts
 * const client = new SessionLogClient({ target: "127.0.0.1:50051" });
 * const writer = await client.writer("demo", { createIfMissing: true });
 * await writer.append([{ type: "turn/start", data: { turn: 1 } }]);
 * await writer.close();
 * for await (const event of client.readEvents("demo")) console.log(event.seq, event.type);
 * ```
 *
 * Idempotent calls (reads; appends, whose events always carry eventIds; creates and forks,
 * which always name their new session; lease grants and resumes, which always carry a
 * requestId; renewals) are retried on UNAVAILABLE with backoff; the others (header reports,
 * releases) are not, because a retry after an unknown outcome could act twice, or find what the
 * first did and fail for it. Every failure is thrown as a typed `SessionLogError` (errors.ts).
 */
import { create } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import { type CallOptions, type Client, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { namedSession, optionalSeq, pageSize, seq } from "./arguments.js";
import { headerJson } from "./headers.js";
import { batchToPb, checkWellFormed, eventFromPb, headerReportFromPb, jsonObjectField, leaseFromPb, num, optionalNum, parseArray, parseObject, resumeFromPb, scope, sessionFromPb } from "./convert.js";
import { SessionService } from "./gen/sessionlog/v1/session_service_pb.js";
import { PING_INTERVAL_MS, PING_TIMEOUT_MS, SessionManager } from "./sessions.js";
import { HistoryCopy } from "./history.js";
import type { JsonObject } from "./json.js";
import { clientClosed, toSessionLogError, Unavailable } from "./errors.js";
import { backoff, Budget, checkRetryPolicy, DEFAULT_RETRY, eachWithin, NO_RETRY, NoPage, type RetryPolicy, sleep, withBudget } from "./retry.js";
import { Subscription, type SubscribeOptions } from "./subscription.js";
import type {
  AppendResult,
  Event,
  ForkResult,
  HeaderReport,
  Lease,
  Message,
  ModelHistory,
  NewEvent,
  ProjectionOptions,
  RequestHeader,
  RequestView,
  ResumeInfo,
  SeqArgument,
  SessionInfo,
  Stats,
  SurfaceView,
  TranscriptRow,
} from "./types.js";
import { Acknowledged } from "./acknowledged.js";
import { LeaseWriter } from "./lease-writer.js";
import { UnansweredOpens } from "./unanswered.js";
import { Writer, type WriterOptions } from "./writer.js";

export const DEFAULT_TARGET = "127.0.0.1:50051";

export interface ClientOptions {
  /**
   * `host:port` (plain HTTP/2, or TLS when `ca` is given) or an `http://` / `https://` URL;
   * an empty one, or a port past 65535, is refused (TypeError), as by the Python clients.
   */
  target?: string;
  /**
   * Bearer token, sent as `authorization: Bearer <token>`. As with the Python client it is sent
   * over plaintext too (a loopback service); give `ca` or an `https://` target to encrypt it.
   */
  token?: string;
  /**
   * PEM CA certificate(s) to trust. With a `host:port` target it turns TLS on, as the Python
   * client's `ca_file` does; with an `http://` target the constructor refuses it (TypeError).
   */
  ca?: string | Buffer;
  /**
   * The budget of each unary call (each page of a listing or projection), in ms, 30 s by
   * default: its attempts and the backoff between them included; each attempt has what is left
   * as its gRPC deadline, and none starts once it is spent. For `readEvents` it bounds the wait
   * for each page of the stream, not the whole read (`NoPage`). Writer streams and
   * subscriptions have none (they reconnect by their own policy); 0 or less: no budget.
   */
  timeoutMs?: number;
  /** How idempotent calls are retried on UNAVAILABLE. */
  retry?: RetryPolicy;
}

/** A lease taken for unary appends, with the token that proves holding it. */
export interface HeldLease extends Lease {
  /** The next seq at the time the lease was granted. */
  nextSeq: number;
}

/** The highest TCP port. */
const MAX_PORT = 65535;

/**
 * A TypeError for an empty (or blank) target and for one whose port is past 65535, in the
 * Python clients' words (`check_target`): Node's URL parser refused both as "Invalid URL",
 * naming neither the address nor what was wrong with it. An empty target (an unset variable)
 * is a mistake, not a request for the default.
 */
function checkTarget(target: string): void {
  const address = target.replace(/^https?:\/\//i, "");
  if (!address.trim()) throw new TypeError(`the server address is empty: give HOST:PORT (e.g. ${DEFAULT_TARGET})`);
  const port = address.slice(address.lastIndexOf(":") + 1);
  if (/^\d+$/.test(port) && Number(port) > MAX_PORT) {
    throw new TypeError(`${JSON.stringify(target)}: the port must be from 1 to ${MAX_PORT} (HOST:PORT, e.g. ${DEFAULT_TARGET})`);
  }
}

/**
 * The URL Connect dials for `target`. A bare `host:port` is plaintext unless a CA is given:
 * then it is TLS, or a CA meant to protect the connection (and the token on it) would be
 * silently ignored. An explicit `http://` with a CA contradicts itself and is refused.
 */
function baseUrlOf(target: string, withCa: boolean): string {
  const scheme = /^(https?):\/\//i.exec(target)?.[1]?.toLowerCase();
  if (scheme === "http" && withCa) {
    throw new TypeError(`target ${target} is plaintext (http://), but a CA was given for TLS: use https:// or host:port`);
  }
  if (scheme !== undefined) return target;
  return `${withCa ? "https" : "http"}://${target}`;
}

/**
 * The fields AcquireLease and ResumeSession share, as the caller's options give them (the
 * requestId is added per call, once, so every retry of the call sends the same one).
 */
function grantRequest(sessionId: string, options: { writerId?: string; takeover?: boolean; leaseToken?: string }) {
  return { sessionId, writerId: options.writerId ?? "", takeover: options.takeover ?? false, leaseToken: options.leaseToken ?? "" };
}

export class SessionLogClient {
  readonly target: string;
  /** The generated Connect client, for calls this class does not wrap. */
  readonly rpc: Client<typeof SessionService>;
  private readonly sessions: SessionManager;
  /** The requestIds of writers' first opens that failed Unavailable, sent again by the next writer on their session. */
  private readonly unanswered = new UnansweredOpens();
  /** Aborted by `close()`: writers and subscriptions end with it instead of reconnecting. */
  private readonly closing = new AbortController();
  /** Where the unary appends' acknowledgements end, per lease token (`append`). */
  private readonly acknowledged = new Acknowledged();
  private readonly timeoutMs: number;
  private readonly retry: RetryPolicy;

  constructor(options: ClientOptions = {}) {
    this.target = options.target ?? DEFAULT_TARGET;
    checkTarget(this.target);
    const baseUrl = baseUrlOf(this.target, options.ca !== undefined);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    checkRetryPolicy(options.retry, "retry");
    this.retry = options.retry ?? DEFAULT_RETRY;
    const interceptors: Interceptor[] = [];
    const token = options.token;
    if (token) {
      interceptors.push((next) => (request) => {
        request.header.set("authorization", `Bearer ${token}`);
        return next(request);
      });
    }
    const nodeOptions = options.ca === undefined ? {} : { ca: options.ca };
    // Ping the connection while calls are open, so a service that hangs is noticed (sessions.ts).
    this.sessions = new SessionManager(baseUrl, { pingIntervalMs: PING_INTERVAL_MS, pingTimeoutMs: PING_TIMEOUT_MS }, nodeOptions);
    const transport = createGrpcTransport({ baseUrl, interceptors, sessionManager: this.sessions, nodeOptions });
    this.rpc = createClient(SessionService, transport);
  }

  /**
   * Close the connection: open writers and subscriptions end with it, lease writers stop their
   * heartbeats (their leases lapse), and every later call fails with `ClientClosed`.
   */
  close(): void {
    this.closing.abort(clientClosed()); // the reason a call waiting to try again fails with
    this.sessions.abort();
  }

  /** Whether `close()` was called. */
  get closed(): boolean {
    return this.closing.signal.aborted;
  }

  /**
   * Refuse a call (or a retry of one) once the client is closed: Connect would dial a new
   * connection for it, and a closed client's lease writers would go on renewing through it.
   */
  private checkOpen(): void {
    if (this.closed) throw clientClosed();
  }

  /**
   * One unary call, retried while its outcome is unknown when `idempotent`, within the client's
   * `timeoutMs` in all (`Budget`): each attempt has what is left of it as Connect's `timeoutMs`,
   * sent as the attempt's gRPC deadline (so the service knows when its client gives up) and,
   * once past, DEADLINE_EXCEEDED ("the operation timed out"), as the Python clients' timeout is.
   * An AbortSignal.timeout ended the call as CANCELLED instead and told the server nothing.
   */
  private unary<T>(call: (options: CallOptions) => Promise<T>, idempotent: boolean, ended?: AbortSignal): Promise<T> {
    const budget = new Budget(this.timeoutMs, idempotent ? this.retry : NO_RETRY);
    return withBudget(
      budget,
      (timeoutMs) => {
        this.checkOpen();
        return call({ timeoutMs });
      },
      this.closing.signal,
      ended,
    );
  }

  // --- sessions --------------------------------------------------------------------------

  /**
   * Create a session, named `sessionId` (a UUID when not given). It is retried on UNAVAILABLE:
   * asked for again before anything was written to it, the service answers with the session it
   * made, so a retry cannot create twice. Another session under the id (other cwd or metadata,
   * or written to since) is ALREADY_EXISTS (SESSION_EXISTS).
   */
  async createSession(sessionId?: string, options: { cwd?: string; metadata?: JsonObject } = {}): Promise<SessionInfo> {
    checkWellFormed(options.cwd, "UNSTORABLE_VALUE", "cwd");
    const request = {
      sessionId: namedSession(sessionId, "sessionId"),
      cwd: options.cwd ?? "",
      metadataJson: options.metadata ? jsonObjectField(options.metadata, "metadata", "DATA_NOT_OBJECT") : new Uint8Array(),
    };
    const response = await this.unary((callOptions) => this.rpc.createSession(request, callOptions), true);
    return sessionFromPb(response.session);
  }

  async getSession(sessionId: string): Promise<SessionInfo> {
    const response = await this.unary((callOptions) => this.rpc.getSession({ sessionId }, callOptions), true);
    return sessionFromPb(response.session);
  }

  /** Every session (or every fork of `parentSessionId`), fetching pages as needed. */
  async *listSessions(options: { parentSessionId?: string; pageSize?: number } = {}): AsyncGenerator<SessionInfo> {
    let pageToken = "";
    for (;;) {
      const request = { pageSize: pageSize(options.pageSize, 100), pageToken, parentSessionId: options.parentSessionId ?? "" };
      const response = await this.unary((callOptions) => this.rpc.listSessions(request, callOptions), true);
      for (const session of response.sessions) yield sessionFromPb(session);
      pageToken = response.nextPageToken;
      if (!pageToken) return;
    }
  }

  // --- writing ---------------------------------------------------------------------------

  /**
   * Open a streaming writer (it holds the lease until closed); ClientClosed once the client is.
   * An open that fails Unavailable may have been granted the lease after all: this client's
   * next writer on the session sends its requestId again, and so takes that lease (unanswered.ts).
   */
  async writer(sessionId: string, options: WriterOptions = {}): Promise<Writer> {
    this.checkOpen();
    const requestId = this.unanswered.requestId(sessionId);
    try {
      return await Writer.open(this.rpc, sessionId, { openRetry: this.retry, ...options }, this.closing.signal, this.sessions, this.timeoutMs, requestId);
    } catch (error) {
      if (error instanceof Unavailable) this.unanswered.unanswered(sessionId, requestId);
      throw error;
    }
  }

  /**
   * Take the lease for unary appends and keep it alive with heartbeats (a `LeaseWriter`).
   * With `resume: true` the session is resumed first (SPEC §8); see `leaseWriter.resumed`.
   */
  leaseWriter(sessionId: string, options: { writerId?: string; takeover?: boolean; resume?: boolean; heartbeatMs?: number } = {}): Promise<LeaseWriter> {
    return LeaseWriter.open(this, sessionId, options);
  }

  /**
   * Take the writer lease for unary appends (WRITER_HELD if another live writer has it).
   * `leaseToken`: the token of a live lease this caller still holds (takes it again at a new
   * epoch). Retried on UNAVAILABLE: the call carries a requestId made here once (a random UUID,
   * as secret as the token the service derives from it), so a retry whose first answer was lost
   * takes that lease again and gets its token, where it was WRITER_HELD until the lease lapsed.
   */
  async acquireLease(sessionId: string, options: { writerId?: string; takeover?: boolean; leaseToken?: string } = {}): Promise<HeldLease> {
    checkWellFormed(options.writerId, "BAD_WRITER_ID", "writerId");
    const request = { ...grantRequest(sessionId, options), requestId: randomUUID() };
    const response = await this.unary((callOptions) => this.rpc.acquireLease(request, callOptions), true);
    return { ...leaseFromPb(response.lease, response.leaseToken), nextSeq: num(response.nextSeq) };
  }

  /**
   * Append one batch under `lease` (all events commit together or none do). Every event gets
   * an eventId first, so the call is retried on UNAVAILABLE without appending twice.
   */
  async append(lease: Lease, events: Iterable<NewEvent>, options: { expectedNextSeq?: SeqArgument } = {}): Promise<AppendResult> {
    const token = lease.token ?? "";
    const request = {
      sessionId: lease.sessionId,
      leaseToken: token,
      events: batchToPb(events),
      expectedNextSeq: optionalSeq(options.expectedNextSeq, "expectedNextSeq"),
      // Where the acknowledgements under the lease end: a restored database refuses the writer.
      acknowledgedNextSeq: this.acknowledged.get(token),
    };
    const response = await this.unary((callOptions) => this.rpc.appendEvents(request, callOptions), true);
    this.acknowledged.saw(token, response.nextSeq);
    return { seqs: response.seqs.map(num), nextSeq: num(response.nextSeq) };
  }

  /**
   * Extend a lease (a heartbeat); OwnershipLost if it was taken over. `ended` (a lease writer's
   * close) ends a wait to try again at once, rejecting with its reason: the renewal is not sent
   * again after the writer gave the lease back.
   */
  async renewLease(lease: Lease, options: { ended?: AbortSignal } = {}): Promise<Lease> {
    const request = { sessionId: lease.sessionId, leaseToken: lease.token ?? "" };
    const response = await this.unary((callOptions) => this.rpc.renewLease(request, callOptions), true, options.ended);
    return leaseFromPb(response.lease, lease.token);
  }

  /**
   * Give a lease up so another writer can take it at once. Not retried, as in the Python
   * clients: a release done whose answer was lost, sent again, finds its lease gone and fails
   * with OWNERSHIP_LOST, as if it had been taken over; it fails as Unavailable (outcome
   * unknown) instead, and a lease not given back lapses.
   */
  async releaseLease(lease: Lease): Promise<void> {
    const request = { sessionId: lease.sessionId, leaseToken: lease.token ?? "" };
    await this.unary((callOptions) => this.rpc.releaseLease(request, callOptions), false);
    this.acknowledged.forget(request.leaseToken);
  }

  /** Report the request header about to be used; the service decides whether to log it. */
  async reportHeader(lease: Lease, header: RequestHeader | JsonObject): Promise<HeaderReport> {
    const request = { sessionId: lease.sessionId, leaseToken: lease.token ?? "", headerJson: headerJson(header) };
    const response = await this.unary((callOptions) => this.rpc.reportRequestHeader(request, callOptions), false);
    return headerReportFromPb(response);
  }

  // --- lifecycle -------------------------------------------------------------------------

  /**
   * Resume a session for unary appends: lease, repair of an open turn, seed boundary.
   * `leaseToken`: the token of a live lease this caller still holds (takes it again at a new
   * epoch, as `acquireLease`'s does; without it, that lease is WRITER_HELD until it lapses).
   * Retried on UNAVAILABLE as `acquireLease` is (a requestId made once): a retry whose first
   * answer was lost gets that answer, its repairs and seed boundary not written twice.
   */
  async resume(sessionId: string, options: { writerId?: string; takeover?: boolean; leaseToken?: string } = {}): Promise<ResumeInfo> {
    checkWellFormed(options.writerId, "BAD_WRITER_ID", "writerId");
    const request = { ...grantRequest(sessionId, options), requestId: randomUUID() };
    return resumeFromPb(await this.unary((callOptions) => this.rpc.resumeSession(request, callOptions), true));
  }

  /**
   * Fork `sessionId` after `atSeq` (inclusive); the prefix is shared, not copied. The fork is
   * named (a UUID when `newSessionId` is not given) and retried on UNAVAILABLE: asked for again,
   * the service answers with the fork it made, so a retry cannot fork twice.
   */
  async fork(sessionId: string, atSeq: SeqArgument, newSessionId?: string): Promise<ForkResult> {
    const request = { sessionId, atSeq: seq(atSeq, "atSeq"), newSessionId: namedSession(newSessionId, "newSessionId") };
    const response = await this.unary((callOptions) => this.rpc.forkSession(request, callOptions), true);
    return { session: sessionFromPb(response.session), repairSeqs: response.repairSeqs.map(num) };
  }

  // --- projections -----------------------------------------------------------------------

  /** The messages the model sees, in order, at the head or at `atSeq` (fetched page by page). */
  async modelHistory(sessionId: string, options: ProjectionOptions & { pageSize?: number } = {}): Promise<ModelHistory> {
    const messages: Message[] = [];
    let pageToken = "";
    do {
      const request = { scope: scope(sessionId, options), pageSize: pageSize(options.pageSize, 0), pageToken };
      const response = await this.unary((callOptions) => this.rpc.getModelHistory(request, callOptions), true);
      for (const message of parseArray(response.messagesJson, "messages")) messages.push(message as Message);
      pageToken = response.nextPageToken;
    } while (pageToken);
    return messages;
  }

  /** An empty local copy of the model history; `refreshHistory` keeps it current. */
  historyCopy(sessionId: string): HistoryCopy {
    return new HistoryCopy(sessionId);
  }

  /** Bring `copy` up to date, fetching only the messages it lacks or a replace changed. */
  async refreshHistory(copy: HistoryCopy): Promise<Message[]> {
    do {
      const request = copy.request();
      copy.apply(await this.unary((callOptions) => this.rpc.getModelHistory(request, callOptions), true));
    } while (!copy.complete);
    return copy.messages;
  }

  /** The transcript rows for people (replaced events stay, marked), fetched page by page. */
  async transcript(sessionId: string, options: ProjectionOptions & { pageSize?: number } = {}): Promise<TranscriptRow[]> {
    const rows: TranscriptRow[] = [];
    let pageToken = "";
    do {
      const request = { scope: scope(sessionId, options), pageSize: pageSize(options.pageSize, 0), pageToken };
      const response = await this.unary((callOptions) => this.rpc.getTranscript(request, callOptions), true);
      for (const row of parseArray(response.rowsJson, "rows")) rows.push(row as unknown as TranscriptRow);
      pageToken = response.nextPageToken;
    } while (pageToken);
    return rows;
  }

  /** The exact request of that prefix, its canonical bytes and their sha256. */
  async request(sessionId: string, options: ProjectionOptions = {}): Promise<RequestView> {
    const response = await this.unary((callOptions) => this.rpc.getRequest({ scope: scope(sessionId, options) }, callOptions), true);
    return {
      request: parseObject(response.requestJson, "request") as RequestView["request"],
      requestJson: response.requestJson,
      sha256: response.sha256,
      headerSeq: optionalNum(response.headerSeq),
      atSeq: optionalNum(response.atSeq),
    };
  }

  /** Counts, tokens and cost over every event that carries usage. */
  async stats(sessionId: string, options: ProjectionOptions = {}): Promise<Stats> {
    const response = await this.unary((callOptions) => this.rpc.getStats({ scope: scope(sessionId, options) }, callOptions), true);
    return parseObject(response.statsJson, "stats") as Stats;
  }

  /** The surface nodes, replace generation and the seq they cover (null for a session without events; for debugging). */
  async surface(sessionId: string, options: ProjectionOptions = {}): Promise<SurfaceView> {
    const response = await this.unary((callOptions) => this.rpc.getSurface({ scope: scope(sessionId, options) }, callOptions), true);
    return { nodes: response.nodes.map(num), replaceGeneration: num(response.replaceGeneration), atSeq: optionalNum(response.atSeq) };
  }

  // --- reading ---------------------------------------------------------------------------

  /**
   * Events from `fromSeq` to `toSeq` (inclusive), in seq order; a broken read resumes where it
   * stopped. None from the session's next seq; from past it, OutOfRange (FROM_SEQ_PAST_HEAD). The client's `timeoutMs` bounds the wait for each page (the first, and each one
   * after), not the whole read, which may take long for a long session: a read that gets no page
   * within it throws Unavailable (TRANSPORT_ERROR, `NoPage`), after the events of the pages
   * before. The time the caller spends between events is not counted.
   */
  async *readEvents(sessionId: string, options: { fromSeq?: SeqArgument; toSeq?: SeqArgument; pageSize?: number } = {}): AsyncGenerator<Event> {
    let next = optionalSeq(options.fromSeq, "fromSeq") ?? 0n;
    const toSeq = optionalSeq(options.toSeq, "toSeq");
    const size = pageSize(options.pageSize, 500);
    let failures = 0;
    for (;;) {
      this.checkOpen();
      const request = { sessionId, fromSeq: next, toSeq, pageSize: size };
      try {
        for await (const response of eachWithin((signal) => this.rpc.readEvents(request, { signal }), this.timeoutMs)) {
          for (const message of response.events) {
            const event = eventFromPb(message);
            next = BigInt(event.seq) + 1n;
            failures = 0;
            yield event;
          }
        }
        return;
      } catch (raw) {
        if (raw instanceof NoPage) throw raw;
        const error = toSessionLogError(raw);
        failures += 1;
        if (!(error instanceof Unavailable) || failures >= this.retry.attempts) throw error;
        await sleep(backoff(this.retry, failures), this.closing.signal); // the close ends the wait
      }
    }
  }

  /**
   * Replay from `fromSeq`, one CaughtUp marker, then live events until the signal aborts or
   * the loop breaks. After a cut (the service restarting, a slow subscriber cut off) it
   * resubscribes from the seq after the last event it delivered. ClientClosed (thrown) when
   * the client is closed already; `client.close()` while it runs ends it quietly, as its
   * `cancel()` does (the Python clients raise RuntimeError there instead).
   */
  subscribe(sessionId: string, options: SubscribeOptions = {}): Subscription {
    checkRetryPolicy(options.retry, "retry");
    this.checkOpen(); // a closed client's subscription would end at once, quietly, as if cancelled
    return new Subscription(this.rpc, sessionId, options, this.closing.signal);
  }
}
