// Test helpers: a real `trellis server` process on a fresh SQLite file (or
// Postgres schema), and worker processes started and killed like the runner does.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const sdkDir = path.resolve(here, '..');
export const repoRoot = path.resolve(sdkDir, '../..');

let built;
/** The trellis binary: $TRELLIS_BIN, else built once from the repository. */
export function trellisBin() {
  if (process.env.TRELLIS_BIN) return process.env.TRELLIS_BIN;
  if (!built) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trellis-ts-bin-'));
    built = path.join(dir, 'trellis');
    execFileSync('go', ['build', '-o', built, './cmd/trellis'], { cwd: repoRoot, stdio: 'inherit' });
  }
  return built;
}

/** Starts `trellis server` on store, listening on listen; resolves with the process and its URL. */
async function spawnServer(store, listen, tokenFile) {
  const proc = spawn(trellisBin(), ['server', '--store', store, '--listen', listen, '--access-log=false', '--admin-token-file', tokenFile], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 30_000);
    const onData = (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.:]+)/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.on('exit', (code) => { clearTimeout(t); reject(new Error(`server exited ${code}: ${out}`)); });
  });
  return { proc, url };
}

/** Stops a server process (SIGTERM) and waits for it to exit. */
async function stopProc(proc) {
  if (proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    await exited;
  }
}

/**
 * Starts `trellis server` on a fresh store; resolves {url, token, stop, store,
 * halt, start}: halt stops the process, start starts it again on the same store
 * and address.
 * The store is a SQLite file, or with TRELLIS_TEST_STORE=postgres a fresh schema
 * (dropped at stop) of TRELLIS_TEST_POSTGRES (default the local test database).
 */
export async function startServer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trellis-ts-'));
  const tokenFile = path.join(dir, 'admin-token');
  let store = `sqlite:${path.join(dir, 't.db')}`;
  let schema;
  if (process.env.TRELLIS_TEST_STORE === 'postgres') {
    const base = new URL(process.env.TRELLIS_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable');
    schema = `ts_${Math.random().toString(16).slice(2, 10)}`;
    base.searchParams.set('schema', schema);
    store = base.toString();
  }
  const srv = { store, dir, ...await spawnServer(store, '127.0.0.1:0', tokenFile) };
  srv.token = fs.readFileSync(tokenFile, 'utf8').trim();
  srv.halt = () => stopProc(srv.proc);
  srv.start = async () => { srv.proc = (await spawnServer(store, new URL(srv.url).host, tokenFile)).proc; };
  srv.stop = async () => {
    await stopProc(srv.proc);
    if (schema) {
      const u = new URL(store);
      try {
        execFileSync('psql', ['-h', u.hostname, '-p', u.port || '5432', '-U', u.username || 'postgres', '-d', u.pathname.slice(1), '-qc', `DROP SCHEMA IF EXISTS ${schema} CASCADE`], { stdio: 'ignore' });
      } catch { /* left for the next vacuum */ }
    }
  };
  return srv;
}

/**
 * Starts a worker command (default: the conformance worker) in its own process
 * group with the kit's environment; resolves once its record is live.
 */
export async function startWorker(srv, { queue, name, lease = 5, script = path.join(sdkDir, 'conformance/worker.mjs'), env = {} } = {}) {
  name = name ?? `ts-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const proc = spawn(process.execPath, [script], {
    detached: true,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, TRELLIS_SERVER: srv.url, TRELLIS_TOKEN: srv.token, TRELLIS_NAMESPACE: 'default', TRELLIS_QUEUE: queue, TRELLIS_WORKER_NAME: name, TRELLIS_LEASE_SECONDS: String(lease), ...env },
  });
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`worker exited ${proc.exitCode}`);
    const res = await fetch(`${srv.url}/v1/namespaces/default/workers`, { headers: { Authorization: `Bearer ${srv.token}` } });
    const body = await res.json();
    if (body.workers?.some((w) => w.name === name && w.live)) break;
    if (Date.now() > deadline) throw new Error('worker did not come up');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    proc, name,
    /** SIGKILLs the worker's process group. */
    kill() { try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* gone */ } return new Promise((r) => (proc.exitCode !== null || proc.signalCode ? r() : proc.once('exit', r))); },
    /** SIGTERM, and waits for the exit. */
    stop() { try { process.kill(-proc.pid, 'SIGTERM'); } catch { /* gone */ } return new Promise((r) => (proc.exitCode !== null || proc.signalCode ? r() : proc.once('exit', r))); },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls f until it returns a truthy value (or throws after ms). */
export async function eventually(f, ms = 15_000, what = 'condition') {
  const until = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

export function freshQueue(prefix = 'q') {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
}
