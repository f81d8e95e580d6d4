/**
 * Typed sessionlog errors, rebuilt from the `google.rpc.Status` the service sends (SPEC §13).
 *
 * The service puts an `ErrorInfo` (domain `sessionlog`, a reason from the `ErrorReason`
 * catalogue, string metadata) and, when a request field is at fault, a `BadRequest` into every
 * error. Callers switch on the class or on `reason`, never on message text; docs/errors.md says
 * what each reason means and what to do.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { type BadRequest_FieldViolation, BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason } from "./gen/sessionlog/v1/error_reason_pb.js";

/** A reason of the catalogue, e.g. `"WRITER_HELD"` (see docs/errors.md). */
export type ErrorReasonName = Exclude<keyof typeof ErrorReason, "ERROR_REASON_UNSPECIFIED">;

export interface ErrorFields {
  reason: string;
  message: string;
  code: Code;
  metadata?: Record<string, string>;
  fieldViolations?: { field: string; description: string }[];
  cause?: unknown;
}

/** Base of every error this client throws for a failed call. */
export class SessionLogError extends Error {
  /** The catalogue reason (a status without ErrorInfo too: see `toSessionLogError`). Typed so
   * an editor offers the catalogue's names (`string & {}` keeps them from collapsing into
   * `string`), while a newer service's reason still fits. */
  readonly reason: ErrorReasonName | (string & {});
  /** The gRPC status code it travelled with. */
  readonly code: Code;
  /** `ErrorInfo.metadata`: string values, keys as the catalogue documents. */
  readonly metadata: Readonly<Record<string, string>>;
  /** `BadRequest.field_violations`, when a request field was at fault. */
  readonly fieldViolations: readonly { field: string; description: string }[];

  constructor(fields: ErrorFields) {
    super(fields.message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.reason = fields.reason;
    this.code = fields.code;
    this.metadata = fields.metadata ?? {};
    this.fieldViolations = fields.fieldViolations ?? [];
  }

  /** True when the outcome is unknown or transient: safe to retry with the same eventIds. */
  get retryable(): boolean {
    return false;
  }
}

/** Malformed event, bad surface op, seq or structure violation (INVALID_ARGUMENT). */
export class ValidationError extends SessionLogError {}
/** No such session or seq (NOT_FOUND). */
export class NotFound extends SessionLogError {}
/** The session id is taken (ALREADY_EXISTS). */
export class AlreadyExists extends SessionLogError {}
/** Another live writer holds the lease (FAILED_PRECONDITION, WRITER_HELD). */
export class WriterHeld extends SessionLogError {}
/** The batch's expected next seq is not the log's (FAILED_PRECONDITION, EXPECTED_SEQ_MISMATCH). */
export class ExpectedSeqMismatch extends SessionLogError {}
/** The lease was taken over or lapsed (ABORTED): stop, and reopen only deliberately. */
export class OwnershipLost extends SessionLogError {}
/** A seq past the end of the log where the request needs one inside it (OUT_OF_RANGE). */
export class OutOfRange extends SessionLogError {}
/** A size, rate or quota limit (RESOURCE_EXHAUSTED). */
export class LimitExceeded extends SessionLogError {}
/** No or unknown credentials (UNAUTHENTICATED). */
export class Unauthenticated extends SessionLogError {}
/** The credentials do not allow the call (PERMISSION_DENIED). */
export class PermissionDenied extends SessionLogError {}
/** Unreachable, or the outcome is unknown: retry with the same eventIds. */
export class Unavailable extends SessionLogError {
  override get retryable(): boolean {
    return true;
  }
}
/** A status that maps to no sessionlog error (e.g. the service's INTERNAL). */
export class ServerError extends SessionLogError {}
/**
 * The writer was cancelled, closed, or its client closed (reason CANCELLED): deliberate, so not
 * retryable. Batches not acknowledged may or may not be in the log.
 */
export class WriterClosed extends SessionLogError {}

/**
 * A call of a client after its `close()` (reason CANCELLED): nothing was sent, and the client
 * opens no new connection for it. Not retryable: make a new client.
 */
export class ClientClosed extends SessionLogError {}

/** The ClientClosed every call of a closed client fails with. */
export function clientClosed(): ClientClosed {
  return new ClientClosed({ reason: "CANCELLED", message: "the client is closed", code: Code.Canceled });
}

/** The WriterClosed a writer's calls fail with once it was ended on purpose. */
export function writerClosed(message: string): WriterClosed {
  return new WriterClosed({ reason: "CANCELLED", message, code: Code.Canceled });
}

const BY_CODE = new Map<Code, typeof SessionLogError>([
  [Code.InvalidArgument, ValidationError],
  [Code.NotFound, NotFound],
  [Code.AlreadyExists, AlreadyExists],
  [Code.FailedPrecondition, WriterHeld],
  [Code.Aborted, OwnershipLost],
  [Code.ResourceExhausted, LimitExceeded],
  [Code.OutOfRange, OutOfRange],
  [Code.Unauthenticated, Unauthenticated],
  [Code.PermissionDenied, PermissionDenied],
  [Code.Unavailable, Unavailable],
  [Code.DeadlineExceeded, Unavailable],
]);

/**
 * Connect's message for a request it could not encode (a field out of its type's range). It
 * travels as INTERNAL like a broken stream, but nothing was sent and a retry fails the same way.
 */
const LOCAL_SERIALIZATION = "serialize binary:";

/**
 * Connect's message for a stream that ended inside a message: the service stopped, or a proxy
 * reset the stream, while one was on its way (a subscriber that stopped reading is cut so when
 * the service stops). It travels as INVALID_ARGUMENT, but nothing of the caller's was wrong:
 * the connection failed, as for TRANSPORT_CODES.
 */
const CUT_MID_MESSAGE = "protocol error: incomplete envelope";

/**
 * Codes that, without a sessionlog ErrorInfo, mean the connection failed (outcome unknown):
 * TRANSPORT_ERROR. The Python clients' set too (client/sessionlog/errors.py TRANSPORT_CODES).
 */
const TRANSPORT_CODES = new Set<Code>([
  Code.Internal, Code.Aborted, Code.Unknown, Code.Unavailable, Code.Canceled, Code.DeadlineExceeded,
]);

const BY_REASON = new Map<string, typeof SessionLogError>([
  ["WRITER_HELD", WriterHeld],
  ["EXPECTED_SEQ_MISMATCH", ExpectedSeqMismatch],
  ["ACKNOWLEDGED_PAST_LOG", ExpectedSeqMismatch],
]);

/** Whether `reason` is in the catalogue this client was built with. */
export function isCataloguedReason(reason: string): reason is ErrorReasonName {
  return reason !== "ERROR_REASON_UNSPECIFIED" && Object.prototype.hasOwnProperty.call(ErrorReason, reason)
    && typeof (ErrorReason as unknown as Record<string, unknown>)[reason] === "number";
}

const CODE_NAMES = new Map<Code, string>(
  Object.entries(Code)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [v as Code, k.replace(/[A-Z]/g, (c, i: number) => (i ? "_" : "") + c).toUpperCase()]),
);

/** The typed error a failed call stands for (anything but a ConnectError is returned unchanged). */
export function toSessionLogError(error: unknown): unknown {
  if (!(error instanceof ConnectError)) return error;
  const connect = error;
  const info = connect.findDetails(ErrorInfoSchema).find((d) => d.domain === "sessionlog");
  const violations: BadRequest_FieldViolation[] = connect.findDetails(BadRequestSchema).flatMap((d) => d.fieldViolations);
  const message = connect.rawMessage || CODE_NAMES.get(connect.code) || "error";
  const fieldViolations = violations.map((v) => ({ field: v.field, description: v.description }));
  const reason = info?.reason ?? "";
  if (reason) {
    const cls = BY_REASON.get(reason) ?? BY_CODE.get(connect.code) ?? ServerError;
    return new cls({ reason, message, code: connect.code, metadata: { ...(info?.metadata ?? {}) }, fieldViolations, cause: error });
  }
  // No sessionlog ErrorInfo, which the service's own errors always carry: the transport, gRPC or
  // a server that is not sessionlog made the status, and its code's name is no reason of the
  // catalogue. The Python clients (client/sessionlog/errors.py) map these codes the same way.
  if (connect.code === Code.Internal && connect.rawMessage.startsWith(LOCAL_SERIALIZATION)) {
    return new ValidationError({ reason: "MALFORMED_REQUEST", message: `the request cannot be encoded: ${message}`, code: Code.InvalidArgument, cause: error });
  }
  if (TRANSPORT_CODES.has(connect.code) || connect.rawMessage === CUT_MID_MESSAGE) {
    // Connect reports a connection reset (a killed server) as ABORTED, a broken stream as
    // INTERNAL and the call's timeout as DEADLINE_EXCEEDED: none is the service's
    // OWNERSHIP_LOST, and the outcome is unknown, as for UNAVAILABLE: TRANSPORT_ERROR, with the
    // code docs/errors.md gives it (`cause` keeps Connect's own).
    return new Unavailable({ reason: "TRANSPORT_ERROR", message, code: Code.Unavailable, cause: error });
  }
  if (connect.code === Code.ResourceExhausted) {
    // gRPC's own message size limit (a request over the service's max_message_bytes, an answer
    // over this client's): MESSAGE_TOO_LARGE.
    return new LimitExceeded({ reason: "MESSAGE_TOO_LARGE", message, code: Code.ResourceExhausted, cause: error });
  }
  // Anything else (UNIMPLEMENTED from a server that is not sessionlog, a proxy's answer):
  // UNEXPECTED_STATUS, its code first in the message (and in `cause`).
  const text = `${CODE_NAMES.get(connect.code) ?? "UNKNOWN"}: ${message}`;
  return new ServerError({ reason: "UNEXPECTED_STATUS", message: text, code: Code.Internal, cause: error });
}

/** The typed error of a failure inside this client: anything unexpected becomes a ServerError. */
export function typedError(error: unknown): SessionLogError {
  const mapped = toSessionLogError(error);
  if (mapped instanceof SessionLogError) return mapped;
  return new ServerError({ reason: "INTERNAL", message: String(mapped instanceof Error ? mapped.message : mapped), code: Code.Internal, cause: error });
}
