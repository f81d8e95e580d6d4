/**
 * Real servers for the tests: `python -m sessionlog serve` as a child process on a free
 * loopback port, on a fresh SQLite file or a fresh PostgreSQL database (dropped afterwards).
 *
 * SESSIONLOG_PYTHON names the interpreter with sessionlog installed (default: the repository's
 * .venv); SESSIONLOG_TEST_PG the PostgreSQL admin URL (as for pytest); SESSIONLOG_TS_BACKENDS
 * limits the backends (comma-separated, default "sqlite,postgresql").
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SessionLogClient, Unavailable } from "../src/index.js";

export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
export const PYTHON = process.env.SESSIONLOG_PYTHON ?? join(REPO_ROOT, ".venv", "bin", "python");
const PG_ADMIN = process.env.SESSIONLOG_TEST_PG ?? "postgresql://postgres@127.0.0.1:5432/test";

export type Backend = "sqlite" | "postgresql";
export const BACKENDS: Backend[] = (process.env.SESSIONLOG_TS_BACKENDS ?? "sqlite,postgresql").split(",").map((b) => b.trim() as Backend);

/** A fresh database of `backend`; `drop()` removes it. */
export interface Database {
  url: string;
  drop(): void;
}

function python(code: string, ...args: string[]): string {
  return execFileSync(PYTHON, ["-c", code, ...args], { encoding: "utf8" });
}

export function createDatabase(backend: Backend): Database {
  if (backend === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "sessionlog-ts-"));
    return { url: `sqlite:///${join(dir, "sessionlog.db")}`, drop: () => rmSync(dir, { recursive: true, force: true }) };
  }
  const name = `sessionlog_ts_${process.pid}_${Math.random().toString(16).slice(2, 8)}`;
  const admin = "import psycopg, sys\nwith psycopg.connect(sys.argv[1], autocommit=True) as c: c.execute(sys.argv[2])";
  python(admin, PG_ADMIN, `CREATE DATABASE "${name}"`);
  return {
    url: `${PG_ADMIN.slice(0, PG_ADMIN.lastIndexOf("/"))}/${name}`,
    drop: () => python(admin, PG_ADMIN, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`) && undefined,
  };
}

/** A self-signed certificate for 127.0.0.1, made for this run in `dir`; returns its files. */
export function makeCertificate(dir: string): { key: string; cert: string } {
  const key = join(dir, "key.pem");
  const cert = join(dir, "cert.pem");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key, "-out", cert,
    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], { stdio: "ignore" });
  return { key, cert };
}

/** The lowest port `freePort` names: above the well-known and most registered services'. */
const FIRST_NAMED_PORT = 10_000;

/** The first port of the kernel's ephemeral range (Linux's default where it is not told). */
function ephemeralLow(): number {
  try {
    const low = Number.parseInt(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0] ?? "", 10);
    return Number.isInteger(low) && low > FIRST_NAMED_PORT ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Whether a listener can bind 127.0.0.1:`port` now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/**
 * A port free now and below the kernel's ephemeral range, for a server the test names before it
 * starts (and starts again at the same address) or an address nothing listens on. Not one from
 * port 0: that lies in the ephemeral range, where the outgoing connections of every test process
 * (the files run side by side) pick their local ports, so a server stopped for a restart could
 * find its port taken by one (as bench/procs.py's `free_port`, which the Python tests use, says).
 */
export async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let tries = 0; tries < 100; tries++) {
    const port = FIRST_NAMED_PORT + Math.floor(Math.random() * (low - FIRST_NAMED_PORT));
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port between ${FIRST_NAMED_PORT} and ${low} in 100 tries`);
}

/** `sessionlog serve` in a child process; `kill()` is SIGKILL (nothing flushed beyond commits). */
export class ServerProcess {
  target = "";
  private proc: ChildProcess | null = null;
  private stderr = "";

  /** `tls.ca`: the service speaks TLS only (its certificate in `env`), and is probed over https://. */
  constructor(
    readonly db: string,
    private readonly env: Record<string, string> = {},
    private port = 0,
    private readonly tls?: { ca: Buffer },
  ) {}

  async start(): Promise<this> {
    if (!this.port) this.port = await freePort();
    this.target = `127.0.0.1:${this.port}`;
    this.stderr = "";
    const proc = spawn(PYTHON, ["-m", "sessionlog", "serve", "--db", this.db, "--listen", this.target], {
      cwd: REPO_ROOT,
      // One process (the default is one per core): kill() and restarts are of that process.
      env: { ...process.env, SESSIONLOG_LOG_LEVEL: "warning", SESSIONLOG_METRICS_LISTEN: "", SESSIONLOG_WORKERS: "1", ...this.env },
      stdio: ["ignore", "ignore", "pipe"],
    });
    proc.stderr?.on("data", (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-4000);
    });
    this.proc = proc;
    const probeTarget = this.tls ? `https://${this.target}` : this.target;
    const probe = new SessionLogClient({ target: probeTarget, ca: this.tls?.ca, timeoutMs: 1000, retry: { attempts: 1, initialDelayMs: 0, maxDelayMs: 0 } });
    try {
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (proc.exitCode !== null) throw new Error(`server exited: ${this.stderr}`);
        try {
          await probe.getSession("probe");
          break;
        } catch (error) {
          if (!(error instanceof Unavailable)) break; // it answered: it is up
          if (Date.now() > deadline) throw new Error(`server did not start: ${this.stderr}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    } finally {
      probe.close();
    }
    return this;
  }

  /** SIGKILL and wait for the exit. */
  async kill(): Promise<void> {
    await this.signal("SIGKILL");
  }

  /** SIGTERM (graceful) and wait for the exit. */
  async stop(): Promise<void> {
    await this.signal("SIGTERM");
  }

  /** SIGSTOP: the service hangs (its connections stay open, nothing answers, not even a PING). */
  pause(): void {
    this.proc?.kill("SIGSTOP");
  }

  /** SIGCONT after `pause()`. */
  unpause(): void {
    this.proc?.kill("SIGCONT");
  }

  private async signal(signal: NodeJS.Signals): Promise<void> {
    const proc = this.proc;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    proc.kill(signal);
    await exited;
    this.proc = null;
  }
}

/** A server on a fresh database of `backend`, with a client; `close()` tears everything down. */
export async function startServer(backend: Backend, env: Record<string, string> = {}): Promise<{ server: ServerProcess; client: SessionLogClient; close(): Promise<void> }> {
  const db = createDatabase(backend);
  const server = await new ServerProcess(db.url, env).start();
  const client = new SessionLogClient({ target: server.target });
  return {
    server,
    client,
    async close() {
      client.close();
      await server.stop();
      db.drop();
    },
  };
}

let counter = 0;
/** A session id unique within the test run. */
export function sessionId(prefix = "ts"): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** A proxy of tests/support/ in a child process: `target` names it, `close()` stops it. */
export interface Proxy {
  target: string;
  close(): Promise<void>;
}

/** `python -m tests.support.<module> ARGS...`: waits for its `listening HOST:PORT` line; it
 * serves until its stdin closes. */
async function pythonProxy(module: string, args: string[]): Promise<Proxy> {
  const proc = spawn(PYTHON, ["-m", `tests.support.${module}`, ...args], {
    cwd: REPO_ROOT,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const target = await new Promise<string>((resolve, reject) => {
    let out = "";
    proc.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const line = /^listening (\S+)\n/m.exec(out);
      if (line) resolve(line[1]!);
    });
    proc.once("exit", (code) => reject(new Error(`the proxy exited (${code}) before listening`)));
  });
  return {
    target,
    async close() {
      const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
      proc.stdin!.end();
      await exited;
    },
  };
}

/**
 * tests/support/lossy_proxy.py in a child process: it forwards unary calls to `upstream`, and
 * the first `losses` answers to `method` are lost (UNAVAILABLE) after the server has made them.
 */
export function answerLosingProxy(upstream: string, method: string, losses = 1, kept = 0): Promise<Proxy> {
  return pythonProxy("lossy_proxy", [upstream, method, String(losses), String(kept)]);
}

/**
 * tests/support/latency_proxy.py in a child process: it forwards the bytes of every connection
 * to `upstream` with `delayMs` added each way (a service far away), TLS and all.
 */
export function latencyProxy(upstream: string, delayMs: number): Promise<Proxy> {
  return pythonProxy("latency_proxy", [upstream, String(delayMs)]);
}
