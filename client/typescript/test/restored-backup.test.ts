/**
 * A unary writer pointed at a database restored from a backup taken before some of its
 * acknowledged appends (deploy/CONFIGURATION.md, Backup and restore). The copy still holds the
 * writer's lease, so its token is valid there; its appends say where the acknowledgements it
 * got end, and the first past the restored log is refused with ACKNOWLEDGED_PAST_LOG, nothing
 * appended and the lease released. A client that says nothing (one that never saw an append of
 * the lease acknowledged, as an older one) appends where the restored log ends, as before.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ExpectedSeqMismatch, SessionLogClient } from "../src/index.js";
import { note } from "./events.js";
import { BACKENDS, type Backend, createDatabase, type Database, PYTHON, REPO_ROOT, ServerProcess, sessionId } from "./support.js";

/** Long enough that the writer's lease in the backup is still live once it is restored. */
const ENV = { SESSIONLOG_LEASE_TTL_MS: "60000" };

/** The operator's backup of a live database, and its restore once the service is stopped. */
class Backup {
  private readonly dir = mkdtempSync(join(tmpdir(), "sessionlog-ts-backup-"));
  private readonly dump = join(this.dir, "backup");
  private restored: Database | null = null;

  constructor(private readonly backend: Backend, private readonly db: Database) {}

  take(): void {
    if (this.backend === "sqlite") this.python("online_backup", this.file(), this.dump);
    else execFileSync("pg_dump", ["--format=custom", `--file=${this.dump}`, this.db.url]);
  }

  /** The restored database's URL: the same SQLite file, or a new PostgreSQL database. */
  restore(): string {
    if (this.backend === "sqlite") {
      this.python("restore_over", this.dump, this.file());
      return this.db.url;
    }
    this.restored = createDatabase("postgresql");
    execFileSync("pg_restore", ["--no-owner", `--dbname=${this.restored.url}`, this.dump]);
    return this.restored.url;
  }

  drop(): void {
    this.restored?.drop();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private file(): string {
    return this.db.url.slice("sqlite:///".length);
  }

  private python(helper: string, from: string, to: string): void {
    const code = `import sys\nfrom pathlib import Path\nfrom tests.support.backups import ${helper}\n${helper}(Path(sys.argv[1]), Path(sys.argv[2]))`;
    execFileSync(PYTHON, ["-c", code, from, to], { cwd: REPO_ROOT });
  }
}

async function notes(client: SessionLogClient, id: string): Promise<unknown[]> {
  const found: unknown[] = [];
  for await (const event of client.readEvents(id)) if (event.type === "test/note") found.push((event.data as { n: unknown }).n);
  return found;
}

for (const backend of BACKENDS) {
  describe(`a restored database on ${backend}`, () => {
    test("a unary writer that saw appends acknowledged past the restored log is refused, an older one is not", async () => {
      const db = createDatabase(backend);
      const backup = new Backup(backend, db);
      let server = await new ServerProcess(db.url, ENV).start();
      const port = Number(server.target.split(":")[1]);
      const client = new SessionLogClient({ target: server.target });
      const older = new SessionLogClient({ target: server.target }); // never sees an append acknowledged
      try {
        const id = sessionId("restored");
        await client.createSession(id);
        const writer = await client.leaseWriter(id);
        await writer.append([note(1), note(2)]);
        backup.take();
        const acknowledged = await writer.append([note(3), note(4)]); // not in the backup
        await server.stop();
        server = await new ServerProcess(backup.restore(), ENV, port).start();
        const restoredNextSeq = (await client.getSession(id)).nextSeq;
        assert.ok(restoredNextSeq < acknowledged.nextSeq);

        const landed = await older.append(writer.lease, [note(5)]); // as before: where the log ends
        assert.deepEqual(landed.seqs, [restoredNextSeq]);
        await assert.rejects(writer.append([note(6)]), (error: unknown) => {
          assert.ok(error instanceof ExpectedSeqMismatch, String(error));
          assert.equal(error.reason, "ACKNOWLEDGED_PAST_LOG");
          assert.equal(error.metadata.acknowledged_next_seq, String(acknowledged.nextSeq));
          assert.equal(error.metadata.next_seq, String(landed.nextSeq));
          return true;
        });
        assert.deepEqual(await notes(client, id), [1, 2, 5]);
        await assert.rejects(writer.append([note(7)]), (error: unknown) => error instanceof ExpectedSeqMismatch); // done
        await writer.close(); // quiet: the service released the lease

        const again = await client.leaseWriter(id); // no takeover needed
        await again.append([note(8)]);
        await again.close();
        assert.deepEqual(await notes(client, id), [1, 2, 5, 8]);
      } finally {
        client.close();
        older.close();
        await server.stop();
        backup.drop();
        db.drop();
      }
    });
  });
}
