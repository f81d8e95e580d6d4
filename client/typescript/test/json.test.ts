import assert from "node:assert/strict";
import { test } from "node:test";
import { parseJson, stringifyJson } from "../src/index.js";

test("integers beyond 2^53 are bigints and come back with every digit", () => {
  const text = '{"big":12345678901234567890,"neg":-9007199254740993,"small":42,"float":0.5,"nested":[1,{"x":18446744073709551615}]}';
  const value = parseJson(text) as Record<string, unknown>;
  assert.equal(value.big, 12345678901234567890n);
  assert.equal(value.neg, -9007199254740993n);
  assert.equal(value.small, 42);
  assert.equal(typeof value.small, "number");
  assert.equal(value.float, 0.5);
  assert.equal(stringifyJson(value), text);
});

test("NaN and Infinity are refused, naming where they are", () => {
  assert.throws(() => stringifyJson({ a: [1, Number.NaN] }), /value\.a\[1\] is NaN/);
  assert.throws(() => stringifyJson({ b: Number.POSITIVE_INFINITY }), /Infinity/);
});

test("invalid UTF-8 is an error, not replacement characters", () => {
  assert.throws(() => parseJson(new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])));
});
