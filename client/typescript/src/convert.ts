/**
 * Conversion between the wire messages (protobuf-es) and this client's types: one place for
 * the shape of every request and response, shared by the client and its writers.
 */
import { create } from "@bufbuild/protobuf";
import { optionalSeq } from "./arguments.js";
import { parseArray, parseJson, parseObject, encodeJson, type JsonObject } from "./json.js";
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

export function surfaceOpToPb(op: SurfaceOp | undefined): PbSurfaceOp | undefined {
  if (op === undefined) return undefined;
  if (op === "append") return create(SurfaceOpSchema, { op: { case: "append", value: {} } });
  if (op.op !== "replace") throw new TypeError(`unknown surfaceOp ${JSON.stringify(op)}`);
  return create(SurfaceOpSchema, { op: { case: "replace", value: { startSeq: BigInt(op.startSeq), endSeq: BigInt(op.endSeq) } } });
}

export function surfaceOpFromPb(op: PbSurfaceOp | undefined): SurfaceOp | undefined {
  if (op?.op.case === "append") return "append";
  if (op?.op.case === "replace") return { op: "replace", startSeq: num(op.op.value.startSeq), endSeq: num(op.op.value.endSeq) };
  return undefined;
}

export function newEventToPb(event: NewEvent): PbNewEvent {
  return create(NewEventSchema, {
    type: event.type,
    dataJson: event.data === undefined ? new Uint8Array() : encodeJson(event.data, `${event.type} data`),
    eventId: event.eventId ?? "",
    ignorable: event.ignorable ?? false,
    surfaceOp: surfaceOpToPb(event.surfaceOp),
    sourceEventSeqs: (event.sourceEventSeqs ?? []).map((s) => BigInt(s)),
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
    headerSeq: msg.headerSeq === undefined ? null : num(msg.headerSeq),
    appended: msg.appended,
    changedFields: [...msg.changedFields],
  };
}

export function resumeFromPb(msg: ResumeSessionResponse): ResumeInfo {
  return {
    lease: leaseFromPb(msg.lease, msg.leaseToken),
    nextSeq: num(msg.nextSeq),
    latestHeader: msg.latestHeaderJson.length ? (parseObject(msg.latestHeaderJson, "latest header") as unknown as RequestHeader) : null,
    latestHeaderSeq: msg.latestHeaderSeq === undefined ? null : num(msg.latestHeaderSeq),
    replaceGeneration: num(msg.replaceGeneration),
    repairSeqs: msg.repairSeqs.map(num),
    endSeedSeq: num(msg.endSeedSeq),
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
