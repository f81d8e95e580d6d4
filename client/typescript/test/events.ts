/** Small builders of valid SPEC §3 events for the tests. */
import type { JsonObject, NewEvent } from "../src/index.js";

export const system = (text: string): NewEvent => ({ type: "system/message", data: { message: { role: "system", content: text } }, surfaceOp: "append" });
export const user = (text: string): NewEvent => ({ type: "user/message", data: { message: { role: "user", content: text } }, surfaceOp: "append" });
export const note = (n: number | bigint, extra: Partial<NewEvent> = {}): NewEvent => ({ type: "test/note", data: { n }, ignorable: true, ...extra });
export const turnStart = (turn: number): NewEvent => ({ type: "turn/start", data: { turn } });
export const turnEnd = (turn: number, kind = "completed"): NewEvent => ({ type: "turn/end", data: { turn, reason: { kind } } });
export const stepStart = (turn: number, step: number): NewEvent => ({ type: "step/start", data: { turn, step } });
export const stepEnd = (turn: number, step: number): NewEvent => ({ type: "step/end", data: { turn, step } });

export function assistant(turn: number, step: number, text: string, calls: [string, string][] = [], usage?: JsonObject): NewEvent {
  const content: JsonObject[] = text ? [{ type: "text", text }] : [];
  for (const [id, name] of calls) content.push({ type: "toolCall", id, name, arguments: {} });
  const data: JsonObject = { turn, step, message: { role: "assistant", content } };
  if (usage) data.usage = usage;
  return { type: "assistant/message", data, surfaceOp: "append" };
}

export const toolCall = (turn: number, step: number, callId: string, name: string): NewEvent => ({
  type: "tool/call",
  data: { turn, step, callId, name, arguments: "{}" },
});

export function toolResult(turn: number, step: number, callId: string, text: string, isError = false): NewEvent {
  return {
    type: "tool/result",
    data: { turn, step, message: { role: "toolResult", toolCallId: callId, content: [{ type: "text", text }], isError } },
    surfaceOp: "append",
  };
}

export function usage(input: number, output: number): JsonObject {
  return { input, output, cacheRead: 0, cacheWrite: 0, totalTokens: input + output, cost: { input: 0.001, output: 0.002, cacheRead: 0, cacheWrite: 0, total: 0.003 } };
}
