/**
 * The Pi harness example (examples/pi-mirror.ts): a live Pi session driven by Pi's own SDK
 * with a scripted model (pi-ai's faux provider) is mirrored into sessionlog; the mirrored
 * session's model history must equal the system prompt followed by the context Pi itself
 * builds for that session (`buildSessionContext`), through a tool call and a compaction.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fauxAssistantMessage, fauxText, fauxToolCall, registerFauxProvider } from "@mariozechner/pi-ai";
import {
  AuthStorage,
  buildSessionContext,
  createAgentSession,
  createExtensionRuntime,
  ModelRegistry,
  type ResourceLoader,
  SessionManager,
  SettingsManager,
} from "@mariozechner/pi-coding-agent";
import { PiMirror } from "../examples/pi-mirror.js";
import type { SessionLogClient } from "../src/index.js";
import { BACKENDS, sessionId, startServer } from "./support.js";

function resources(systemPrompt: string): ResourceLoader {
  return {
    getExtensions: () => ({ extensions: [], errors: [], runtime: createExtensionRuntime() }),
    getSkills: () => ({ skills: [], diagnostics: [] }),
    getPrompts: () => ({ prompts: [], diagnostics: [] }),
    getThemes: () => ({ themes: [], diagnostics: [] }),
    getAgentsFiles: () => ({ agentsFiles: [] }),
    getSystemPrompt: () => systemPrompt,
    getAppendSystemPrompt: () => [],
    extendResources: () => undefined,
    reload: async () => undefined,
  };
}

for (const backend of BACKENDS) {
  describe(`Pi mirror on ${backend}`, () => {
    let env: Awaited<ReturnType<typeof startServer>>;
    let client: SessionLogClient;
    let cwd: string;
    before(async () => {
      env = await startServer(backend);
      client = env.client;
      cwd = mkdtempSync(join(tmpdir(), "pi-mirror-"));
      writeFileSync(join(cwd, "notes.txt"), "hello from a file\n");
    });
    after(async () => {
      await env.close();
      rmSync(cwd, { recursive: true, force: true });
    });

    test("the mirrored model history is Pi's own context, through a tool call and a compaction", async () => {
      const faux = registerFauxProvider({ provider: "scripted", models: [{ id: "scripted-1", contextWindow: 100_000, maxTokens: 1000 }] });
      faux.setResponses([
        fauxAssistantMessage([fauxText("Let me read it."), fauxToolCall("read", { path: "notes.txt" }, { id: "call-1" })], { stopReason: "toolUse" }),
        fauxAssistantMessage("It says hello."),
        fauxAssistantMessage("## Summary\nThe user asked to read notes.txt; it says hello."),
        fauxAssistantMessage("Yes, it said hello."),
      ]);
      const authStorage = AuthStorage.inMemory();
      authStorage.setRuntimeApiKey("scripted", "not-a-key");
      const sessionManager = SessionManager.inMemory(cwd);
      const { session } = await createAgentSession({
        cwd,
        agentDir: join(cwd, ".agent"),
        model: faux.getModel(),
        thinkingLevel: "off",
        authStorage,
        modelRegistry: ModelRegistry.inMemory(authStorage),
        resourceLoader: resources("You are a test agent."),
        tools: ["read"],
        sessionManager,
        settingsManager: SettingsManager.inMemory({ compaction: { enabled: false } }),
      });
      const id = sessionId("pi");
      const mirror = await PiMirror.attach(client, session, sessionManager, { sessionId: id });
      try {
        await session.prompt("Read notes.txt");
        await mirror.flush();
        const piBefore = JSON.parse(JSON.stringify(buildSessionContext(sessionManager.getEntries()).messages));
        const history = await client.modelHistory(id);
        assert.deepEqual(history.slice(1), piBefore);

        await session.compact();
        await session.prompt("Did it say hello?");
        await mirror.flush();
      } finally {
        await mirror.close();
        session.dispose();
        faux.unregister();
      }

      const pi = JSON.parse(JSON.stringify(buildSessionContext(sessionManager.getEntries()).messages));
      assert.equal(pi[0].role, "compactionSummary", "Pi's context starts with the compaction summary");
      const history = await client.modelHistory(id);
      assert.deepEqual(history[0], { role: "system", content: session.agent.state.systemPrompt });
      assert.deepEqual(history.slice(1), pi);

      const stats = await client.stats(id);
      assert.equal(stats.toolCalls, 1);
      assert.equal(stats.compactions, 1);
      assert.equal(stats.turns, 2);
      const types = [];
      for await (const event of client.readEvents(id)) types.push(event.type);
      assert.ok(types.includes("tool/call") && types.includes("compaction/summary") && types.includes("request/header"));
    });
  });
}
