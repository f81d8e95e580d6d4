/**
 * Lossless JSON for payloads (SPEC §2: integers stay integers).
 *
 * `JSON.parse` turns 12345678901234567890 into 12345678901234567000. Every payload this
 * client hands to the caller is parsed here instead: an integer beyond 2^53 becomes a
 * `bigint`, every other number a `number`. `stringifyJson` writes bigints back as their
 * digits, so a payload read and re-sent is unchanged.
 *
 * Parsing is `JSON.parse` (payloads run to tens of megabytes: a parser in JavaScript took a
 * hundred times as long and gigabytes of memory), with each integer token beyond 2^53 first
 * turned into a marked string that the reviver turns into its bigint. A repeated key (in a
 * payload stored before the service refused them as DUPLICATE_KEY) keeps its last value, as
 * `JSON.parse` and the service's Python readers keep it.
 */
import { randomUUID } from "node:crypto";
import { isInteger, isSafeNumber, stringify } from "lossless-json";

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

/** Whether a number token must be a bigint: an integer a double does not hold exactly. */
function isBigInteger(token: string): boolean {
  return isInteger(token) && !isSafeNumber(token);
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const MINUS = 0x2d;

function isDigit(code: number): boolean {
  return code >= 0x30 && code <= 0x39;
}

/**
 * The [start, end) of every number token in `text` (outside strings) that `isBigInteger`. Only
 * tokens of 16 digits or more can be: 2^53 has 16. One pass, no regular expression (V8's
 * overflow their stack on a string of megabytes).
 */
function bigIntegerTokens(text: string): [number, number][] {
  const found: [number, number][] = [];
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === QUOTE) {
      for (i++; i < text.length && text.charCodeAt(i) !== QUOTE; i++) if (text.charCodeAt(i) === BACKSLASH) i++;
    } else if (code === MINUS || isDigit(code)) {
      const start = i;
      if (code === MINUS) i++;
      while (i < text.length && isDigit(text.charCodeAt(i))) i++;
      const digits = i - start - (code === MINUS ? 1 : 0);
      let integer = true;
      // A fraction or an exponent makes it a float; skip the rest of the token.
      while (i < text.length && /[0-9.eE+-]/.test(text[i]!)) {
        integer = false;
        i++;
      }
      if (integer && digits >= 16 && isBigInteger(text.slice(start, i))) found.push([start, i]);
      i--; // the loop steps onto the character after the token
    }
  }
  return found;
}

/** Parse JSON text (or UTF-8 bytes) losslessly. */
export function parseJson(input: string | Uint8Array): JsonValue {
  const text = typeof input === "string" ? input : decoder.decode(input);
  const tokens = bigIntegerTokens(text);
  if (tokens.length === 0) return JSON.parse(text) as JsonValue;
  // No string of the payload can begin with a marker made of a fresh random UUID.
  const marker = `\u0000bigint:${randomUUID()}:`;
  const parts: string[] = [];
  let last = 0;
  for (const [start, end] of tokens) {
    parts.push(text.slice(last, start), JSON.stringify(marker + text.slice(start, end)));
    last = end;
  }
  parts.push(text.slice(last));
  return JSON.parse(parts.join(""), (_key, value: unknown) =>
    typeof value === "string" && value.startsWith(marker) ? BigInt(value.slice(marker.length)) : value,
  ) as JsonValue;
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

/**
 * A value JSON would drop or empty without a word, where it is written: a function or a symbol
 * (left out), `undefined` in an array (written as null), a Map or a Set (written as `{}`). The
 * Python clients refuse what JSON cannot hold; here a Map of tool results was stored as `{}`.
 * A TypeError, as before; the client maps it to NOT_CANONICALIZABLE.
 */
export class NotJson extends TypeError {
  constructor(readonly path: string, readonly kind: string, readonly written: string) {
    super(`${path} is ${kind}, which JSON cannot hold (it would be ${written})`);
  }
}

const EMPTIED = [Map, Set, WeakMap, WeakSet];

function checkJson(value: unknown, path: string, inArray = false): void {
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) throw new NonFiniteNumber(path, value);
      return;
    case "function":
      throw new NotJson(path, "a function", "left out");
    case "symbol":
      throw new NotJson(path, "a symbol", "left out");
    case "undefined":
      if (inArray) throw new NotJson(path, "undefined in an array", "written as null");
      return; // an object's field: left out, as the types allow (JsonInputObject)
    case "object":
      break;
    default:
      return;
  }
  if (value === null) return;
  const emptied = EMPTIED.find((type) => value instanceof type);
  if (emptied !== undefined) throw new NotJson(path, `a ${emptied.name}`, "written as {}");
  const written = typeof (value as { toJSON?: unknown }).toJSON === "function" ? (value as { toJSON: () => unknown }).toJSON() : value;
  if (written !== value) {
    checkJson(written, path, inArray); // what is written instead (a Date: its ISO text)
  } else if (Array.isArray(value)) {
    value.forEach((item, i) => checkJson(item, `${path}[${i}]`, true));
  } else {
    for (const [key, item] of Object.entries(value)) checkJson(item, `${path}.${key}`);
  }
}

/** JSON text of a value; bigints keep every digit; NaN, Infinity and what JSON drops are refused. */
export function stringifyJson(value: unknown, what = "value"): string {
  checkJson(value, what);
  const text = stringify(value);
  if (text === undefined) throw new TypeError(`${what} cannot be written as JSON`);
  return text;
}

/** UTF-8 bytes of `stringifyJson(value)`. */
export function encodeJson(value: unknown, what?: string): Uint8Array {
  return encoder.encode(stringifyJson(value, what));
}
