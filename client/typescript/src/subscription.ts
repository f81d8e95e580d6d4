/**
 * A subscription: replay from a seq, one `CaughtUp` marker, then the live tail (SPEC §9).
 *
 * When the stream is cut (the service restarted, or cut off a subscriber that fell behind) it
 * resubscribes from the seq after the last event it delivered, so the caller sees every event
 * once and in order. Errors that a resubscription cannot fix (NOT_FOUND, OUT_OF_RANGE, …) end
 * the iteration with the typed error.
 */
import { type Client, Code } from "@connectrpc/connect";
import { optionalSeq } from "./arguments.js";
import { eventFromPb, num } from "./convert.js";
import { SessionLogError, toSessionLogError, Unavailable } from "./errors.js";
import type { SessionService } from "./gen/sessionlog/v1/session_service_pb.js";
import { backoff, type RetryPolicy, sleep } from "./retry.js";

/** How a cut subscription resubscribes: long enough to ride out a service restart. */
const RESUBSCRIBE: RetryPolicy = { attempts: 120, initialDelayMs: 50, maxDelayMs: 500 };
import type { CaughtUp, Event, SeqArgument } from "./types.js";

export interface SubscribeOptions {
  /** The first seq to deliver (default 0). */
  fromSeq?: SeqArgument;
  /** Aborting ends the iteration quietly. */
  signal?: AbortSignal;
  /** How resubscriptions back off (default: patient enough to ride out a service restart);
   * the count resets whenever the service answers (an event, or the caught-up marker). */
  retry?: RetryPolicy;
  /** Called before each resubscription (for metrics and logs). */
  onResubscribe?: (fromSeq: number, cause: SessionLogError) => void;
}

/**
 * Whether a subscription stream that failed with `error` can be resumed by subscribing again:
 * a transport failure, or the service cutting off a subscriber that fell behind
 * (SUBSCRIBER_TOO_SLOW; the client resubscribes from the seq after its last event).
 */
export function isResumableCut(error: unknown): boolean {
  return error instanceof Unavailable || (error instanceof SessionLogError && error.reason === "SUBSCRIBER_TOO_SLOW");
}

export class Subscription implements AsyncIterable<Event | CaughtUp> {
  private readonly controller = new AbortController();
  /** Resubscriptions so far. */
  resubscribes = 0;

  constructor(
    private readonly rpc: Client<typeof SessionService>,
    private readonly sessionId: string,
    private readonly options: SubscribeOptions,
    private readonly clientClosed?: AbortSignal,
  ) {}

  /** End the subscription (the iteration finishes quietly). */
  cancel(): void {
    this.controller.abort();
  }

  /**
   * End the iteration when the caller's signal or the client's closing fires. Listening only
   * while iterating, and returning the undo, keeps a long-lived signal (the client's) from
   * collecting one listener per subscription ever made.
   */
  private follow(): () => void {
    const endings = [this.options.signal, this.clientClosed].filter((s): s is AbortSignal => s !== undefined);
    const end = (): void => this.controller.abort();
    for (const ending of endings) {
      if (ending.aborted) end();
      else ending.addEventListener("abort", end, { once: true });
    }
    return () => {
      for (const ending of endings) ending.removeEventListener("abort", end);
    };
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Event | CaughtUp> {
    const unfollow = this.follow();
    try {
      yield* this.follower();
    } finally {
      unfollow();
    }
  }

  private async *follower(): AsyncGenerator<Event | CaughtUp> {
    const policy = this.options.retry ?? RESUBSCRIBE;
    let next = optionalSeq(this.options.fromSeq, "fromSeq") ?? 0n;
    let caughtUp = false;
    let failures = 0;
    const signal = this.controller.signal;
    while (!signal.aborted) {
      const stream = streamOf(signal);
      try {
        for await (const response of this.rpc.subscribeEvents({ sessionId: this.sessionId, fromSeq: next }, { signal: stream.signal })) {
          // The service was reached: the attempts "in a row" start again. Reset only by events,
          // a quiet session's subscription summed its failures over every restart and gave up.
          failures = 0;
          if (response.kind.case === "caughtUp") {
            if (!caughtUp) yield { caughtUp: true, nextSeq: num(response.kind.value.nextSeq) };
            caughtUp = true;
          } else if (response.kind.case === "events") {
            for (const message of response.kind.value.events) {
              const event = eventFromPb(message);
              if (event.seq < next) continue; // already delivered before the cut
              next = BigInt(event.seq) + 1n;
              yield event;
            }
          }
        }
        // A live tail never ends on its own: the service went away cleanly. Resubscribe.
        throw new Unavailable({ reason: "STREAM_ENDED", message: "the service ended the subscription", code: Code.Unavailable });
      } catch (raw) {
        if (signal.aborted) return; // cancel(), or the caller's signal: the only quiet end
        // The transport reports a connection lost as CANCELLED now and then (connect-node: a
        // server killed, or cancelling its streams as it stops); that is a cut like any other.
        const error = toSessionLogError(raw);
        failures += 1;
        if (!isResumableCut(error) || failures >= policy.attempts) throw error;
        this.resubscribes += 1;
        this.options.onResubscribe?.(Number(next), error as SessionLogError);
        try {
          await sleep(backoff(policy, failures), signal);
        } catch {
          return;
        }
      } finally {
        stream.abort();
      }
    }
  }
}

/**
 * The signal of one subscription stream: aborted with `signal`, and by `abort()` when the
 * caller stops iterating (a `break`, a `return`, a throw in its loop). Connect does not cancel a
 * server stream whose iteration ends early: the stream stayed open, fed by the service, and kept
 * the process from exiting.
 */
function streamOf(signal: AbortSignal): { signal: AbortSignal; abort(): void } {
  const controller = new AbortController();
  const end = (): void => controller.abort();
  signal.addEventListener("abort", end, { once: true });
  return {
    signal: controller.signal,
    abort() {
      signal.removeEventListener("abort", end);
      controller.abort();
    },
  };
}
