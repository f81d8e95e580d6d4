/**
 * A service far away: the client connects, writes and subscribes over a link with a long round
 * trip (a service in another region), with TLS and without. The link is
 * tests/support/latency_proxy.py, forwarding bytes with ONE_WAY_DELAY_MS added each way (a
 * 400 ms round trip: TLS takes 0.8 s before the service's SETTINGS arrive). The Python clients
 * gave a connect attempt as little as 100 ms there (tests/transport/test_far_service.py);
 * Connect gives a connection as long as the call's own timeout, so this client connected
 * already: the test keeps it so. Bounds are loose (a loaded machine).
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { SessionLogClient } from "../src/index.js";
import { note } from "./events.js";
import { BACKENDS, createDatabase, type Database, latencyProxy, makeCertificate, type Proxy, ServerProcess, sessionId } from "./support.js";

const ONE_WAY_DELAY_MS = 200;
/** A loose bound on what each test does over the link (a few round trips, on a loaded machine). */
const WITHIN_MS = 15_000;

const backend = BACKENDS[0]!;

for (const tls of [false, true]) {
  describe(`a far service (${tls ? "TLS" : "plaintext"}) on ${backend}`, () => {
    let dir: string;
    let db: Database;
    let server: ServerProcess;
    let proxy: Proxy;
    let ca: Buffer | undefined;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), "sessionlog-far-"));
      let env: Record<string, string> = {};
      if (tls) {
        const { key, cert } = makeCertificate(dir);
        ca = readFileSync(cert);
        env = { SESSIONLOG_TLS_CERT_FILE: cert, SESSIONLOG_TLS_KEY_FILE: key };
      }
      db = createDatabase(backend);
      server = await new ServerProcess(db.url, env, 0, ca === undefined ? undefined : { ca }).start();
      proxy = await latencyProxy(server.target, ONE_WAY_DELAY_MS);
    });
    after(async () => {
      await proxy?.close();
      await server?.stop();
      db?.drop();
      rmSync(dir, { recursive: true, force: true });
    });

    /** `scenario` with a fresh client through the proxy (a connection of its own), timed. */
    async function farClient(scenario: (client: SessionLogClient) => Promise<void>): Promise<void> {
      const client = new SessionLogClient({ target: proxy.target, ca });
      const started = Date.now();
      try {
        await scenario(client);
      } finally {
        client.close();
      }
      assert.ok(Date.now() - started < WITHIN_MS, `took ${Date.now() - started} ms`);
    }

    test("a unary call connects and is answered", async () => {
      const id = sessionId("far");
      await farClient(async (client) => {
        assert.equal((await client.createSession(id)).id, id);
        assert.equal((await client.getSession(id)).id, id);
      });
    });

    test("a writer opens and writes", async () => {
      const id = sessionId("far");
      await farClient(async (client) => {
        const writer = await client.writer(id, { createIfMissing: true });
        assert.deepEqual((await writer.append([note(0)])).seqs, [0]);
        await writer.close();
      });
    });

    test("a subscription replays and catches up", async () => {
      const id = sessionId("far");
      const near = new SessionLogClient({ target: server.target, ca });
      try {
        const writer = await near.writer(id, { createIfMissing: true });
        await writer.append([note(0)]);
        await writer.close();
      } finally {
        near.close();
      }
      await farClient(async (client) => {
        const seen: unknown[] = [];
        for await (const item of client.subscribe(id)) {
          seen.push("caughtUp" in item ? "caughtUp" : item.seq);
          if ("caughtUp" in item) break;
        }
        assert.deepEqual(seen, [0, "caughtUp"]);
      });
    });
  });
}
