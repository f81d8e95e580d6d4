/**
 * Retrying calls whose outcome was unknown (UNAVAILABLE), with capped exponential backoff.
 * Only idempotent calls go through here: reads, and appends whose events all carry eventIds
 * (a retry of a committed batch returns the original seqs instead of appending twice).
 */
import { Code } from "@connectrpc/connect";
import { toSessionLogError, Unavailable } from "./errors.js";

export interface RetryPolicy {
  /** Attempts in all, the first included (1 disables retrying). */
  attempts: number;
  initialDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, initialDelayMs: 50, maxDelayMs: 1000 };

/**
 * A policy a caller gave (`name` says which option) has every field, each a number it can
 * mean: `attempts` a positive integer, the delays finite and not negative. Else RangeError, as
 * `maxInFlight` gets: from plain JavaScript, `{ attempts: 3 }` made every delay NaN, so every
 * wait none at all, and the attempts were spent within milliseconds.
 */
export function checkRetryPolicy(policy: RetryPolicy | undefined, name: string): void {
  if (policy === undefined) return;
  if (typeof policy !== "object" || policy === null) {
    throw new RangeError(`${name} must be an object { attempts, initialDelayMs, maxDelayMs }, got ${String(policy)}`);
  }
  if (!(Number.isSafeInteger(policy.attempts) && policy.attempts > 0)) {
    throw new RangeError(`${name}.attempts must be a positive integer, got ${String(policy.attempts)}`);
  }
  for (const field of ["initialDelayMs", "maxDelayMs"] as const) {
    const value: unknown = policy[field];
    if (!(typeof value === "number" && Number.isFinite(value) && value >= 0)) {
      throw new RangeError(`${name}.${field} must be a number of milliseconds, 0 or more, got ${String(value)}`);
    }
  }
}

/**
 * Wait `ms`; the first of `signals` to abort ends the wait at once, rejecting with its reason.
 * Several signals are listened to directly and let go when the wait ends, not combined with
 * `AbortSignal.any`: a signal combined per wait (a lease writer's every renewal) with the
 * client's, which lives as long as the client, was kept by it (nodejs/node#55351).
 */
export function sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<void> {
  const ending = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  return new Promise((resolve, reject) => {
    const aborted = ending.find((signal) => signal.aborted);
    if (aborted !== undefined) return reject(aborted.reason);
    const stopListening = (): void => {
      for (const signal of ending) signal.removeEventListener("abort", onAbort);
    };
    const timer = setTimeout(() => {
      stopListening();
      resolve();
    }, ms);
    function onAbort(this: AbortSignal): void {
      clearTimeout(timer);
      stopListening();
      reject(this.reason);
    }
    for (const signal of ending) signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** The delay before attempt `attempt` (1-based retries), doubling up to the cap. */
export function backoff(policy: RetryPolicy, attempt: number): number {
  return Math.min(policy.initialDelayMs * 2 ** Math.max(0, attempt - 1), policy.maxDelayMs);
}

/** A policy that tries once: the calls that are not idempotent. */
export const NO_RETRY: RetryPolicy = { attempts: 1, initialDelayMs: 0, maxDelayMs: 0 };

/**
 * A unary call's `timeoutMs` as the budget of the whole call, its retries and their waits
 * included: each attempt gets what is left of it as its gRPC deadline, and no attempt starts
 * once it is spent (nor a wait that would spend it). Each attempt had the whole timeout: a call
 * to a service that never answered was tried `policy.attempts` times over, 8 times its timeout
 * and the backoff (minutes with the 30 s default). The Python clients' `Budget` (sessionlog.base).
 *
 * A call that fails for want of time throws the last attempt's error (its class and reason:
 * Unavailable, TRANSPORT_ERROR for Connect's DEADLINE_EXCEEDED) told as "the call's timeoutMs
 * of T ms was spent after N attempts: ...". `timeoutMs` <= 0: no budget (Connect's meaning).
 */
export class Budget {
  private readonly deadline: number | undefined;
  private attempts = 0;

  constructor(private readonly timeoutMs: number, private readonly policy: RetryPolicy) {
    this.deadline = timeoutMs > 0 ? performance.now() + timeoutMs : undefined;
  }

  /** Count an attempt; its `timeoutMs` for Connect: what is left (at least 1, as 0 is none). */
  nextAttempt(): number | undefined {
    this.attempts += 1;
    if (this.deadline === undefined) return undefined;
    return Math.max(1, Math.ceil(this.deadline - performance.now()));
  }

  /**
   * The wait before the next attempt after `raw` ended this one; throws it (typed) when it is
   * not to be retried, told as the budget spent when the time for another attempt is.
   */
  waitAfter(raw: unknown): number {
    const error = toSessionLogError(raw);
    if (!(error instanceof Unavailable)) throw error;
    if (this.spent(0)) throw this.spentError(error);
    if (this.attempts >= this.policy.attempts) throw error;
    const delay = backoff(this.policy, this.attempts);
    if (this.spent(delay)) throw this.spentError(error);
    return delay;
  }

  /** Whether no time is left for an attempt after `delayMs`. */
  private spent(delayMs: number): boolean {
    return this.deadline !== undefined && performance.now() + delayMs >= this.deadline;
  }

  private spentError(error: Unavailable): Unavailable {
    const attempts = `${this.attempts} attempt${this.attempts > 1 ? "s" : ""}`;
    return new Unavailable({
      reason: error.reason,
      message: `the call's timeoutMs of ${this.timeoutMs} ms was spent after ${attempts}: ${error.message}`,
      code: error.code,
      metadata: { ...error.metadata },
      fieldViolations: [...error.fieldViolations],
      cause: (error as Error).cause ?? error,
    });
  }
}

/**
 * Run `call` (given each attempt's `timeoutMs`) within `budget`, retrying on Unavailable per
 * its policy; every error comes out typed. Any of `ended` ends a wait to try again at once,
 * rejecting with its reason (the client's close: a closed client's call waited its wait out
 * first, and the timer held the process open until then).
 */
export async function withBudget<T>(
  budget: Budget,
  call: (timeoutMs: number | undefined) => Promise<T>,
  ...ended: (AbortSignal | undefined)[]
): Promise<T> {
  for (;;) {
    let delay: number;
    try {
      return await call(budget.nextAttempt());
    } catch (raw) {
      delay = budget.waitAfter(raw);
    }
    await sleep(delay, ...ended);
  }
}

/**
 * The error of a read whose stream sent no page (nor its end) within the client's `timeoutMs`
 * of asking for one: Unavailable, TRANSPORT_ERROR, as a unary call that spent its timeout (the
 * Python clients' `no_page`, sessionlog.base). The timeout bounds each page, not the whole read,
 * which may take long for a long session; a read had no deadline at all, and one from a service
 * that accepted the call and never answered waited forever.
 */
export class NoPage extends Unavailable {
  constructor(timeoutMs: number, cause: unknown) {
    super({
      reason: "TRANSPORT_ERROR",
      message:
        `the read got no page within the client's timeoutMs of ${timeoutMs} ms (the service accepted the ` +
        "call and sent nothing more); the events before were delivered",
      code: Code.Unavailable,
      cause,
    });
  }
}

/**
 * The error of a writer's open whose stream got no answer (`opened` or a refusal) within the
 * client's `timeoutMs`: TRANSPORT_ERROR, as a unary call that spent its timeout (the Python
 * clients' `no_open_answer`). A hung service (accepting connections, answering nothing) held an
 * open until the keepalive gave the connection up, and then each retry of it: minutes.
 */
export class NoOpenAnswer extends Unavailable {
  constructor(timeoutMs: number) {
    super({
      reason: "TRANSPORT_ERROR",
      message: `the writer's open got no answer within the client's timeoutMs of ${timeoutMs} ms`,
      code: Code.Unavailable,
    });
  }
}

/**
 * The messages of the server stream `open` starts (given the signal that cancels it), each
 * waited for at most `timeoutMs` (0 or less: no bound), as Connect's `timeoutMs` is a deadline
 * for the whole call: a wait that runs out cancels the call and throws `NoPage`. The caller's
 * own time between messages is not counted. The call is cancelled however the iteration ends
 * early (a caller that stops reading leaves no stream behind).
 */
export async function* eachWithin<T>(open: (signal: AbortSignal) => AsyncIterable<T>, timeoutMs: number): AsyncGenerator<T> {
  const cancel = new AbortController();
  const messages = open(cancel.signal)[Symbol.asyncIterator]();
  let ended = false;
  try {
    for (;;) {
      let expired = false;
      const timer =
        timeoutMs > 0
          ? setTimeout(() => {
              expired = true;
              cancel.abort();
            }, timeoutMs)
          : undefined;
      let next: IteratorResult<T>;
      try {
        next = await messages.next();
      } catch (raw) {
        ended = true;
        throw expired ? new NoPage(timeoutMs, raw) : raw;
      } finally {
        clearTimeout(timer);
      }
      if (next.done) {
        ended = true;
        return;
      }
      yield next.value;
    }
  } finally {
    if (!ended) cancel.abort();
  }
}
