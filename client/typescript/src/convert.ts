/**
 * Conversion between the wire messages (protobuf-es) and this client's types: one place for
 * the shape of every request and response, shared by the client and its writers.
 */
import { create } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import { invalid, optionalSeq, seq } from "./arguments.js";
import { parseArray, parseJson, parseObject, encodeJson, type JsonObject, NonFiniteNumber, NotJson } from "./json.js";
import { type Event as PbEvent, type NewEvent as PbNewEvent, NewEventSchema, type SurfaceOp as PbSurfaceOp, SurfaceOpSchema } from "./gen/sessionlog/v1/event_pb.js";
import type { Lease as PbLease, Session as PbSession } from "./gen/sessionlog/v1/session_pb.js";
import {
  HeaderReason,
  type ProjectionScope,
  ProjectionScopeSchema,
  type ReportRequestHeaderResponse,
  type ResumeSessionResponse,
} from "./gen/sessionlog/v1/session_service_pb.js";
import type { Event, HeaderReasonName, HeaderReport, Lease, NewEvent, ProjectionOptions, RequestHeader, ResumeInfo, SessionInfo, SurfaceOp } from "./types.js";

/** A wire integer the service assigned (a seq, a time) as a number; refuses beyond 2^53. */
export function num(value: bigint): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new RangeError(`${value} is beyond 2^53`);
  return n;
}

/**
 * An optional wire integer (a header's seq, a projection's `atSeq`) as a number, or null when the
 * service left it unset: a session without events has no header seq, and its projections cover
 * no seq (`atSeq` null in every one, as in the Python clients).
 */
export function optionalNum(value: bigint | undefined): number | null {
  return value === undefined ? null : num(value);
}

/** Metadata naming the event of a batch an error is about (docs/errors.md: `event_index`). */
function at(index: number): Record<string, string> {
  return { event_index: String(index) };
}

/** A plain JSON object (not null, not an array). */
export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function surfaceOpToPb(op: SurfaceOp | undefined, index = 0): PbSurfaceOp | undefined {
  if (op === undefined) return undefined;
  if (op === "append") return create(SurfaceOpSchema, { op: { case: "append", value: {} } });
  if (!isObject(op) || op.op !== "replace") {
    throw invalid("BAD_SURFACE_OP", "surfaceOp", `must be "append" or { op: "replace", startSeq, endSeq }, got ${JSON.stringify(op) ?? String(op)}`, at(index));
  }
  const startSeq = seq(op.startSeq, "surfaceOp.startSeq", "BAD_SURFACE_OP", at(index));
  const endSeq = seq(op.endSeq, "surfaceOp.endSeq", "BAD_SURFACE_OP", at(index));
  return create(SurfaceOpSchema, { op: { case: "replace", value: { startSeq, endSeq } } });
}

/**
 * JSON bytes of a payload the caller gave (event data, a header, session metadata); what JSON
 * cannot hold is a ValidationError with the reason the service would give.
 */
export function jsonField(value: unknown, field: string, metadata: Record<string, string> = {}): Uint8Array {
  try {
    return encodeJson(value, field);
  } catch (error) {
    if (error instanceof NonFiniteNumber) throw invalid("NON_FINITE_NUMBER", field, `holds ${error.value} at ${error.path}: JSON has no NaN or Infinity`, metadata);
    if (error instanceof NotJson) throw invalid("NOT_CANONICALIZABLE", field, `holds ${error.kind} at ${error.path}, which JSON cannot hold (it would be ${error.written}): convert it first (a Map with Object.fromEntries, a Set with Array.from)`, metadata);
    throw invalid("NOT_CANONICALIZABLE", field, `cannot be written as JSON: ${(error as Error).message}`, metadata);
  }
}

/** JSON bytes of an object the caller gave; anything but an object is `notObject`. */
export function jsonObjectField(value: unknown, field: string, notObject: string, metadata: Record<string, string> = {}): Uint8Array {
  if (!isObject(value)) throw invalid(notObject, field, `must be a JSON object, got ${Array.isArray(value) ? "an array" : String(value)}`, metadata);
  return jsonField(value, field, metadata);
}

export function surfaceOpFromPb(op: PbSurfaceOp | undefined): SurfaceOp | undefined {
  if (op?.op.case === "append") return "append";
  if (op?.op.case === "replace") return { op: "replace", startSeq: num(op.op.value.startSeq), endSeq: num(op.op.value.endSeq) };
  return undefined;
}

/** A UTF-16 surrogate not paired with its other half (with the `u` flag a pair is one code point). */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/**
 * Refuse a string field holding a lone UTF-16 surrogate, with the reason the service gives for
 * that field. UTF-8 cannot carry one: protobuf-es sends U+FFFD in its place, so the service would
 * store (or match) a value the caller never gave, where the Python clients refuse it before sending.
 */
export function checkWellFormed(value: string | undefined, reason: string, field: string, metadata: Record<string, string> = {}): void {
  if (value !== undefined && LONE_SURROGATE.test(value)) {
    throw invalid(reason, field, "must not contain a lone UTF-16 surrogate (UTF-8 cannot carry it)", metadata);
  }
}

/** The longest eventId the service takes, in characters (its `max_id_chars`). */
export const MAX_ID_CHARS = 128;

/**
 * A proposed event as the wire takes it. A field the wire cannot carry is a ValidationError
 * with the reason the service gives for it (naming `event_index`, the event's place in its
 * batch), so a bad event fails like one the service refused, before anything is sent.
 */
export function newEventToPb(event: NewEvent, index = 0): PbNewEvent {
  if (!isObject(event)) throw invalid("BAD_ENVELOPE", "event", `must be an object, got ${String(event)}`, at(index));
  checkEnvelopeKeys(event, index);
  // An empty type would travel as none (proto3): the service refused it, and the writer ended
  // with it. Refused here, as the Python client refuses it (and as an empty eventId is).
  if (typeof event.type !== "string" || event.type === "") {
    throw invalid("BAD_TYPE", "type", `must be a non-empty string, got ${JSON.stringify(event.type) ?? String(event.type)}`, at(index));
  }
  // An empty eventId would travel as none (proto3), be stored without one, and a retry of the
  // same event would be appended again: refused, as the Python client refuses it.
  if (event.eventId !== undefined && (typeof event.eventId !== "string" || event.eventId === "")) {
    throw invalid("BAD_EVENT_ID", "eventId", "must be a non-empty string (leave it out to get one)", at(index));
  }
  // The service's length rule counts characters (code points), as Python's len() does.
  if (event.eventId !== undefined && [...event.eventId].length > MAX_ID_CHARS) {
    throw invalid("BAD_EVENT_ID", "eventId", `must be 1 to ${MAX_ID_CHARS} characters`, at(index));
  }
  // PostgreSQL's text columns cannot store a NUL, so the service refuses it on every database
  // (as the Python client does, before sending).
  if (event.eventId?.includes("\u0000")) {
    throw invalid("BAD_EVENT_ID", "eventId", "must not contain a NUL character", at(index));
  }
  // UTF-8 cannot carry a lone surrogate: the wire would turn it into U+FFFD, so "a\ud800" and
  // "a\udc00" would reach the service as one id, and the second event would be answered with
  // the first one's seq instead of being appended (the Python client refuses it too).
  checkWellFormed(event.eventId, "BAD_EVENT_ID", "eventId", at(index));
  if (event.ignorable !== undefined && typeof event.ignorable !== "boolean") throw invalid("BAD_IGNORABLE", "ignorable", "must be a boolean", at(index));
  return create(NewEventSchema, {
    type: event.type,
    dataJson: event.data === undefined ? new Uint8Array() : jsonObjectField(event.data, "data", "DATA_NOT_OBJECT", at(index)),
    eventId: event.eventId ?? "",
    ignorable: event.ignorable ?? false,
    surfaceOp: surfaceOpToPb(event.surfaceOp, index),
    sourceEventSeqs: sourceSeqsToPb(event.sourceEventSeqs, index),
  });
}

/**
 * The keys an event envelope may have (SPEC §2; `seq` and `time`, of an event read back and sent
 * again, are ignored). The Python clients' `ENVELOPE_KEYS`.
 */
const ENVELOPE_KEYS = ["seq", "time", "type", "data", "eventId", "ignorable", "surfaceOp", "sourceEventSeqs"];

/**
 * Refuse a key SPEC §2 does not name (one whose value is undefined is left out, as JSON leaves
 * it): a misspelt key was dropped unseen, and `event_id` for `eventId` cost the event its retry
 * protection (it was given a fresh id), `payload` for `data` stored `{}`.
 */
function checkEnvelopeKeys(event: Record<string, unknown>, index: number): void {
  for (const [key, value] of Object.entries(event)) {
    if (value === undefined || ENVELOPE_KEYS.includes(key)) continue;
    const folded = key.replaceAll("_", "").replaceAll("-", "").toLowerCase();
    const meant = ENVELOPE_KEYS.find((known) => known.toLowerCase() === folded);
    const hint = meant === undefined ? "" : ` (did you mean "${meant}"?)`;
    throw invalid(
      "BAD_ENVELOPE",
      key,
      `is not an envelope key${hint}: an event's keys are ${ENVELOPE_KEYS.join(", ")} (its payload goes in data)`,
      at(index),
    );
  }
}

function sourceSeqsToPb(seqs: unknown, index: number): bigint[] {
  if (seqs === undefined) return [];
  if (!Array.isArray(seqs)) throw invalid("BAD_SOURCE_EVENT_SEQS", "sourceEventSeqs", "must be an array of seqs", at(index));
  return seqs.map((s, i) => seq(s, `sourceEventSeqs[${i}]`, "BAD_SOURCE_EVENT_SEQS", at(index)));
}

/**
 * A batch as the wire takes it: every event checked (`newEventToPb`) and given an eventId
 * when it has none, so a retry after an unknown outcome cannot append twice.
 */
export function batchToPb(events: Iterable<NewEvent>): PbNewEvent[] {
  if (events === null || typeof (events as Partial<Iterable<NewEvent>>)?.[Symbol.iterator] !== "function") {
    throw invalid("BAD_ENVELOPE", "events", "must be an iterable of events");
  }
  return Array.from(events, (event, index) => {
    const pb = newEventToPb(event, index);
    if (!pb.eventId) pb.eventId = randomUUID();
    return pb;
  });
}

export function eventFromPb(msg: PbEvent): Event {
  const event: Event = {
    seq: num(msg.seq),
    time: num(msg.timeUnixMs),
    type: msg.type,
    data: parseObject(msg.dataJson, `data of seq ${msg.seq}`),
    ignorable: msg.ignorable,
    sourceEventSeqs: msg.sourceEventSeqs.map(num),
  };
  if (msg.eventId) event.eventId = msg.eventId;
  const op = surfaceOpFromPb(msg.surfaceOp);
  if (op !== undefined) event.surfaceOp = op;
  return event;
}

export function leaseFromPb(msg: PbLease | undefined, token?: string): Lease {
  if (msg === undefined) throw new TypeError("the response carries no lease");
  const lease: Lease = { sessionId: msg.sessionId, writerId: msg.writerId, epoch: num(msg.epoch), expireTimeMs: num(msg.expireTimeUnixMs) };
  if (token) lease.token = token;
  return lease;
}

export function sessionFromPb(msg: PbSession | undefined): SessionInfo {
  if (msg === undefined) throw new TypeError("the response carries no session");
  const info: SessionInfo = {
    id: msg.id,
    createTimeMs: num(msg.createTimeUnixMs),
    metadata: parseObject(msg.metadataJson, "session metadata"),
    nextSeq: num(msg.nextSeq),
    openTurn: msg.openTurn,
  };
  if (msg.cwd) info.cwd = msg.cwd;
  if (msg.parent !== undefined && msg.parent.sessionId) info.parent = { sessionId: msg.parent.sessionId, forkSeq: num(msg.parent.forkSeq) };
  if (msg.lease !== undefined && msg.lease.writerId) info.lease = leaseFromPb(msg.lease);
  if (msg.traceId) info.traceId = msg.traceId;
  if (msg.namespace) info.namespace = msg.namespace;
  return info;
}

const REASONS = new Map<HeaderReason, HeaderReasonName | null>([
  [HeaderReason.UNSPECIFIED, null],
  [HeaderReason.INITIAL, "initial"],
  [HeaderReason.RESUME, "resume"],
  [HeaderReason.CHANGE, "change"],
  [HeaderReason.SERIES, "series"],
]);

export function headerReportFromPb(msg: ReportRequestHeaderResponse | undefined): HeaderReport {
  if (msg === undefined) throw new TypeError("the response carries no header decision");
  return {
    reason: REASONS.get(msg.reason) ?? null,
    startsSeries: msg.startsSeries,
    headerSeq: optionalNum(msg.headerSeq),
    appended: msg.appended,
    changedFields: [...msg.changedFields],
  };
}

/**
 * A writer's next seq after `report`: a header the service logged is an event too, so the next
 * seq is past it (used as `expectedNextSeq`, a stale one fails with EXPECTED_SEQ_MISMATCH).
 */
export function nextSeqAfterHeader(nextSeq: number, report: HeaderReport): number {
  return report.appended && report.headerSeq !== null ? Math.max(nextSeq, report.headerSeq + 1) : nextSeq;
}

export function resumeFromPb(msg: ResumeSessionResponse): ResumeInfo {
  return {
    lease: leaseFromPb(msg.lease, msg.leaseToken),
    nextSeq: num(msg.nextSeq),
    latestHeader: msg.latestHeaderJson.length ? (parseObject(msg.latestHeaderJson, "latest header") as unknown as RequestHeader) : null,
    latestHeaderSeq: optionalNum(msg.latestHeaderSeq),
    replaceGeneration: num(msg.replaceGeneration),
    repairSeqs: msg.repairSeqs.map(num),
    endSeedSeq: num(msg.endSeedSeq),
    lastTurn: num(msg.lastTurn),
  };
}

export function scope(sessionId: string, options: ProjectionOptions = {}): ProjectionScope {
  return create(ProjectionScopeSchema, {
    sessionId,
    atSeq: optionalSeq(options.atSeq, "atSeq"),
    withRepair: options.withRepair ?? false,
  });
}

export { parseArray, parseJson, parseObject };
export type { JsonObject };
