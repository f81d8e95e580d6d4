/**
 * Types of the event envelope (SPEC §2), the event vocabulary (SPEC §3), the messages it
 * carries (Pi's shapes) and every projection (SPEC §5).
 *
 * Numbers in payloads are `number`, or `bigint` for integers beyond 2^53 (see json.ts); seqs,
 * times and counts the service assigns are `number` (a log never reaches 2^53 events).
 */
import type { JsonInputObject, JsonObject, JsonValue } from "./json.js";

// --- the envelope ------------------------------------------------------------------------

/** How a surface event changes the model-visible surface (SPEC §4). */
export type SurfaceOp = "append" | { op: "replace"; startSeq: number; endSeq: number };

/**
 * An event a writer proposes; the service assigns seq and time. `data` may hold this package's
 * message types as they are (`JsonInputObject`: an undefined optional field is left out).
 */
export interface NewEvent<T extends string = string, D extends JsonInputObject = JsonInputObject> {
  type: T;
  data?: D;
  /** Unique within the session; the writers fill it in when missing (exactly-once retries). */
  eventId?: string;
  ignorable?: boolean;
  surfaceOp?: SurfaceOp;
  sourceEventSeqs?: number[];
}

/** A committed event. */
export interface Event<T extends string = string, D extends JsonObject = JsonObject> {
  seq: number;
  /** Commit time, Unix epoch milliseconds. */
  time: number;
  type: T;
  data: D;
  eventId?: string;
  ignorable: boolean;
  surfaceOp?: SurfaceOp;
  sourceEventSeqs: number[];
}

// --- messages (Pi's shapes) --------------------------------------------------------------

export interface TextContent { type: "text"; text: string; [key: string]: JsonValue }
export interface ImageContent { type: "image"; data: string; mimeType: string; [key: string]: JsonValue }
export interface ThinkingContent { type: "thinking"; thinking: string; [key: string]: JsonValue }
export interface ToolCallContent { type: "toolCall"; id: string; name: string; arguments: JsonObject; [key: string]: JsonValue }
export type ContentBlock = TextContent | ImageContent | ThinkingContent | ToolCallContent;

/** Token usage and cost (Pi's shape), on every event that cost money. */
export interface Usage {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  totalTokens: number;
  cost: { input: number; output: number; cacheRead: number; cacheWrite: number; total: number };
  [key: string]: JsonValue;
}

export interface SystemMessage { role: "system"; content: string | ContentBlock[]; [key: string]: JsonValue }
export interface UserMessage { role: "user"; content: string | ContentBlock[]; timestamp?: number; [key: string]: JsonValue | undefined }
export interface AssistantMessage {
  role: "assistant";
  content: ContentBlock[];
  provider?: string;
  model?: string;
  usage?: Usage;
  stopReason?: string;
  timestamp?: number;
  [key: string]: JsonValue | undefined;
}
export interface ToolResultMessage {
  role: "toolResult";
  toolCallId: string;
  toolName?: string;
  content: ContentBlock[];
  isError: boolean;
  timestamp?: number;
  [key: string]: JsonValue | undefined;
}
/** A model message as the surface carries it (harness messages may have other roles). */
export type Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage | JsonObject;

// --- the vocabulary (SPEC §3) ------------------------------------------------------------

export type TurnEndKind = "completed" | "aborted" | "blocked" | "error" | "max-tokens" | "interrupted" | "forked";
export type HeaderReasonName = "initial" | "resume" | "change" | "series";

/**
 * A request header (SPEC §6): full snapshot, never a delta; the system prompt is node 0. A type,
 * not an interface, so it is a `JsonInputObject` without admitting keys the service refuses
 * (HEADER_UNKNOWN_KEY).
 */
export type RequestHeader = { config: JsonObject; adapterDefaults?: JsonObject; tools?: JsonValue[] };

/** The data of each type the service knows. */
export interface EventDataByType {
  "turn/start": { turn: number };
  "turn/end": { turn: number; reason: { kind: TurnEndKind; [key: string]: JsonValue } };
  "step/start": { turn: number; step: number };
  "step/end": { turn: number; step: number };
  "tool/call": { turn: number; step: number; callId: string; name: string; arguments: JsonValue };
  "request/header": { header: RequestHeader; reason: HeaderReasonName; startsSeries?: boolean };
  "request/context": { provider: string; model: string; contextWindow?: number };
  "assistant/attempt": { turn: number; step: number; usage?: Usage; error?: JsonValue; partial?: JsonValue };
  "compaction/start": JsonObject;
  "compaction/summary": { summary: string; provider: string; model: string; usage: Usage; tokensBefore: number };
  "compaction/end": JsonObject;
  "session/end-seed": { inherited?: boolean };
  "system/message": { turn?: number; step?: number; message: SystemMessage | JsonObject };
  "user/message": { turn?: number; step?: number; message: UserMessage | JsonObject; source?: JsonObject };
  "assistant/message": { turn: number; step: number; message: AssistantMessage; usage?: Usage; interrupted?: boolean };
  "tool/result": {
    turn: number;
    step: number;
    message: ToolResultMessage;
    error?: { code: string; reason?: string };
  };
}
export type KnownEventType = keyof EventDataByType;
/** The types that carry a surfaceOp and produce model messages (SPEC §3). */
export const SURFACE_TYPES: readonly KnownEventType[] = ["system/message", "user/message", "assistant/message", "tool/result"];

/** A committed event of a known type, with its data typed. */
export type KnownEvent = { [T in KnownEventType]: Event<T, EventDataByType[T] & JsonObject> }[KnownEventType];

/** Narrow an event to a known type (its data then has that type's shape). */
export function isEventOfType<T extends KnownEventType>(event: Event, type: T): event is Event<T, EventDataByType[T] & JsonObject> {
  return event.type === type;
}

// --- sessions and leases -----------------------------------------------------------------

export interface Lease {
  sessionId: string;
  writerId: string;
  /** The fencing generation: it grows with every new holder. */
  epoch: number;
  /** When the lease lapses unless renewed, Unix epoch ms. */
  expireTimeMs: number;
  /**
   * The lease token: the holder's only credential (the writer id is a label). Set only on a
   * lease this client was granted; appends, renewals and releases present it.
   */
  token?: string;
}

export interface SessionInfo {
  id: string;
  createTimeMs: number;
  cwd?: string;
  metadata: JsonObject;
  parent?: { sessionId: string; forkSeq: number };
  nextSeq: number;
  openTurn: boolean;
  lease?: Lease;
  /**
   * The session's OpenTelemetry trace id (32 hex digits), as the service derives it: the trace
   * of its spans whichever exports them (the service's live export, the Python client's
   * `sessionlog otlp`), distinct for two namespaces' sessions of one id. Absent from a service
   * older than the field.
   */
  traceId?: string;
  /**
   * The namespace (tenant) the service keeps the session in: the caller's own (its token's;
   * `default` on a service without tokens), which the session's OTLP exports name as the
   * resource attribute `sessionlog.namespace`. Absent from a service older than the field.
   */
  namespace?: string;
}

// --- writing results ---------------------------------------------------------------------

export interface AppendResult {
  /** Seq of each event, in order (the original seq for a retried eventId). */
  seqs: number[];
  /** The log's next seq after the batch. */
  nextSeq: number;
}

/** What the service did with a reported header; `reason` is null when nothing was logged. */
export interface HeaderReport {
  reason: HeaderReasonName | null;
  startsSeries: boolean;
  headerSeq: number | null;
  appended: boolean;
  changedFields: string[];
}

/** The state a resumed writer continues from (SPEC §8). */
export interface ResumeInfo {
  lease: Lease;
  nextSeq: number;
  latestHeader: RequestHeader | null;
  latestHeaderSeq: number | null;
  replaceGeneration: number;
  repairSeqs: number[];
  endSeedSeq: number;
  /** The last turn the log holds (0 when none; a fork's inherited turns count). Turns are
   * numbered without gaps, so the next `turn/start` is `lastTurn + 1`. */
  lastTurn: number;
}

export interface ForkResult {
  session: SessionInfo;
  repairSeqs: number[];
}

// --- projections (SPEC §5) ---------------------------------------------------------------

/** Which prefix a projection reads. */
/**
 * A seq given as an argument: a non-negative safe integer, or a bigint. Anything else fails
 * at once with a ValidationError (BAD_SEQ) and nothing is sent.
 */
export type SeqArgument = number | bigint;

export interface ProjectionOptions {
  /** See the session as it was after this seq (default: the head). */
  atSeq?: SeqArgument;
  /** Show the crash repair of an open turn in memory, without writing it. */
  withRepair?: boolean;
}

/** The model history: the surface's messages in surface order. */
export type ModelHistory = Message[];

interface TranscriptRowBase {
  seq: number;
  time: number;
  replacedBy: number | null;
  /** When the event's source recorded it (its `data.recordedTime`, epoch ms), where it says so:
   * an import's rows share one commit `time`. */
  recordedTime?: number;
}
/** A surface event that entered with `append`; `data` is its projected message; `interrupted`
 * when the event says the user cut the answer off. */
export interface TranscriptMessageRow extends TranscriptRowBase { kind: "message"; type: string; data: Message; interrupted?: true }
/** A log-only event; `data` is the event's data. */
export interface TranscriptEventRow extends TranscriptRowBase { kind: "event"; type: string; data: JsonObject }
/** Where a replacing event (a compaction summary, a trimmed tool result) landed. */
export interface TranscriptReplaceRow extends TranscriptRowBase {
  kind: "replace";
  type: "surface/replace";
  eventType: string;
  replaces: number[];
  startSeq: number;
  endSeq: number;
  data: Message;
  /** The replacing event says the answer was cut off (a voice answer cut to what was heard). */
  interrupted?: true;
}
export type TranscriptRow = TranscriptMessageRow | TranscriptEventRow | TranscriptReplaceRow;

/** The exact request of a prefix: `{...header.config, messages, tools?}`, canonical JSON. */
export interface RequestView {
  request: JsonObject & { messages: Message[]; tools?: JsonValue[] };
  /** The canonical (RFC 8785) bytes the hash is over. */
  requestJson: Uint8Array;
  sha256: string;
  headerSeq: number | null;
  /** The seq the prefix ends at; null for a session without events (its request is `{"messages":[]}`). */
  atSeq: number | null;
}

/** Derived metrics over every event that carries usage. */
export interface Stats {
  events: number;
  model: string | null;
  provider: string | null;
  thinkingLevel: string | null;
  messages: number;
  turns: number;
  /** Model calls: assistant messages appended (not copies or replaces) and `assistant/attempt`s. */
  modelCalls: number;
  steps: number;
  toolCalls: number;
  toolErrors: number;
  compactions: number;
  replaces: number;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  costUsd: number;
  /** Events whose usage has tokens but no cost (no pricing for the model): `costUsd` leaves them out. */
  unpricedEvents: number;
  [key: string]: JsonValue;
}

export interface SurfaceView {
  nodes: number[];
  replaceGeneration: number;
  /** The last seq the surface covers; null for a session without events (as every projection's). */
  atSeq: number | null;
}

/** Subscription marker: the replay is complete; later items are live events. */
export interface CaughtUp {
  caughtUp: true;
  nextSeq: number;
}
