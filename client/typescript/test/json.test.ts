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

test("a repeated key keeps its last value, as JSON.parse and the service's Python readers keep it", () => {
  // The service stores a payload's text as it was accepted; one a raw gRPC writer sent before the
  // service refused repeated keys (DUPLICATE_KEY) may repeat one.
  assert.deepEqual(parseJson('{"a":1,"a":2}'), { a: 2 });
  assert.deepEqual(parseJson('{"a":1,"a":2,"big":12345678901234567890}'), { a: 2, big: 12345678901234567890n });
});

test("only integer tokens beyond 2^53 become bigints: not digits in strings, fractions or exponents", () => {
  const text = '{"s":"12345678901234567890","q":"a\\"12345678901234567890","f":0.30000000000000004,"g":1234567890123456789.5,"e":12345678901234567890e0,"n":[-12345678901234567890,9007199254740991,1e-12345678901234567]}';
  const value = parseJson(text) as Record<string, unknown>;
  assert.equal(value.s, "12345678901234567890");
  assert.equal(value.q, 'a"12345678901234567890');
  assert.equal(value.f, 0.30000000000000004);
  assert.equal(value.g, 1234567890123456789.5);
  assert.equal(value.e, 12345678901234567890e0);
  assert.deepEqual(value.n, [-12345678901234567890n, 9007199254740991, 0]);
});

test("a payload of many megabytes parses in about the time JSON.parse takes, not a hundred times it", () => {
  // A 30 MB tool output is a payload the service takes (up to 64 MB an event); parsed character by
  // character, 60 MB took tens of seconds and gigabytes, and a transcript ran the process out of memory.
  const text = JSON.stringify({ content: 'line "quoted" \\ 12345\n'.repeat(700_000), cost: 0.30000000000000004 });
  const bytes = new TextEncoder().encode(text);
  let started = performance.now();
  JSON.parse(text);
  const native = performance.now() - started;
  started = performance.now();
  const value = parseJson(bytes) as Record<string, unknown>;
  const ours = performance.now() - started;
  assert.equal((value.content as string).length, 15_400_000);
  assert.ok(ours < 20 * native + 250, `parseJson took ${Math.round(ours)} ms, JSON.parse ${Math.round(native)} ms`);
});
