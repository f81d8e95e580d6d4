/**
 * A real harness on the TypeScript client: mirror a live Pi session (Pi's own SDK,
 * `@mariozechner/pi-coding-agent`) into sessionlog as it runs.
 *
 * ```ts
 * const { session } = await createAgentSession({ ..., sessionManager });
 * const mirror = await PiMirror.attach(client, session, sessionManager, { sessionId: "pi-demo" });
 * await session.prompt("Read notes.txt");
 * await session.compact();
 * await mirror.close();
 * ```
 *
 * Pi's events map onto SPEC §3: a prompt (`agent_start`..`agent_end`) is a sessionlog turn, a
 * Pi turn (one model call and its tools) a step; messages land as surface events with the
 * message object Pi persists; a tool execution is logged (`tool/call`) before it runs. A
 * compaction becomes `compaction/start`, `compaction/summary`, a surface replace by Pi's
 * `compactionSummary` message and `compaction/end`; when Pi keeps entries that the replace cannot
 * leave in place, they are appended again as model-only copies (`source.kind = "copy"`), as the
 * Pi importer does. The system prompt is node 0, and the header (provider, model, thinking
 * level, tool schemas) is reported at every prompt; the service decides whether to log it.
 */
import type { AgentSession, AgentSessionEvent, SessionEntry, SessionManager } from "@mariozechner/pi-coding-agent";
import type { AppendResult, JsonObject, JsonValue, NewEvent, SessionLogClient, Writer } from "../src/index.js";

/** A mirrored message: the event that carries it (its seq once acknowledged). */
interface Mirrored {
  type: string;
  message: JsonObject;
  seq: Promise<number>;
}

/** A JSON copy of a Pi object (drops undefined fields and functions, as Pi's own files do). */
function json<T extends JsonValue>(value: unknown): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

const TURN_END_KIND: Record<string, string> = { aborted: "aborted", error: "error", length: "max-tokens" };

export class PiMirror {
  private turn = 0;
  private step = 0;
  private lastStopReason = "stop";
  private readonly mirrored: Mirrored[] = [];
  private readonly pending: Promise<unknown>[] = [];
  private queue: Promise<void> = Promise.resolve();
  private failure: unknown = null;
  private unsubscribe: () => void = () => undefined;

  private constructor(
    private readonly client: SessionLogClient,
    private readonly writer: Writer,
    private readonly session: AgentSession,
    private readonly sessionManager: SessionManager,
  ) {}

  /** Create the sessionlog session, log the system prompt as node 0 and follow `session`. */
  static async attach(client: SessionLogClient, session: AgentSession, sessionManager: SessionManager, options: { sessionId: string }): Promise<PiMirror> {
    await client.createSession(options.sessionId, { cwd: sessionManager.getCwd(), metadata: { piSessionId: sessionManager.getSessionId() } });
    const writer = await client.writer(options.sessionId);
    const mirror = new PiMirror(client, writer, session, sessionManager);
    const prompt = session.agent.state.systemPrompt;
    mirror.send([{ type: "system/message", data: { message: { role: "system", content: prompt } }, surfaceOp: "append" }]);
    mirror.unsubscribe = session.subscribe((event) => mirror.on(event));
    return mirror;
  }

  /** Wait until everything mirrored so far is durable (rethrows the first failure). */
  async flush(): Promise<void> {
    await this.queue;
    await Promise.all(this.pending);
    if (this.failure !== null) throw this.failure;
  }

  /** Stop following, flush, and close the writer (giving the lease back). */
  async close(): Promise<void> {
    this.unsubscribe();
    try {
      await this.flush();
    } finally {
      await this.writer.close();
    }
  }

  // --- Pi events -------------------------------------------------------------------------

  private on(event: AgentSessionEvent): void {
    switch (event.type) {
      case "agent_start":
        this.turn += 1;
        this.step = 0;
        this.report(this.header());
        this.send([{ type: "turn/start", data: { turn: this.turn } }]);
        break;
      case "turn_start":
        this.step += 1;
        this.send([{ type: "step/start", data: { turn: this.turn, step: this.step } }]);
        break;
      case "message_end":
        this.message(json<JsonObject>(event.message));
        break;
      case "tool_execution_start":
        this.send([{ type: "tool/call", data: { turn: this.turn, step: this.step, callId: event.toolCallId, name: event.toolName, arguments: json(event.args ?? {}) } }]);
        break;
      case "turn_end":
        this.send([{ type: "step/end", data: { turn: this.turn, step: this.step } }]);
        break;
      case "agent_end":
        this.send([{ type: "turn/end", data: { turn: this.turn, reason: { kind: TURN_END_KIND[this.lastStopReason] ?? "completed" } } }]);
        break;
      case "compaction_start":
        this.send([{ type: "compaction/start", data: { reason: event.reason } }]);
        break;
      case "compaction_end":
        if (event.result !== undefined && !event.aborted) {
          // Pi goes on at once (the next prompt may start before the mirror catches up): take
          // the branch and the mirrored messages as they are now.
          const branch = this.sessionManager.getBranch();
          const mirrored = this.mirrored.slice();
          this.later(() => this.compaction(branch, mirrored));
        }
        else this.send([{ type: "compaction/end", data: { aborted: event.aborted } }]);
        break;
      default:
        break;
    }
  }

  private message(message: JsonObject): void {
    const role = message.role;
    if (role === "user") this.surface("user/message", { turn: this.turn, message, source: { kind: "user" } }, message);
    else if (role === "assistant") {
      this.lastStopReason = String(message.stopReason ?? "stop");
      const data: JsonObject = { turn: this.turn, step: this.step, message };
      if (message.usage !== undefined) data.usage = message.usage;
      this.surface("assistant/message", data, message);
    } else if (role === "toolResult") this.surface("tool/result", { turn: this.turn, step: this.step, message }, message);
    else this.surface("user/message", { turn: this.turn, message, source: { kind: String(role) } }, message);
  }

  /** The latest compaction: summary, the replace of the surface body, copies of kept messages. */
  private async compaction(branch: SessionEntry[], mirrored: Mirrored[]): Promise<void> {
    await this.writer.flush(); // the surface read below must see every mirrored message
    const at = branch.findLastIndex((e) => e.type === "compaction");
    const entry = branch[at] as SessionEntry & { type: "compaction"; summary: string; firstKeptEntryId: string; tokensBefore: number };
    const model = this.session.model;
    const summarySeq = (await this.appendNow([
      { type: "compaction/summary", data: json<JsonObject>({ summary: entry.summary, provider: model?.provider, model: model?.id, tokensBefore: entry.tokensBefore, firstKeptEntryId: entry.firstKeptEntryId }) },
    ])).seqs[0]!;
    // Pi's message entries before the compaction pair one to one with the messages mirrored so far.
    const messages = branch.slice(0, at).filter((e) => e.type === "message");
    if (messages.length !== mirrored.length) throw new Error(`Pi has ${messages.length} messages on the branch, the mirror ${mirrored.length}`);
    const first = branch.findIndex((e) => e.id === entry.firstKeptEntryId);
    const keptIndexes = messages.map((e, i) => [branch.indexOf(e), i] as const).filter(([position]) => position >= first).map(([, i]) => i);
    const kept = keptIndexes.map((i) => mirrored[i]!);
    const keptNodes = await Promise.all(kept.map((m) => m.seq));
    const body = (await this.client.surface(this.writer.sessionId)).nodes.slice(1);
    const summary: JsonObject = {
      message: { role: "compactionSummary", summary: entry.summary, tokensBefore: entry.tokensBefore, timestamp: Date.parse(entry.timestamp) },
      source: { kind: "compaction", entryId: entry.id },
    };
    if (body.length === 0) {
      await this.appendNow([{ type: "user/message", data: summary, surfaceOp: "append", sourceEventSeqs: [summarySeq] }]);
    } else {
      const tail = body.length - keptNodes.length;
      const inPlace = tail > 0 && body.slice(tail).every((seq, i) => seq === keptNodes[i]);
      const replaced = inPlace ? body.slice(0, tail) : body;
      const sources = [...new Set([...replaced, summarySeq])].sort((a, b) => a - b);
      await this.appendNow([{ type: "user/message", data: summary, surfaceOp: { op: "replace", startSeq: replaced[0]!, endSeq: replaced.at(-1)! }, sourceEventSeqs: sources }]);
      if (!inPlace) {
        for (const [n, original] of kept.entries()) {
          const copy: NewEvent = { type: original.type, data: { message: original.message, source: { kind: "copy", entryId: messages[keptIndexes[n]!]!.id } }, surfaceOp: "append", sourceEventSeqs: [keptNodes[n]!] };
          const seq = (await this.appendNow([copy])).seqs[0]!;
          original.seq = Promise.resolve(seq); // a later compaction keeps the copy's node
        }
      }
    }
    await this.appendNow([{ type: "compaction/end", data: {} }]);
  }

  // --- sending ---------------------------------------------------------------------------

  private header(): JsonObject {
    const model = this.session.model;
    const config: JsonObject = { provider: model?.provider ?? null, model: model?.id ?? null, thinkingLevel: this.session.thinkingLevel };
    const tools = this.session.agent.state.tools.map((t) => json<JsonObject>({ name: t.name, description: t.description, parameters: t.parameters }));
    return tools.length ? { config, tools } : { config };
  }

  private surface(type: string, data: JsonObject, message: JsonObject): void {
    const seq = this.send([{ type, data, surfaceOp: "append" }]).then((r) => r.seqs[0]!);
    seq.catch(() => undefined);
    this.mirrored.push({ type, message, seq });
  }

  /** Append in order with everything queued before (Pi's listener cannot await). */
  private send(events: NewEvent[]): Promise<AppendResult> {
    const result = this.queue.then(() => this.writer.append(events));
    this.track(result);
    return result;
  }

  private report(header: JsonObject): void {
    this.track(this.queue.then(() => this.writer.reportHeader(header)));
  }

  private appendNow(events: NewEvent[]): Promise<AppendResult> {
    return this.writer.append(events);
  }

  /** Run an async step in order with the sends (the queue waits for it). */
  private later(step: () => Promise<void>): void {
    const run = this.queue.then(step);
    this.queue = run.catch((error: unknown) => {
      this.failure ??= error;
    });
  }

  private track(promise: Promise<unknown>): void {
    this.pending.push(promise);
    promise.catch((error: unknown) => {
      this.failure ??= error;
    });
  }
}
