/**
 * A reader's copy of a model history, kept current by fetching only new messages.
 *
 * While no replace happens the history only grows, so a refresh asks for the messages from
 * the copy's length on, quoting the replace generation it was read at; the service answers
 * with just the tail, or, when the surface was rewritten meanwhile, with the messages from the
 * first one a replace changed (everything when the service no longer knows). A harness that
 * builds each request from this copy pays O(new or changed messages) per step.
 */
import { create } from "@bufbuild/protobuf";
import { pageSize } from "./arguments.js";
import { num, optionalNum, parseArray, scope } from "./convert.js";
import { type GetModelHistoryRequest, GetModelHistoryRequestSchema, type GetModelHistoryResponse } from "./gen/sessionlog/v1/session_service_pb.js";
import type { Message } from "./types.js";

export class HistoryCopy {
  readonly sessionId: string;
  /** The messages, in surface order. */
  messages: Message[] = [];
  /** The replace generation the copy was read at (null before the first refresh). */
  generation: number | null = null;
  /** The last seq the copy covers (null before the first refresh, and for a session without events). */
  atSeq: number | null = null;
  /** Set while the server has more pages of the history being fetched. */
  pageToken = "";
  /** Messages per page (0: the server's default). */
  pageSize = 0;

  constructor(sessionId: string) {
    this.sessionId = sessionId;
  }

  /** False while the server has more pages of the history being fetched. */
  get complete(): boolean {
    return this.pageToken === "";
  }

  /** The request that fetches what the copy lacks (or the next page of it). */
  request(): GetModelHistoryRequest {
    const size = pageSize(this.pageSize, 0);
    if (this.pageToken) return create(GetModelHistoryRequestSchema, { scope: scope(this.sessionId), pageToken: this.pageToken, pageSize: size });
    return create(GetModelHistoryRequestSchema, {
      pageSize: size,
      scope: scope(this.sessionId),
      fromIndex: BigInt(this.messages.length),
      ifGeneration: this.generation === null ? undefined : BigInt(this.generation),
    });
  }

  /** Merge one page into the copy; returns the history so far (see `complete`). */
  apply(response: GetModelHistoryResponse): Message[] {
    const fresh = parseArray(response.messagesJson, "messages") as Message[];
    const from = num(response.fromIndex);
    if (from === 0) this.messages = fresh;
    else {
      this.messages.length = from;
      for (const message of fresh) this.messages.push(message);
    }
    this.generation = num(response.replaceGeneration);
    this.atSeq = optionalNum(response.atSeq);
    this.pageToken = response.nextPageToken;
    return this.messages;
  }
}
