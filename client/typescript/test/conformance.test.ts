/**
 * The client conformance scenario (tests/conformance/README.md) against the TypeScript client:
 * the same steps and the same expected log as the Python clients.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type CaughtUp, type Event, OwnershipLost, SessionLogClient } from "../src/index.js";
import { assistant, note, stepEnd, stepStart, system, toolCall, toolResult, turnEnd, turnStart, user } from "./events.js";
import { BACKENDS, createDatabase, type Database, REPO_ROOT, ServerProcess } from "./support.js";

/** Step 8: bytes the service buffers per subscriber, and the notes that overflow it. */
export const SUBSCRIBER_BUFFER = 16 * 1024;
export const SLOW_NOTES = 200;
export const NOTE_TEXT = "x".repeat(1000);

const EXPECTED = JSON.parse(readFileSync(join(REPO_ROOT, "tests", "conformance", "expected_log.json"), "utf8")) as unknown[];

/**
 * The log as the scenario compares it: times go (and message timestamps become "<time>"); eventIds the client generated become
 * "<generated>" (each unique); those the scenario chose and the service's repair ids stay;
 * events the service wrote without one (its header and seed events) have null.
 */
export function normalise(events: Event[]): unknown[] {
  const ids = new Set<string>();
  return events.map((event) => {
    let eventId: string | null = null;
    if (event.eventId !== undefined) {
      assert.ok(!ids.has(event.eventId), `eventId ${event.eventId} appears twice`);
      ids.add(event.eventId);
      const kept = event.eventId.startsWith("e-") || event.eventId.startsWith("repair-");
      eventId = kept ? event.eventId : "<generated>";
    }
    const data = structuredClone(event.data);
    const message = data.message as Record<string, unknown> | undefined;
    if (message !== undefined && typeof message.timestamp === "number") message.timestamp = "<time>"; // a repair's
    const out: Record<string, unknown> = { seq: event.seq, type: event.type, data, eventId };
    if (event.ignorable) out.ignorable = true;
    if (event.surfaceOp !== undefined) out.surfaceOp = event.surfaceOp;
    if (event.sourceEventSeqs.length) out.sourceEventSeqs = event.sourceEventSeqs;
    return out;
  });
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

for (const backend of BACKENDS) {
  describe(`conformance on ${backend}`, () => {
    let db: Database;
    let server: ServerProcess;
    let client: SessionLogClient;
    before(async () => {
      db = createDatabase(backend);
      // A small per-subscriber buffer, so step 8's subscriber that stops reading is cut off.
      server = await new ServerProcess(db.url, { SESSIONLOG_SUBSCRIBER_BUFFER_BYTES: String(SUBSCRIBER_BUFFER) }).start();
      client = new SessionLogClient({ target: server.target });
    });
    after(async () => {
      client.close();
      await server.stop();
      db.drop();
    });

    test("the scenario leaves the expected log", async () => {
      const id = `conformance-ts-${backend}`;
      // 1. subscribe (the session does not exist yet: create it first)
      await client.createSession(id);
      const seen: (Event | CaughtUp)[] = [];
      const subscription = client.subscribe(id);
      const following = (async () => {
        for await (const item of subscription) seen.push(item);
      })();
      following.catch(() => undefined); // awaited at the end; a failure must not go unhandled first
      try {

      // 2. stream
      const w1 = await client.writer(id, { writerId: "w1" });
      assert.equal((await w1.reportHeader({ config: { model: "m1" } })).reason, "initial");
      await w1.append([system("be brief"), turnStart(1), user("hello"), stepStart(1, 1), assistant(1, 1, "", [["c1", "bash"]]), toolCall(1, 1, "c1", "bash")]);

      // 3. kill the server mid-stream
      const pipelined = w1.append([toolResult(1, 1, "c1", "ok"), stepEnd(1, 1), stepStart(1, 2)]);
      await server.kill();
      await server.start();
      assert.deepEqual((await pipelined).seqs, [7, 8, 9]);

      // 4. retry
      assert.deepEqual((await w1.append([note(1, { eventId: "e-retry" })])).seqs, [10]);
      assert.deepEqual((await w1.append([note(1, { eventId: "e-retry" }), note(2, { eventId: "e-after" })])).seqs, [10, 11]);

      // 5. takeover
      const w2 = await client.writer(id, { writerId: "w2", takeover: true });
      await assert.rejects(w1.append([note(3)]), OwnershipLost);
      await assert.rejects(w1.append([note(4)]), OwnershipLost);
      await w2.append([assistant(1, 2, "done"), stepEnd(1, 2), turnEnd(1)]);
      await w2.close();

      // 6. lease loss
      const u1 = await client.leaseWriter(id, { writerId: "u1", heartbeatMs: 100 });
      await u1.append([turnStart(2)]);
      const u2 = await client.leaseWriter(id, { writerId: "u2", takeover: true });
      await assert.rejects(u1.append([note(5)]), OwnershipLost);

      // 7. crash, then resume with repair
      await u2.append([user("again"), stepStart(2, 1), assistant(2, 1, "", [["c2", "edit"]]), toolCall(2, 1, "c2", "edit")]);
      // u2 is abandoned: no release, as if its process died
      const w3 = await client.writer(id, { writerId: "w3", resume: true, takeover: true });
      assert.deepEqual(w3.resumed?.repairSeqs, [20, 21, 22]);

      // 8. a slow subscriber is cut off, and resumes on its own
      const causes: string[] = [];
      const slow = client.subscribe(id, { onResubscribe: (_from, cause) => causes.push(cause.reason) })[Symbol.asyncIterator]();
      const slowSeen: Event[] = [];
      for (let item = await slow.next(); !item.done; item = await slow.next()) {
        if ("caughtUp" in item.value) break;
        slowSeen.push(item.value);
      }
      const notes = Array.from({ length: SLOW_NOTES }, (_, i) => w3.append([{ type: "test/note", data: { n: 100 + i, text: NOTE_TEXT }, ignorable: true, eventId: `e-slow-${i}` }]));
      await Promise.all(notes);
      await w3.close();
      const head = 24 + SLOW_NOTES;
      while (slowSeen.length < head) {
        const item = await slow.next();
        assert.ok(!item.done);
        if ("seq" in item.value) slowSeen.push(item.value);
      }
      await slow.return?.(undefined);
      assert.ok(causes.includes("SUBSCRIBER_TOO_SLOW"), `the slow subscriber was cut off (${causes.join(",")})`);
      assert.deepEqual(slowSeen.map((e) => e.seq), Array.from({ length: head }, (_, i) => i), "and saw every event once, in order");

      // 9. check
      const log = await collect(client.readEvents(id));
      if (process.env.SESSIONLOG_WRITE_EXPECTED) writeFileSync(process.env.SESSIONLOG_WRITE_EXPECTED, JSON.stringify(normalise(log), null, 1) + "\n");
      assert.deepEqual(normalise(log), EXPECTED);
      const deadline = Date.now() + 10_000;
      while (seen.filter((i) => "seq" in i).length < log.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      subscription.cancel();
      await following;
      const delivered = seen.filter((i): i is Event => "seq" in i);
      assert.deepEqual(delivered.map((e) => e.seq), log.map((e) => e.seq), "the subscriber saw every event once, in order");
      assert.equal(seen.filter((i) => "caughtUp" in i).length, 1);
      } finally {
        subscription.cancel();
      }
    });
  });
}
