/**
 * The request ids of writers' first opens whose outcome is unknown, kept for the next open (the
 * Python clients' `UnansweredOpens`).
 *
 * A writer's first open carries a requestId, so a retry of it takes the lease an attempt whose
 * answer was lost got, under the same token. Its retries end with the open's budget, though: an
 * open given up at the client's `timeoutMs` while the service hung reached the service with its
 * cancel once the service was back, and the lease it was granted held the session (WRITER_HELD)
 * against the caller's next `writer()`, its own try again, until it lapsed. The service gives
 * such a lease back once it sees the cancel, but a new open may come first.
 *
 * So a client keeps, per session, the id of a first open that failed Unavailable (its outcome
 * unknown), and its next writer on the session sends that id again: the open is that one's
 * retry, and takes that lease if it was granted. It may be another kind of open (a resume after
 * a plain open): the service decides a resume by the log, not by the id, so either takes the
 * lease the other got.
 */
import { randomUUID } from "node:crypto";

/** Sessions remembered at most (the oldest go first). */
export const UNANSWERED_OPENS = 1024;

export class UnansweredOpens {
  private readonly ids = new Map<string, string>();

  constructor(private readonly capacity = UNANSWERED_OPENS) {}

  /** The id a new writer's first open on the session sends: an unanswered one's, taken, else a fresh UUID. */
  requestId(sessionId: string): string {
    const kept = this.ids.get(sessionId);
    this.ids.delete(sessionId);
    return kept ?? randomUUID();
  }

  /** The first open that sent `requestId` failed Unavailable: it may hold a lease. */
  unanswered(sessionId: string, requestId: string): void {
    this.ids.delete(sessionId); // re-inserted last: the newest
    this.ids.set(sessionId, requestId);
    while (this.ids.size > this.capacity) {
      const oldest = this.ids.keys().next().value;
      if (oldest === undefined) break;
      this.ids.delete(oldest);
    }
  }
}
