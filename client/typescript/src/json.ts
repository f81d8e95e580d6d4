/**
 * Lossless JSON for payloads (SPEC §2: integers stay integers).
 *
 * `JSON.parse` turns 12345678901234567890 into 12345678901234567000. Every payload this
 * client hands to the caller is parsed here instead: an integer beyond 2^53 becomes a
 * `bigint`, every other number a `number`. `stringifyJson` writes bigints back as their
 * digits, so a payload read and re-sent is unchanged.
 */
import { isInteger, isSafeNumber, parse, stringify } from "lossless-json";

/** A JSON value as this client reads and writes it; `bigint` only for integers beyond 2^53. */
export type JsonValue = null | boolean | number | bigint | string | JsonValue[] | JsonObject;
/** A JSON object. */
export interface JsonObject {
  [key: string]: JsonValue;
}

/**
 * A JSON value as a caller may write it: a `JsonValue`, or an object some of whose fields are
 * `undefined` (left out when written, as `JSON.stringify` leaves them out). Optional fields
 * (`model?: string`) hold `undefined` to TypeScript, so without it this package's own message
 * types could not be put into an event's data.
 */
export type JsonInput = JsonValue | JsonInputObject | readonly JsonInput[];
/** An object as a caller may write it (see `JsonInput`). */
export interface JsonInputObject {
  [key: string]: JsonInput | undefined;
}

const decoder = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

function parseNumber(text: string): number | bigint {
  return isInteger(text) && !isSafeNumber(text) ? BigInt(text) : Number(text);
}

/** Parse JSON text (or UTF-8 bytes) losslessly. */
export function parseJson(input: string | Uint8Array): JsonValue {
  const text = typeof input === "string" ? input : decoder.decode(input);
  return parse(text, null, parseNumber) as JsonValue;
}

/** Parse JSON that must be an object (an empty input means `{}`, as the proto says). */
export function parseObject(input: Uint8Array, what: string): JsonObject {
  if (input.length === 0) return {};
  const value = parseJson(input);
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError(`${what} is not a JSON object`);
  }
  return value;
}

/** Parse JSON that must be an array. */
export function parseArray(input: Uint8Array, what: string): JsonValue[] {
  const value = parseJson(input);
  if (!Array.isArray(value)) throw new TypeError(`${what} is not a JSON array`);
  return value;
}

/** NaN or Infinity where JSON is written (a TypeError, as before; the client maps it to NON_FINITE_NUMBER). */
export class NonFiniteNumber extends TypeError {
  constructor(readonly path: string, readonly value: number) {
    super(`${path} is ${value}: JSON has no NaN or Infinity`);
  }
}

function checkFinite(value: unknown, path: string): void {
  if (typeof value === "number" && !Number.isFinite(value)) throw new NonFiniteNumber(path, value);
  if (Array.isArray(value)) value.forEach((item, i) => checkFinite(item, `${path}[${i}]`));
  else if (value !== null && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) checkFinite(item, `${path}.${key}`);
  }
}

/** JSON text of a value; bigints keep every digit, NaN and Infinity are refused. */
export function stringifyJson(value: unknown, what = "value"): string {
  checkFinite(value, what);
  const text = stringify(value);
  if (text === undefined) throw new TypeError(`${what} cannot be written as JSON`);
  return text;
}

/** UTF-8 bytes of `stringifyJson(value)`. */
export function encodeJson(value: unknown, what?: string): Uint8Array {
  return encoder.encode(stringifyJson(value, what));
}
