/**
 * @sessionlog/client: a TypeScript client for sessionlog.
 *
 * `SessionLogClient` (client.ts) makes the calls; `Writer` (writer.ts) is the streaming
 * writer, `LeaseWriter` (lease-writer.ts) the unary one; errors are typed (errors.ts); payloads
 * are lossless JSON (json.ts); types.ts has the envelope, the vocabulary and every projection.
 */
export { DEFAULT_TARGET, SessionLogClient, type ClientOptions, type HeldLease } from "./client.js";
export { CLOSE_WITHIN_MS, Writer, withEventIds, type WriterOptions } from "./writer.js";
export { LeaseWriter, MAX_HEARTBEAT_MS, type LeaseWriterOptions } from "./lease-writer.js";
export { Subscription, isResumableCut, type SubscribeOptions } from "./subscription.js";
export { HistoryCopy } from "./history.js";
export * from "./errors.js";
export * from "./types.js";
export { encodeJson, parseJson, stringifyJson, type JsonInput, type JsonInputObject, type JsonObject, type JsonValue } from "./json.js";
export { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
export { ErrorReason } from "./gen/sessionlog/v1/error_reason_pb.js";
export { SessionService } from "./gen/sessionlog/v1/session_service_pb.js";
