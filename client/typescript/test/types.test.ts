/**
 * The shipped types describe what a harness writes and what comes back: messages typed with
 * this package's own message types (and the data of `EventDataByType`) go into events as they
 * are, a model history read back can be appended again, and every stats key is typed. This file
 * compiles only if they do; it then checks the values against a real server.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type {
  AssistantMessage,
  EventDataByType,
  Message,
  NewEvent,
  RequestHeader,
  SessionLogClient,
  Stats,
  ToolResultMessage,
  Usage,
  UserMessage,
} from "../src/index.js";
import { BACKENDS, sessionId, startServer } from "./support.js";

const usage: Usage = { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, totalTokens: 15, cost: { input: 0.01, output: 0.02, cacheRead: 0, cacheWrite: 0, total: 0.03 } };

/** One turn built from the package's types, as a harness builds it (optional fields left out or undefined). */
function typedTurn(): NewEvent[] {
  const asked: UserMessage = { role: "user", content: "list the files", timestamp: 1 };
  const answer: AssistantMessage = {
    role: "assistant",
    content: [{ type: "toolCall", id: "c1", name: "ls", arguments: { path: "." } }],
    model: "m-1",
    usage,
    stopReason: undefined, // an optional field a harness leaves undefined is left out, as JSON.stringify leaves it
  };
  const result: ToolResultMessage = { role: "toolResult", toolCallId: "c1", toolName: "ls", content: [{ type: "text", text: "a b" }], isError: false };
  const said: EventDataByType["assistant/message"] = { turn: 1, step: 1, message: answer, usage };
  const typed: NewEvent<"assistant/message", EventDataByType["assistant/message"]> = { type: "assistant/message", data: said, surfaceOp: "append" };
  return [
    { type: "turn/start", data: { turn: 1 } },
    { type: "user/message", data: { turn: 1, message: asked }, surfaceOp: "append" },
    { type: "step/start", data: { turn: 1, step: 1 } },
    typed,
    { type: "tool/result", data: { turn: 1, step: 1, message: result }, surfaceOp: "append" },
    { type: "step/end", data: { turn: 1, step: 1 } },
    { type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } },
  ];
}

const backend = BACKENDS[0]!;

describe(`types on ${backend}`, () => {
  let env: Awaited<ReturnType<typeof startServer>>;
  let client: SessionLogClient;
  before(async () => {
    env = await startServer(backend);
    client = env.client;
  });
  after(async () => env.close());

  test("typed messages and headers go into events as they are, and a history read back can be appended again", async () => {
    const id = sessionId("typed");
    const writer = await client.writer(id, { createIfMissing: true });
    const header: RequestHeader = { config: { provider: "acme", model: "m-1" }, tools: [{ name: "ls", parameters: { type: "object" } }], adapterDefaults: undefined };
    await writer.reportHeader(header);
    await writer.append(typedTurn());
    await writer.close();
    const history: Message[] = await client.modelHistory(id);
    assert.deepEqual(history.map((m) => m.role), ["user", "assistant", "toolResult"]);
    assert.equal("stopReason" in history[1]!, false, "an undefined field is left out");

    const copy = sessionId("copy");
    const again = await client.writer(copy, { createIfMissing: true });
    const [asked, answer, result] = history as [Message, Message, Message];
    await again.append([
      { type: "turn/start", data: { turn: 1 } },
      { type: "user/message", data: { turn: 1, message: asked }, surfaceOp: "append" },
      { type: "step/start", data: { turn: 1, step: 1 } },
      { type: "assistant/message", data: { turn: 1, step: 1, message: answer }, surfaceOp: "append" },
      { type: "tool/result", data: { turn: 1, step: 1, message: result }, surfaceOp: "append" },
    ]);
    await again.close();
    assert.deepEqual(await client.modelHistory(copy), history);
  });

  test("every stats key is typed", async () => {
    const id = sessionId("stats");
    const writer = await client.writer(id, { createIfMissing: true });
    await writer.append(typedTurn());
    await writer.close();
    const stats: Stats = await client.stats(id);
    const modelCalls: number = stats.modelCalls;
    assert.equal(modelCalls, 1);
    assert.equal(stats.toolCalls, 1);
  });

  test("a transcript row carries its event's recordedTime, typed", async () => {
    const id = sessionId("recorded");
    const writer = await client.writer(id, { createIfMissing: true });
    await writer.append([{ type: "x/note", ignorable: true, data: { recordedTime: 1_700_000_000_000 } }, { type: "x/note", ignorable: true, data: {} }]);
    await writer.close();
    const rows = await client.transcript(id);
    const recorded: (number | undefined)[] = rows.map((row) => row.recordedTime);
    assert.deepEqual(recorded, [1_700_000_000_000, undefined]);
  });
});
