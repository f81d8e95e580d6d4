/**
 * A unary writer: holds a lease taken with AcquireLease (or ResumeSession) and keeps it alive
 * with heartbeats, for harnesses that append with unary calls instead of a stream.
 *
 * Appends carry eventIds and are retried on UNAVAILABLE. If a heartbeat or an append finds
 * the lease lost (ABORTED), the writer fails for good: later appends reject with `OwnershipLost`
 * and nothing re-acquires the lease quietly. So it does on ACKNOWLEDGED_PAST_LOG (the database
 * was restored from a backup older than its acknowledged appends; the service released the
 * lease): later calls reject with that, and `close()` has no lease to give back. After
 * `close()`, calls reject with `WriterClosed` (reason CANCELLED, not retryable), as the
 * streaming writer's do; so they do once the client was closed, which also stops the
 * heartbeats and leaves the lease to lapse.
 */
import type { HeldLease, SessionLogClient } from "./client.js";
import { nextSeqAfterHeader } from "./convert.js";
import { OwnershipLost, type SessionLogError, typedError, writerClosed } from "./errors.js";
import type { JsonObject } from "./json.js";
import type { AppendResult, HeaderReport, Lease, NewEvent, RequestHeader, ResumeInfo, SeqArgument } from "./types.js";

export interface LeaseWriterOptions {
  writerId?: string;
  takeover?: boolean;
  /** Resume the session first (SPEC §8); see `resumed`. */
  resume?: boolean;
  /**
   * Heartbeat interval in milliseconds; default a third of the lease's remaining time. A given
   * one is a positive number of at most `MAX_HEARTBEAT_MS` (`checkHeartbeat`).
   */
  heartbeatMs?: number;
}

/** The longest heartbeat interval (ms): the longest delay a timer keeps; the Python clients' limit too. */
export const MAX_HEARTBEAT_MS = 2 ** 31 - 1;

/**
 * `heartbeatMs`, when given, is a positive number of at most `MAX_HEARTBEAT_MS`: with 0 or less
 * (or NaN) the timer fired at once and the writer renewed its lease in a busy loop, and a longer
 * delay than a timer keeps fires at once too. Refused before the lease is taken.
 */
function checkHeartbeat(value: number | undefined): void {
  if (value !== undefined && !(typeof value === "number" && value > 0 && value <= MAX_HEARTBEAT_MS)) {
    throw new RangeError(`heartbeatMs must be a positive number of milliseconds, at most ${MAX_HEARTBEAT_MS}, got ${String(value)}`);
  }
}

export class LeaseWriter {
  lease: Lease;
  /** The seq the next appended event gets, as of this writer's last append or logged header. */
  nextSeq: number;
  readonly resumed: ResumeInfo | null;
  private failure: SessionLogError | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Aborted by `close()`: ends a renewal's wait to try again. */
  private readonly stopping = new AbortController();

  private constructor(
    private readonly client: SessionLogClient,
    held: Lease,
    nextSeq: number,
    resumed: ResumeInfo | null,
    private readonly heartbeatMs: number | undefined,
  ) {
    this.lease = held;
    this.nextSeq = nextSeq;
    this.resumed = resumed;
    this.schedule();
  }

  static async open(client: SessionLogClient, sessionId: string, options: LeaseWriterOptions = {}): Promise<LeaseWriter> {
    checkHeartbeat(options.heartbeatMs);
    const take = { writerId: options.writerId, takeover: options.takeover };
    if (options.resume) {
      const resumed = await client.resume(sessionId, take);
      return new LeaseWriter(client, resumed.lease, resumed.nextSeq, resumed, options.heartbeatMs);
    }
    const held: HeldLease = await client.acquireLease(sessionId, take);
    return new LeaseWriter(client, held, held.nextSeq, null, options.heartbeatMs);
  }

  /** Append one batch (retried safely on UNAVAILABLE); renews the lease as a side effect. */
  async append(events: Iterable<NewEvent>, options: { expectedNextSeq?: SeqArgument } = {}): Promise<AppendResult> {
    this.check();
    try {
      const result = await this.client.append(this.lease, events, options);
      this.nextSeq = result.nextSeq;
      return result;
    } catch (error) {
      throw this.noteFailure(error);
    }
  }

  /** Report the request header about to be used; `nextSeq` moves past it when it is logged. */
  async reportHeader(header: RequestHeader | JsonObject): Promise<HeaderReport> {
    this.check();
    try {
      const report = await this.client.reportHeader(this.lease, header);
      this.nextSeq = nextSeqAfterHeader(this.nextSeq, report);
      return report;
    } catch (error) {
      throw this.noteFailure(error);
    }
  }

  /**
   * Stop the heartbeats and give the lease back (unless it was lost, or the client closed: it
   * lapses). A second close does nothing: the lease is no longer this writer's to give back.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.stopping.abort(writerClosed("the writer is closed"));
    if (this.failure === null && !this.client.closed) await this.client.releaseLease(this.lease);
  }

  /**
   * Throws (in an async method: its promise rejects) once the lease was lost, the writer closed,
   * or its client closed.
   */
  private check(): void {
    if (this.failure !== null) throw this.failure;
    if (this.closed) throw writerClosed("the writer is closed");
    if (this.client.closed) throw writerClosed("the client was closed, and its writers with it");
  }

  private noteFailure(raw: unknown): unknown {
    const error = typedError(raw);
    const final = error instanceof OwnershipLost || error.reason === "ACKNOWLEDGED_PAST_LOG";
    if (final && this.failure === null) this.failure = error; // the first: not a later heartbeat's
    return error;
  }

  private schedule(): void {
    if (this.closed || this.failure !== null || this.client.closed) return;
    const delay = this.heartbeatMs ?? Math.max(100, Math.floor((this.lease.expireTimeMs - Date.now()) / 3));
    this.timer = setTimeout(() => void this.beat(), delay);
    this.timer.unref(); // heartbeats alone do not keep the process alive
  }

  private async beat(): Promise<void> {
    if (this.closed || this.client.closed) return;
    try {
      this.lease = await this.client.renewLease(this.lease, { ended: this.stopping.signal });
    } catch (error) {
      this.noteFailure(error); // a lost lease stops the writer; a transient failure retries next beat
    }
    this.schedule();
  }
}
