/**
 * The streaming writer: holds the session's lease while open, pipelines batches with an
 * in-flight limit, and after a transient failure, or a stream the service ended though the
 * writer had not closed it, reconnects and re-sends every batch not yet acknowledged. Its first
 * open is tried again after a transient failure as the client retries a call (`openRetry`),
 * each attempt with the open's one `requestId`, so an attempt whose answer was lost leaves no
 * lease behind to refuse the next.
 *
 * Re-sending is safe because every event carries an eventId (one is generated when the
 * caller gives none): the service answers a retried event with its original seq. Ownership
 * loss (ABORTED, or a reconnect that finds another writer was in between) is never retried:
 * every pending and later append fails with `OwnershipLost`, and the caller must reopen. Any
 * other error the service reports ends the writer too (the service ends the stream with it);
 * `close()`, `cancel()` and the client's `close()` end it on purpose (`WriterClosed`).
 */
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { type Client, Code } from "@connectrpc/connect";
import { Channel } from "./channel.js";
import { optionalSeq } from "./arguments.js";
import { batchToPb, checkWellFormed, headerReportFromPb, leaseFromPb, nextSeqAfterHeader, num, resumeFromPb } from "./convert.js";
import { type ErrorFields, NotFound, OwnershipLost, type SessionLogError, toSessionLogError, typedError, Unavailable, WriterClosed, WriterHeld, writerClosed } from "./errors.js";
import type { SessionService, WriteRequest, WriteResponse } from "./gen/sessionlog/v1/session_service_pb.js";
import { WriteRequestSchema } from "./gen/sessionlog/v1/session_service_pb.js";
import { headerJson as checkedHeaderJson } from "./headers.js";
import type { JsonObject } from "./json.js";
import { backoff, Budget, checkRetryPolicy, DEFAULT_RETRY, NoOpenAnswer, type RetryPolicy, sleep } from "./retry.js";
import type { WriterHold } from "./sessions.js";
import type { AppendResult, HeaderReport, Lease, NewEvent, RequestHeader, ResumeInfo, SeqArgument } from "./types.js";

export interface WriterOptions {
  /** The writer's id (a label); the service generates one when absent. */
  writerId?: string;
  /** Take the lease even if another writer holds it (fencing that writer out). */
  takeover?: boolean;
  /** Create the session if it does not exist. */
  createIfMissing?: boolean;
  /** Resume first (SPEC §8): repair an open turn, mark the seed boundary; see `writer.resumed`. */
  resume?: boolean;
  /**
   * The token of a live lease already held (`acquireLease`'s or `resume`'s, or the one
   * `sessionlog resume --keep` printed): the writer takes that lease again, at a new epoch,
   * instead of finding the session held by it (WRITER_HELD); it gives it back when closed.
   */
  leaseToken?: string;
  /** At most this many batches (and header reports) unacknowledged on the wire; later ones wait. */
  maxInFlight?: number;
  /**
   * How reconnects back off, and how many are tried before the writer gives up (about a minute
   * by default: long enough to ride out a service restart).
   */
  reconnect?: RetryPolicy;
  /**
   * How the first open is tried again after UNAVAILABLE, or a stream that ended before the
   * service answered, `attempts` times in all (`attempts: 1`: once, not again). By default the
   * client's `retry` policy, as every call safe to retry: a writer pointed at a service that is
   * down is told so after the few seconds `createSession` takes, not the reconnect minute.
   */
  openRetry?: RetryPolicy;
}

/**
 * What the service's answer to a writer's first `open` throws, worded for its caller: a session
 * that is not there (SESSION_NOT_FOUND, without `createIfMissing`) names the option that creates
 * it, which the service's message, written for every call, does not (as the Python writers do).
 */
function openRefused(error: unknown, createIfMissing: boolean): unknown {
  if (!(error instanceof NotFound) || error.reason !== "SESSION_NOT_FOUND" || createIfMissing) return error;
  return new NotFound({
    reason: error.reason,
    message: `${error.message}; open the writer with createIfMissing: true to create it`,
    code: error.code,
    metadata: { ...error.metadata },
    fieldViolations: [...error.fieldViolations],
    cause: error.cause,
  });
}

/** Give every event an eventId, so a retry after an unknown outcome cannot append twice. */
export function withEventIds(events: Iterable<NewEvent>): NewEvent[] {
  return Array.from(events, (event) => (event.eventId !== undefined ? event : { ...event, eventId: randomUUID() }));
}

/**
 * A call's failure as its promise, marked handled as a pending batch's is: a caller that
 * appends without awaiting must not have its process ended by a refusal made here (a bad event,
 * a closed writer) when one the service makes never does. The caller who awaits still gets it.
 */
function refusedCall<T>(error: unknown): Promise<T> {
  const promise = Promise.reject(error) as Promise<T>;
  promise.catch(() => undefined);
  return promise;
}

interface Pending {
  id: bigint;
  request: WriteRequest;
  /** What the caller got; it is marked handled, so a failure nobody awaits does not crash. */
  promise: Promise<unknown>;
  settle: (ack: AckResult) => void;
  reject: (error: unknown) => void;
}

type AckResult = { kind: "batch"; result: AppendResult } | { kind: "header"; result: HeaderReport };

/**
 * Whether the lease a reconnect got is not the one this writer held. The service keeps the
 * holder's token when the holder takes its lease again; a fresh token means the lease passed to
 * another writer (and lapsed) meanwhile. Without a token only the epoch tells: a jump past the
 * next one means another writer came in between.
 */
function lostMeanwhile(held: Lease, granted: Lease): boolean {
  if (held.token) return granted.token !== held.token;
  return granted.epoch !== held.epoch + 1;
}

/** A reconnect refused because another live writer holds the lease: this writer lost it. */
function lostTo(error: WriterHeld, sessionId: string): OwnershipLost {
  const metadata: Record<string, string> = { session_id: sessionId };
  if (error.metadata.holder !== undefined) metadata.holder = error.metadata.holder;
  if (error.metadata.epoch !== undefined) metadata.epoch = error.metadata.epoch;
  return new OwnershipLost({ reason: "OWNERSHIP_LOST", message: `${error.message}; this writer lost its lease`, code: Code.Aborted, metadata, cause: error });
}

/**
 * An error of `cause`'s class, reason and code for a call the writer did not carry out because
 * `cause` had ended it; the message says so and names it, and `cause` is the original (whose
 * metadata describes the call it was about, not this one).
 */
function closedBy(cause: SessionLogError, what: string): SessionLogError {
  const Class = cause.constructor as new (fields: ErrorFields) => SessionLogError;
  const message = `the writer was closed by an earlier error (${cause.reason}: ${cause.message}); ${what}`;
  return new Class({ reason: cause.reason, message, code: cause.code, cause });
}

/**
 * `maxInFlight` is a positive integer: with 0 (or a negative number, or NaN) no batch would ever
 * get a slot on the wire, and every append would wait forever.
 */
function checkMaxInFlight(value: number | undefined): void {
  if (value !== undefined && !(Number.isSafeInteger(value) && value > 0)) {
    throw new RangeError(`maxInFlight must be a positive integer, got ${value}`);
  }
}

const DEFAULT_RECONNECT: RetryPolicy = { attempts: 120, initialDelayMs: 50, maxDelayMs: 500 };

/**
 * How long `close()` waits for the service to end the stream once it was asked to (everything
 * acknowledged by then): a busy or hung service does not hold the close up, the stream is
 * dropped and the lease lapses (the asyncio writer's CLOSE_WITHIN_S).
 */
export const CLOSE_WITHIN_MS = 5_000;

/** A stream that stayed open this long before it broke is no failed reconnect (`recover`). */
const STREAM_STABLE_MS = 30_000;

export class Writer {
  readonly sessionId: string;
  /** The lease the stream holds (renewed by the service while the stream is open). */
  lease!: Lease;
  /** The seq the next appended event will get, as of the latest acknowledgement. */
  nextSeq = 0;
  /** Set when the writer was opened with `resume: true`. */
  resumed: ResumeInfo | null = null;
  /**
   * How many times the stream broke and the writer reconnected and re-sent (the Python
   * writers' `reconnects`). A first open tried again is no reconnect: it stays 0.
   */
  reconnects = 0;

  private readonly rpc: Client<typeof SessionService>;
  private readonly options: Required<Pick<WriterOptions, "createIfMissing" | "maxInFlight" | "reconnect">> & WriterOptions;
  private writerId: string;
  /**
   * What makes the first open safe to retry (AIP-155, as `acquireLease`'s `requestId`): one per
   * writer (or an unanswered open's, unanswered.ts) and sent by every attempt of its first open,
   * so an attempt whose `opened` was lost is answered by the next with that lease, under the
   * same token, a resume written once. As secret as the token derived from it; reconnects send
   * none (`connect`).
   */
  private readonly requestId: string;
  private nextBatchId = 1n;
  /** Sent and not yet acknowledged, in send order. */
  private readonly inFlight: Pending[] = [];
  /** Waiting for an in-flight slot, in order. */
  private readonly backlog: Pending[] = [];
  private channel: Channel<WriteRequest> | null = null;
  private abort: AbortController | null = null;
  private reading: Promise<void> = Promise.resolve();
  private failure: SessionLogError | null = null;
  private closing = false;
  /** Aborted when the writer fails for good: wakes a reconnect waiting to try again. */
  private readonly ended = new AbortController();
  /** The client's closing signal, listened to while the writer lives. */
  private readonly clientClosed: AbortSignal | undefined;
  private readonly onClientClosed = (): void => this.endNow(writerClosed("the client was closed, and its writers with it"));
  /** Told whether this writer has work the caller may wait for, which holds the process alive. */
  private readonly hold: WriterHold | undefined;
  private opening = true;
  /** Reconnect attempts spent since the writer last made progress (`recover`). */
  private reconnectAttempts = 0;
  /** When the stream last opened (`performance.now()`). */
  private openedAt = 0;
  private closeCalls = 0;
  private held = false;
  /** The client's: how long an open waits for its answer, all its attempts together (<= 0: no bound). */
  private readonly timeoutMs: number;

  private constructor(rpc: Client<typeof SessionService>, sessionId: string, options: WriterOptions, clientClosed: AbortSignal | undefined, hold: WriterHold | undefined, timeoutMs: number, requestId: string) {
    this.rpc = rpc;
    this.sessionId = sessionId;
    this.requestId = requestId;
    this.timeoutMs = timeoutMs;
    this.writerId = options.writerId ?? "";
    this.options = { createIfMissing: false, maxInFlight: 256, reconnect: DEFAULT_RECONNECT, ...options };
    this.clientClosed = clientClosed;
    this.hold = hold;
  }

  /**
   * Open the stream and take the lease (use `SessionLogClient.writer`). The writer ends when
   * `clientClosed` aborts: its pending and later calls fail with WriterClosed. `hold` is told
   * while the writer has work (opening, batches unacknowledged, closing): an idle writer's
   * stream keeps no process alive, so one dropped without `close()` lets the process exit.
   * Each open waits at most `timeoutMs` (the client's) for the service's answer; the first
   * open's attempts share it, as a unary call's do (`Budget`). `requestId` is what they send
   * (a client passes an unanswered open's, unanswered.ts).
   */
  static async open(rpc: Client<typeof SessionService>, sessionId: string, options: WriterOptions = {}, clientClosed?: AbortSignal, hold?: WriterHold, timeoutMs = 0, requestId: string = randomUUID()): Promise<Writer> {
    if (clientClosed?.aborted) throw writerClosed("the client is closed");
    checkMaxInFlight(options.maxInFlight);
    checkRetryPolicy(options.reconnect, "reconnect");
    checkRetryPolicy(options.openRetry, "openRetry");
    checkWellFormed(options.writerId, "BAD_WRITER_ID", "writerId");
    const writer = new Writer(rpc, sessionId, options, clientClosed, hold, timeoutMs, requestId);
    clientClosed?.addEventListener("abort", writer.onClientClosed, { once: true });
    writer.updateHold();
    try {
      await writer.openFirst(options.takeover ?? false, options.resume ?? false);
    } catch (error) {
      writer.detach();
      throw clientClosed?.aborted ? writerClosed("the client was closed while the writer opened") : error;
    } finally {
      writer.opening = false;
      writer.updateHold();
    }
    return writer;
  }

  // --- public ----------------------------------------------------------------------------

  /**
   * Send a batch (atomic: all events commit together or none do). Returns at once; the promise
   * resolves with the batch's seqs once it is durable. Batches are sent in call order.
   */
  append(events: Iterable<NewEvent>, options: { expectedNextSeq?: SeqArgument } = {}): Promise<AppendResult> {
    let batch: ReturnType<typeof batchToPb>;
    let expectedNextSeq: bigint | undefined;
    try {
      batch = batchToPb(events);
      expectedNextSeq = optionalSeq(options.expectedNextSeq, "expectedNextSeq");
    } catch (error) {
      return refusedCall(error); // a bad event is this call's failure, not the writer's
    }
    return this.enqueue((id) => create(WriteRequestSchema, { kind: { case: "batch", value: { batchId: id, events: batch, expectedNextSeq } } })) as Promise<AppendResult>;
  }

  /** Report the request header about to be used, in order with the batches sent so far. */
  reportHeader(header: RequestHeader | JsonObject): Promise<HeaderReport> {
    let headerJson: Uint8Array;
    try {
      headerJson = checkedHeaderJson(header);
    } catch (error) {
      return refusedCall(error); // a bad header is this call's failure, not the writer's
    }
    return this.enqueue((id) => create(WriteRequestSchema, { kind: { case: "header", value: { batchId: id, headerJson } } })) as Promise<HeaderReport>;
  }

  /**
   * Wait until everything sent so far is durable (rejects with the first failure). Once the
   * writer has ended, rejects with an error naming what ended it.
   */
  async flush(): Promise<void> {
    if (this.failure !== null) throw this.afterEnd();
    await Promise.all([...this.inFlight, ...this.backlog].map((p) => p.promise));
  }

  /** Flush, end the stream and give the lease back. */
  async close(): Promise<void> {
    this.closeCalls += 1;
    this.updateHold();
    try {
      if (this.failure === null) await this.flush();
    } finally {
      this.closing = true;
      this.endStream();
      const giveUp = setTimeout(() => this.abort?.abort(), CLOSE_WITHIN_MS);
      try {
        await this.settled();
      } finally {
        clearTimeout(giveUp);
        this.detach();
        this.closeCalls -= 1;
        this.updateHold();
      }
    }
  }

  /**
   * Ask the service to end the stream on purpose: it acknowledges what is pending and releases
   * the lease. (A stream that just ends is taken for a dead writer's, its lease left to lapse.)
   */
  private endStream(): void {
    this.channel?.push(create(WriteRequestSchema, { kind: { case: "close", value: {} } }));
    this.channel?.end();
  }

  /** Wait for the stream's reader, and for the reader of any stream a reconnect opened meanwhile. */
  private async settled(): Promise<void> {
    for (let reading = this.reading; ; reading = this.reading) {
      await reading;
      if (reading === this.reading) return;
    }
  }

  /** Drop the stream at once, without flushing: pending and later calls fail with WriterClosed. */
  cancel(): void {
    this.endNow(writerClosed("the writer was cancelled"));
  }

  /** End the writer now, on purpose: fail what is pending with `error`, drop the stream, reconnect no more. */
  private endNow(error: SessionLogError): void {
    this.closing = true;
    this.fail(error);
    this.abort?.abort();
  }

  /** Stop listening to the client's closing: the writer has ended (a client outlives many writers). */
  private detach(): void {
    this.clientClosed?.removeEventListener("abort", this.onClientClosed);
  }

  // --- sending ---------------------------------------------------------------------------

  private enqueue(build: (id: bigint) => WriteRequest): Promise<unknown> {
    if (this.failure !== null) return refusedCall(this.afterEnd());
    if (this.closing) return refusedCall(writerClosed("the writer is closed"));
    // A close under way flushes what came before it, then ends the stream: a call made
    // meanwhile, queued past `maxInFlight`, was never sent nor answered.
    if (this.closeCalls > 0) return refusedCall(writerClosed("the writer is closing"));
    const id = this.nextBatchId++;
    let settle!: (ack: AckResult) => void;
    let reject!: (error: unknown) => void;
    const promise = new Promise<unknown>((resolve, fail) => {
      settle = (ack) => resolve(ack.result);
      reject = fail;
    });
    promise.catch(() => undefined);
    const pending: Pending = { id, request: build(id), promise, settle, reject };
    if (this.inFlight.length < this.options.maxInFlight) this.send(pending);
    else this.backlog.push(pending);
    this.updateHold();
    return promise;
  }

  private send(pending: Pending): void {
    this.inFlight.push(pending);
    this.channel?.push(pending.request);
  }

  private acknowledge(batchId: bigint, ack: AckResult): void {
    const index = this.inFlight.findIndex((p) => p.id === batchId);
    if (index < 0) return; // an acknowledgement of a batch already settled before a reconnect
    const [pending] = this.inFlight.splice(index, 1);
    this.reconnectAttempts = 0; // progress: a break after this starts its attempts over
    // The log only grows: a retry's acknowledgement says where the durable log ended then.
    if (ack.kind === "batch") this.nextSeq = Math.max(this.nextSeq, ack.result.nextSeq);
    // A logged header is an event too: a reconnect says the acknowledgements reached past it.
    else this.nextSeq = nextSeqAfterHeader(this.nextSeq, ack.result);
    pending!.settle(ack);
    while (this.backlog.length > 0 && this.inFlight.length < this.options.maxInFlight) this.send(this.backlog.shift()!);
    this.updateHold();
  }

  /**
   * The writer ends for good with `error`: every pending call fails with it (a cut that could
   * not be mended, ownership lost on reconnecting, an end on purpose: each is all of theirs).
   */
  private fail(error: SessionLogError): void {
    for (const pending of this.finish(error)) pending.reject(error);
  }

  /**
   * The service refused the first pending batch (or header) and ended the stream, as it does on
   * every error it reports: that one fails with `error`; those sent after it were never
   * answered, and fail with an error saying so, not with one describing another call's events.
   */
  private refused(error: SessionLogError): void {
    const [first, ...rest] = this.finish(error);
    first?.reject(error);
    for (const pending of rest) pending.reject(closedBy(error, "this batch was not acknowledged"));
  }

  /** Record what ended the writer; returns the pending calls, in order, taken off its queues. */
  private finish(error: SessionLogError): Pending[] {
    if (this.failure === null) this.failure = error;
    this.ended.abort();
    this.detach();
    const pending = [...this.inFlight.splice(0), ...this.backlog.splice(0)];
    this.updateHold();
    return pending;
  }

  /**
   * Tell `hold` when the writer starts or stops having work the caller may wait for: opening,
   * batches unacknowledged (reconnecting included), closing. Idle, its stream holds no process.
   */
  private updateHold(): void {
    const busy = this.opening || this.closeCalls > 0 || !this.idle();
    if (busy === this.held) return;
    this.held = busy;
    this.hold?.writerBusy(busy);
  }

  /** What a call fails with once the writer has ended: an error naming what ended it. */
  private afterEnd(): SessionLogError {
    const failure = this.failure!;
    return failure instanceof WriterClosed ? failure : closedBy(failure, "nothing of this call was sent");
  }

  // --- the stream ------------------------------------------------------------------------

  /**
   * The first open, tried again after a transient failure (UNAVAILABLE, a stream that ended
   * before `opened`) by the `openRetry` policy (the client's `retry`); every attempt sends the
   * one `requestId`. Another refusal (WRITER_HELD, SESSION_NOT_FOUND, ...) is thrown at once.
   */
  private async openFirst(takeover: boolean, resume: boolean): Promise<void> {
    const budget = new Budget(this.timeoutMs, this.options.openRetry ?? DEFAULT_RETRY); // all attempts within the timeout
    for (;;) {
      let delay: number;
      try {
        return await this.connect(takeover, resume, budget.nextAttempt());
      } catch (error) {
        if (this.failure !== null) throw error;
        // The attempt had what was left of the budget, so it is spent: told once, with the whole
        // timeoutMs (as a spent budget it named it twice, the second time as the attempt's share).
        if (error instanceof NoOpenAnswer) throw new NoOpenAnswer(this.timeoutMs);
        delay = budget.waitAfter(error); // throws what is not to be tried again
      }
      await sleep(delay, this.ended.signal); // the client's close ends the wait
    }
  }

  /** One stream, open once the service answers `opened` within `timeoutMs` (else `NoOpenAnswer`). */
  private async connect(takeover: boolean, resume: boolean, timeoutMs: number | undefined): Promise<void> {
    const channel = new Channel<WriteRequest>();
    const abort = new AbortController();
    channel.push(
      create(WriteRequestSchema, {
        kind: {
          case: "open",
          // A reconnect presents the token of the lease it held, so it takes that lease again,
          // and the seq its acknowledgements reached: the header reports it re-sends are then
          // answered from the log (decided again, a pending change A -> B -> A logged B and A twice).
          // The first open presents the token of a lease the caller holds already, if given, and
          // its requestId, again on each retry of it. A reconnect sends none: its token was
          // derived from the id, so a lease that passed to another writer and lapsed would come
          // back under it again, where a fresh token tells the loss (`lostMeanwhile`).
          value: {
            sessionId: this.sessionId,
            writerId: this.writerId,
            takeover,
            createIfMissing: this.options.createIfMissing,
            resume,
            leaseToken: this.lease?.token ?? this.options.leaseToken ?? "",
            acknowledgedNextSeq: this.lease === undefined ? undefined : BigInt(this.nextSeq),
            requestId: this.lease === undefined ? this.requestId : "",
          },
        },
      }),
    );
    const responses = this.rpc.write(channel, { signal: abort.signal })[Symbol.asyncIterator]();
    let first: IteratorResult<WriteResponse>;
    let givenUp = false;
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => ((givenUp = true), abort.abort()), timeoutMs);
    try {
      first = await responses.next();
    } catch (raw) {
      abort.abort();
      if (givenUp) throw new NoOpenAnswer(timeoutMs!);
      const error = toSessionLogError(raw);
      throw this.lease === undefined ? openRefused(error, this.options.createIfMissing) : error;
    } finally {
      clearTimeout(timer);
    }
    if (givenUp) throw new NoOpenAnswer(timeoutMs!); // answered as the time ran out: given up with it
    if (first.done || first.value.kind.case !== "opened") {
      abort.abort();
      throw new Unavailable({ reason: "STREAM_ENDED", message: "the server closed the writer stream while opening", code: Code.Unavailable });
    }
    const opened = first.value.kind.value;
    const lease = leaseFromPb(opened.lease, opened.leaseToken);
    if (this.lease !== undefined && lostMeanwhile(this.lease, lease)) {
      // Another writer held the session between our two connections: what it wrote is not
      // ours to continue from. Give the lease back and stop; the caller decides what to do.
      channel.push(create(WriteRequestSchema, { kind: { case: "close", value: {} } }));
      channel.end();
      throw new OwnershipLost({
        reason: "OWNERSHIP_LOST",
        message: `session ${this.sessionId} had another writer (epoch ${this.lease.epoch} -> ${lease.epoch}) while this writer reconnected`,
        code: Code.Aborted,
        metadata: { session_id: this.sessionId, epoch: String(lease.epoch) },
      });
    }
    if (this.lease !== undefined) this.reconnects += 1;
    this.openedAt = performance.now();
    this.lease = lease;
    this.writerId = lease.writerId;
    this.nextSeq = num(opened.nextSeq);
    if (opened.resumed !== undefined) this.resumed = resumeFromPb(opened.resumed);
    if (this.failure !== null) {
      // Ended (cancelled, its client closed) while this reconnect waited for its answer.
      channel.push(create(WriteRequestSchema, { kind: { case: "close", value: {} } }));
      channel.end();
      throw this.failure;
    }
    // Only now, with the lease known to be this writer's, is anything sent: what a reconnect
    // re-sends, and what was appended while it waited (an earlier stream's channel has ended
    // and dropped it). Nothing can be appended between these lines, so none is lost.
    for (const pending of this.inFlight) channel.push(pending.request);
    this.channel = channel;
    this.abort = abort;
    this.reading = this.read(responses);
  }

  /** Settle what the stream acknowledges until it ends; then, unless this writer closed it, recover. */
  private async read(responses: AsyncIterator<WriteResponse>): Promise<void> {
    let cut: SessionLogError;
    try {
      for (let next = await responses.next(); !next.done; next = await responses.next()) this.answer(next.value);
      if (this.closing) return; // the end of our own `close`
      // The service ended the stream cleanly, though this writer did not close it (older
      // services did so on a graceful stop, idle or not): a cut like any other. Left alone, later
      // batches would go to a dead stream and never be answered.
      cut = new Unavailable({ reason: "STREAM_ENDED", message: "the server ended the writer stream", code: Code.Unavailable });
    } catch (raw) {
      if (this.closing && this.idle()) return;
      cut = typedError(raw);
    }
    await this.recover(cut);
  }

  private answer(response: WriteResponse): void {
    const kind = response.kind;
    if (kind.case === "ack") this.acknowledge(kind.value.batchId, { kind: "batch", result: { seqs: kind.value.seqs.map(num), nextSeq: num(kind.value.nextSeq) } });
    else if (kind.case === "acks") {
      for (const ack of kind.value.acks) this.acknowledge(ack.batchId, { kind: "batch", result: { seqs: ack.seqs.map(num), nextSeq: num(ack.nextSeq) } });
    } else if (kind.case === "headerAck") this.acknowledge(kind.value.batchId, { kind: "header", result: headerReportFromPb(kind.value.result) });
  }

  /** Nothing sent or waiting is unacknowledged. */
  private idle(): boolean {
    return this.inFlight.length === 0 && this.backlog.length === 0;
  }

  /** After the stream broke: reconnect and re-send if the failure is transient, else fail. */
  private async recover(error: SessionLogError): Promise<void> {
    this.abort?.abort();
    if (!(error instanceof Unavailable)) return this.refused(error);
    if (this.closing) return this.fail(error);
    const policy = this.options.reconnect;
    let last: SessionLogError = error;
    // The attempts count from the last progress (an acknowledgement, or a stream open
    // STREAM_STABLE_MS), not from each break: a stream that opened and broke again at once
    // was tried again without end, each open renewing them (the Python writers' `Recovery`).
    if (performance.now() - this.openedAt >= STREAM_STABLE_MS) this.reconnectAttempts = 0;
    while (this.reconnectAttempts < policy.attempts) {
      const attempt = ++this.reconnectAttempts;
      try {
        await sleep(backoff(policy, attempt), this.ended.signal);
      } catch {
        return; // the writer ended while waiting
      }
      if (this.failure !== null) return;
      if (this.closing && this.idle()) return; // closed meanwhile with nothing left to send: no stream needed
      try {
        // a reconnect continues the same lifecycle: no second resume
        await this.connect(false, false, this.timeoutMs > 0 ? this.timeoutMs : undefined);
        if (this.closing) this.endStream(); // `close` came while reconnecting: this stream ends as the last would have
        return;
      } catch (raw) {
        last = typedError(raw);
        if (last instanceof WriterHeld) last = lostTo(last, this.sessionId); // another live holder
        if (!(last instanceof Unavailable)) break;
      }
    }
    this.fail(last);
  }
}
