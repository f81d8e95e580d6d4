/**
 * Retrying calls whose outcome was unknown (UNAVAILABLE), with capped exponential backoff.
 * Only idempotent calls go through here: reads, and appends whose events all carry eventIds
 * (a retry of a committed batch returns the original seqs instead of appending twice).
 */
import { toSessionLogError, Unavailable } from "./errors.js";

export interface RetryPolicy {
  /** Attempts in all, the first included (1 disables retrying). */
  attempts: number;
  initialDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, initialDelayMs: 50, maxDelayMs: 1000 };

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The delay before attempt `attempt` (1-based retries), doubling up to the cap. */
export function backoff(policy: RetryPolicy, attempt: number): number {
  return Math.min(policy.initialDelayMs * 2 ** Math.max(0, attempt - 1), policy.maxDelayMs);
}

/** Run `call`, retrying on Unavailable per `policy`; every error comes out typed. */
export async function withRetry<T>(policy: RetryPolicy, call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (raw) {
      const error = toSessionLogError(raw);
      if (!(error instanceof Unavailable) || attempt >= policy.attempts || signal?.aborted) throw error;
      await sleep(backoff(policy, attempt), signal);
    }
  }
}

/** Run `call` once; every error comes out typed. */
export async function once<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (raw) {
    throw toSessionLogError(raw);
  }
}
