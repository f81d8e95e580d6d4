/**
 * The checks of a caller's numbers that the wire would make too late. A seq travels as a
 * uint64 and a page size as an int32: -1 or 1.5 would fail inside Connect's encoder, which
 * reports it as INTERNAL, a status a broken connection has too. Every seq-like and page-size
 * argument passes through here first, so it fails at once, as a ValidationError with the
 * catalogue's reason (docs/errors.md), and nothing is sent.
 */
import { randomUUID } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { ValidationError } from "./errors.js";

const UINT64_MAX = 2n ** 64n - 1n;
const INT32_MAX = 2 ** 31 - 1;

/** A ValidationError about one argument or field, named in `metadata.field` and the BadRequest. */
export function invalid(reason: string, field: string, description: string, metadata: Record<string, string> = {}): ValidationError {
  return new ValidationError({
    reason,
    message: `${field} ${description}`,
    code: Code.InvalidArgument,
    metadata: { field, ...metadata },
    fieldViolations: [{ field, description }],
  });
}

/** How a bad value reads in an error message. */
function shown(value: unknown): string {
  if (typeof value === "bigint") return `${value}n`;
  if (typeof value === "string") return JSON.stringify(value);
  return String(value);
}

/**
 * A seq-like argument as the wire takes it: a non-negative safe integer, or a bigint within
 * uint64. `reason` is the catalogue's for where it appears (BAD_SEQ for an argument, as the Python client;
 * an event's fields have their own, with `metadata` naming the event).
 */
export function seq(value: unknown, field: string, reason = "BAD_SEQ", metadata: Record<string, string> = {}): bigint {
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  if (typeof value === "bigint" && value >= 0n && value <= UINT64_MAX) return value;
  throw invalid(reason, field, `must be a non-negative integer (a seq), got ${shown(value)}`, metadata);
}

/**
 * The id a create or fork names: a fresh UUID when none is given, else the caller's, which may
 * not be empty: the wire cannot tell "" from no id, so the service would make up a session
 * where the caller meant its own (an unset variable). BAD_SESSION_ID, as the Python client.
 */
export function namedSession(value: string | undefined, field: string): string {
  if (value === undefined) return randomUUID();
  if (value === "") throw invalid("BAD_SESSION_ID", field, "is empty: give an id, or none for a generated one");
  return value;
}

/** `seq` for an optional argument (undefined stays unset). */
export function optionalSeq(value: unknown, field: string, reason?: string): bigint | undefined {
  return value === undefined ? undefined : seq(value, field, reason);
}

/** A page size: 0 (the service's default) up to what an int32 holds. */
export function pageSize(value: unknown, fallback: number, field = "pageSize"): number {
  if (value === undefined) return fallback;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= INT32_MAX) return value;
  throw invalid("BAD_PAGE_SIZE", field, `must be an integer from 0 to ${INT32_MAX}, got ${shown(value)}`);
}
