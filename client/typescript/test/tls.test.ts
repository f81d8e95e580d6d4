/**
 * A CA turns TLS on for a bare host:port target (as the Python client's ca_file does), so a
 * token given with it never travels in plaintext; an explicit http:// target with a CA is refused.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { SessionLogClient } from "../src/index.js";
import { BACKENDS, createDatabase, type Database, makeCertificate, ServerProcess, sessionId } from "./support.js";

const backend = BACKENDS[0]!;

describe(`TLS on ${backend}`, () => {
  let dir: string;
  let db: Database;
  let server: ServerProcess;
  let ca: Buffer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "sessionlog-tls-"));
    const { key, cert } = makeCertificate(dir);
    ca = readFileSync(cert);
    db = createDatabase(backend);
    server = await new ServerProcess(db.url, { SESSIONLOG_TLS_CERT_FILE: cert, SESSIONLOG_TLS_KEY_FILE: key }, 0, { ca }).start();
  });
  after(async () => {
    await server?.stop();
    db?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a CA with a host:port target speaks TLS, token and all", async () => {
    const client = new SessionLogClient({ target: server.target, ca, token: "a-secret", retry: { attempts: 2, initialDelayMs: 50, maxDelayMs: 50 } });
    try {
      // The service speaks TLS only: a plaintext connection would fail, not answer.
      const id = sessionId("tls");
      await client.createSession(id);
      assert.equal((await client.getSession(id)).id, id);
    } finally {
      client.close();
    }
  });

  test("a CA with an explicit http:// target is refused at construction", () => {
    assert.throws(() => new SessionLogClient({ target: `http://${server.target}`, ca }), (e: unknown) => e instanceof TypeError && /http:\/\/.*CA/.test(e.message));
    assert.doesNotThrow(() => new SessionLogClient({ target: `https://${server.target}`, ca }).close());
    // Without a CA a token may go over plaintext (a loopback service), as with the Python client.
    assert.doesNotThrow(() => new SessionLogClient({ target: server.target, token: "a-secret" }).close());
  });
});
