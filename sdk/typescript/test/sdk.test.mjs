// The SDK's workers (in this process) and client against a real server:
// replay after a restart, hand-back at a graceful stop, retries, waits,
// children, cancellation, the client's calls and clear errors for bad input.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client, Worker, defineWorkflow, defineJob, NonRetryableError, StepError, ChildError, MapError, ApiError,
  RunFailedError, CancelledError,
} from '../src/index.js';
import { startServer, eventually, freshQueue } from './helpers.mjs';

let srv; let client;
const workers = [];

before(async () => {
  srv = await startServer();
  client = new Client({ server: srv.url, token: srv.token });
});

after(async () => {
  for (const w of workers) await w.stop().catch(() => {});
  await srv?.stop();
});

/** Starts an in-process worker on queue with defs. */
async function worker(queue, defs, opts = {}) {
  const w = new Worker({ server: srv.url, token: srv.token, queues: [queue], handleSignals: false, leaseMs: 5000, logger: () => {}, ...opts });
  w.register(defs);
  const ready = w.ready();
  w.running = w.run();
  await ready;
  workers.push(w);
  return w;
}

const calls = new Map();
const count = (k) => calls.set(k, (calls.get(k) ?? 0) + 1);

const replayWf = defineWorkflow('t.replay', async (ctx, input) => {
  const one = await ctx.step.run('one', async () => { count(`one:${ctx.run.id}`); return input.v + 1; });
  const ev = await ctx.waitForEvent('go');
  const two = await ctx.step.run('two', async () => one + ev.add);
  return { two, attempt: ctx.run.attempt };
});

test('a run waiting on one worker is replayed by another after a restart', async () => {
  const q = freshQueue();
  const a = await worker(q, [replayWf]);
  const run = await client.start('t.replay', { v: 1 }, { queue: q });
  await eventually(async () => (await client.getRun(run.id)).status === 'waiting', 10_000, 'waiting');
  await a.stop();
  const b = await worker(q, [replayWf]);
  await client.sendEvent(run.id, 'go', { add: 10 });
  assert.deepEqual(await client.result(run.id, { timeout: 10_000 }), { two: 12, attempt: 2 });
  assert.equal(calls.get(`one:${run.id}`), 1, 'step one ran once');
  const names = [];
  let resumed;
  for await (const ev of client.stream(run.id)) { names.push(ev.name); if (ev.name === 'run.resumed') resumed = ev.data; }
  assert.deepEqual(names, ['run.started', 'step.completed', 'run.waiting', 'run.resumed', 'step.completed', 'run.succeeded']);
  assert.deepEqual(resumed, { attempt: 2, replayed: 2 });
  await b.stop();
});

const handBackWf = defineWorkflow('t.handback', async (ctx) => {
  await ctx.step.run('pre', async () => { count(`pre:${ctx.run.id}`); return 1; });
  return ctx.step.run('long', async ({ signal }) => {
    await new Promise((resolve, reject) => {
      const t = setTimeout(resolve, ctx.run.attempt === 1 ? 30_000 : 10);
      signal.addEventListener('abort', () => { clearTimeout(t); reject(signal.reason); });
    });
    return 'finished';
  });
});

test('a graceful stop hands back the runs it cannot finish; another worker finishes them', async () => {
  const q = freshQueue();
  const a = await worker(q, [handBackWf], { shutdownGraceMs: 200 });
  const run = await client.start('t.handback', {}, { queue: q });
  await eventually(async () => (await client.history(run.id)).ops.some((o) => o.name === 'pre' && o.done), 10_000, 'step pre');
  await a.stop();
  const r = await client.getRun(run.id);
  assert.equal(r.status, 'pending', 'handed back');
  const b = await worker(q, [handBackWf]);
  assert.equal(await client.result(run.id, { timeout: 10_000 }), 'finished');
  assert.equal(calls.get(`pre:${run.id}`), 1);
  await b.stop();
});

const retryWf = defineWorkflow('t.retry', async (ctx, { mode }) => {
  try {
    return await ctx.step.run('s', async ({ attempt }) => {
      if (mode === 'fatal') throw new NonRetryableError('card declined', { type: 'declined' });
      if (attempt < 3) throw new TypeError(`boom ${attempt}`);
      return attempt;
    }, { retry: { maxAttempts: 3, initialInterval: 300, backoffCoefficient: 1 } });
  } catch (err) {
    if (err instanceof StepError) return { type: err.type, attempts: err.attempts, message: err.message };
    throw err;
  }
});

test('retries: a backoff longer than the inline limit releases the run; a non-retryable error fails at once', async () => {
  const q = freshQueue();
  const w = await worker(q, [retryWf], { maxInlineBackoffMs: 100 });
  const run = await client.start('t.retry', { mode: 'flaky' }, { queue: q });
  const seen = await eventually(async () => { const r = await client.getRun(run.id); return (r.status === 'waiting' || r.status === 'succeeded') && r; }, 10_000);
  assert.equal(seen.status, 'waiting', 'released during the backoff');
  assert.match(seen.wait_reason, /retry backoff: step "s" attempt 2/);
  assert.equal(await client.result(run.id, { timeout: 10_000 }), 3);
  const [op] = (await client.history(run.id)).ops;
  assert.equal(op.attempts, 3);
  assert.deepEqual(op.attempt_log.map((a) => [a.error.message, a.error.type]), [['boom 1', 'TypeError'], ['boom 2', 'TypeError']]);

  const fatal = await client.start('t.retry', { mode: 'fatal' }, { queue: q });
  assert.deepEqual(await client.result(fatal.id, { timeout: 10_000 }), { type: 'declined', attempts: 1, message: 'card declined' });
  await w.stop();
});

const leaf = defineWorkflow('t.leaf', async (ctx, { n }) => {
  if (n < 0) throw new Error(`negative ${n}`);
  return ctx.step.run('sq', async () => n * n);
});
const parentWf = defineWorkflow('t.parent', async (ctx, { ns }) => {
  const out = {};
  try { out.child = await ctx.child(leaf, { n: ns[0] }); } catch (err) { out.child = err instanceof ChildError ? `${err.status}: ${err.childMessage}` : String(err); }
  try { out.map = await ctx.map(leaf, ns.map((n) => ({ n })), { concurrency: 2 }); } catch (err) { out.map = err instanceof MapError ? err.failed.map((f) => [f.index, f.status]) : String(err); }
  const [x, y] = await Promise.all([ctx.step.run('x', async () => 'x'), ctx.step.run('y', async () => 'y')]);
  out.parallel = x + y;
  return out;
});

test('children and maps: outputs, failures as ChildError and MapError; parallel steps', async () => {
  const q = freshQueue();
  const w = await worker(q, [leaf, parentWf]);
  const ok = await client.start('t.parent', { ns: [2, 3, 4] }, { queue: q });
  assert.deepEqual(await client.result(ok.id, { timeout: 15_000 }), { child: 4, map: [4, 9, 16], parallel: 'xy' });
  const kids = await client.children(ok.id, 1);
  assert.deepEqual(kids.map((k) => k.id), [`${ok.id}.1.0`, `${ok.id}.1.1`, `${ok.id}.1.2`]);
  const bad = await client.start('t.parent', { ns: [-1, 1, -2] }, { queue: q });
  const out = await client.result(bad.id, { timeout: 15_000 });
  assert.equal(out.child, 'failed: negative -1');
  assert.ok(Array.isArray(out.map) && out.map.some(([i, s]) => i === 0 && s === 'failed'), JSON.stringify(out.map));
  await w.stop();
});

/** A marker a test waits for: made by whichever of the test and the workflow gets to it first. */
const markers = new Map();
function marker(key) {
  let m = markers.get(key);
  if (!m) {
    m = {};
    m.reached = new Promise((resolve) => { m.set = resolve; });
    markers.set(key, m);
  }
  return m;
}
/** Resolves once marker key is set; rejects after ms. */
function reached(key, ms = 10_000) {
  let t;
  const late = new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`timed out waiting for ${key}`)), ms); });
  return Promise.race([marker(key).reached, late]).finally(() => clearTimeout(t));
}

const cancelStepWf = defineWorkflow('t.cancelstep', async (ctx) => {
  try {
    await ctx.step.run('long', async ({ signal, runId }) => new Promise((_, reject) => {
      signal.addEventListener('abort', () => reject(signal.reason));
      marker(`long started:${runId}`).set();
    }));
  } catch (err) {
    await ctx.detached().step.run('cleanup', async () => (err instanceof StepError ? err.type : err.name));
    throw new CancelledError();
  }
});

test('cancellation aborts a running step\'s signal; detached cleanup still runs', async () => {
  const q = freshQueue();
  const w = await worker(q, [cancelStepWf]);
  const run = await client.start('t.cancelstep', {}, { queue: q });
  await reached(`long started:${run.id}`); // the step runs, listening to its signal
  await client.cancel(run.id);
  const done = await client.waitRun(run.id, { timeout: 10_000 });
  assert.equal(done.status, 'cancelled');
  const ops = (await client.history(run.id)).ops;
  assert.equal(ops[0].error.type, 'cancelled');
  assert.deepEqual([ops[1].name, ops[1].result], ['cleanup', 'cancelled']);
  await assert.rejects(client.result(run.id), (e) => e instanceof RunFailedError && e.status === 'cancelled');
  await w.stop();
});

const misc = defineWorkflow('t.misc', async (ctx, { what }) => {
  if (what === 'reserved') ctx.emit('run.mine', 1);
  if (what === 'noname') await ctx.step.run('', async () => 1);
  if (what === 'throw') throw new RangeError('out of range');
  const p = ctx.patched('v2');
  await ctx.sleep(50);
  return { p, r: ctx.random() < 1 };
});
const jobFail = defineJob('t.jobfail', async (_, { attempt }) => { throw new Error(`job attempt ${attempt}`); }, { retry: { maxAttempts: 2, initialInterval: 100 } });

test('bad input: clear errors from the SDK and from the server', async () => {
  assert.throws(() => defineWorkflow('', async () => {}), /a name/);
  assert.throws(() => defineWorkflow('x', 'nope'), /a function is required/);
  assert.throws(() => new Worker({}), /server .* is required/);
  assert.throws(() => new Worker({ server: 'ftp://x' }), /want http/);
  assert.throws(() => new Worker({ server: 'http://x', concurrency: 0 }), /concurrency is 1 to 1000/);
  assert.throws(() => new Worker({ server: 'http://x' }).register({ name: 'x' }), /defineWorkflow or defineJob/);
  await assert.rejects(new Worker({ server: 'http://x', handleSignals: false }).run(), /register at least one/);
  assert.throws(() => new Client({ server: 'not a url' }), /not a URL/);
  await assert.rejects(client.getRun('no-such-run'), (e) => e instanceof ApiError && e.status === 404 && e.code === 'run_not_found');
  await assert.rejects(client.value('no-such-run', 'k'), (e) => e instanceof ApiError && e.status === 404 && e.code === 'run_not_found');
  await assert.rejects(client.start('bad name!', {}), (e) => e instanceof ApiError && e.status === 400 && e.code === 'invalid_argument');
  await assert.rejects(client.sendEvent('x', ''), /an event name is required/);
  await assert.rejects(client.getRun('a/b'), /must not contain/);

  const q = freshQueue();
  const w = await worker(q, [misc, jobFail]);
  const fail = async (what) => {
    const run = await client.start('t.misc', { what }, { queue: q });
    const r = await client.waitRun(run.id, { timeout: 10_000 });
    assert.equal(r.status, 'failed');
    return r.error;
  };
  assert.match((await fail('reserved')).message, /reserved/);
  assert.match((await fail('noname')).message, /step name must be a non-empty string/);
  assert.deepEqual(await fail('throw'), { message: 'out of range', type: 'RangeError' });
  const okRun = await client.start('t.misc', { what: 'ok' }, { queue: q });
  assert.deepEqual(await client.result(okRun.id, { timeout: 10_000 }), { p: true, r: true });
  assert.deepEqual((await client.history(okRun.id)).ops.map((o) => o.kind), ['patch', 'timer', 'random']);

  const job = await client.start('t.jobfail', {}, { queue: q });
  const jr = await client.waitRun(job.id, { timeout: 10_000 });
  assert.equal(jr.status, 'failed');
  assert.equal(jr.error.message, 'job attempt 2');
  await w.stop();
});

test('client: list runs, idempotent starts, stream from a cursor', async () => {
  const q = freshQueue();
  const w = await worker(q, [misc]);
  const key = `k-${q}`;
  const a = await client.start('t.misc', { what: 'ok' }, { queue: q, idempotencyKey: key, id: `wf-${q}` });
  const b = await client.start('t.misc', { what: 'ok' }, { queue: q, idempotencyKey: key, id: `wf-${q}` });
  assert.equal(a.id, b.id, 'the same start, once');
  await client.result(a.id, { timeout: 10_000 });
  const { runs } = await client.listRuns({ queue: q, status: ['succeeded'] });
  assert.deepEqual(runs.map((r) => r.id), [a.id]);
  assert.equal((await client.getRun(`wf-${q}`)).id, a.id, 'by workflow ID');
  const all = [];
  for await (const ev of client.stream(a.id)) all.push(ev);
  const tail = [];
  for await (const ev of client.stream(a.id, { after: all[0].sequence })) tail.push(ev.sequence);
  assert.deepEqual(tail, all.slice(1).map((e) => e.sequence));
  await w.stop();
});

/** A step that waits briefly and fails with its signal's reason if that is aborted first. */
const honoursSignal = async ({ signal }) => {
  await new Promise((resolve, reject) => {
    if (signal.aborted) { reject(signal.reason); return; }
    const t = setTimeout(resolve, 50);
    signal.addEventListener('abort', () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });
  return 'done';
};
const farDeadlineWf = defineWorkflow('t.fardeadline', async (ctx) => {
  const a = await ctx.step.run('a', honoursSignal);
  const b = await ctx.step.run('b', honoursSignal, { timeout: 30 * 24 * 3600_000 });
  return [a, b];
});
const farDeadlineJob = defineJob('t.fardeadline.job', (_, info) => honoursSignal(info), { timeout: 30 * 24 * 3600_000 });

test('a deadline or a step timeout beyond setTimeout\'s 24.8-day cap does not fire at once', async () => {
  const q = freshQueue();
  const w = await worker(q, [farDeadlineWf, farDeadlineJob]);
  const deadline = new Date(Date.now() + 30 * 24 * 3600_000);
  const run = await client.start('t.fardeadline', {}, { queue: q, deadline });
  assert.deepEqual(await client.result(run.id, { timeout: 10_000 }), ['done', 'done']);
  const job = await client.start('t.fardeadline.job', {}, { queue: q, deadline });
  assert.equal(await client.result(job.id, { timeout: 10_000 }), 'done');
  await w.stop();
});

const lateStepWf = defineWorkflow('t.latestep', async (ctx) => {
  try {
    await ctx.waitForEvent('never');
  } catch (err) {
    await ctx.step.run('late', async () => 'ran');
  }
});

test('a step asked for after the cancellation records 0 attempts, as its step.failed event says', async () => {
  const q = freshQueue();
  const w = await worker(q, [lateStepWf]);
  const run = await client.start('t.latestep', {}, { queue: q });
  await eventually(async () => (await client.getRun(run.id)).status === 'waiting', 10_000, 'waiting');
  await client.cancel(run.id);
  assert.equal((await client.waitRun(run.id, { timeout: 10_000 })).status, 'cancelled');
  const late = (await client.history(run.id)).ops.find((o) => o.name === 'late');
  assert.equal(late.attempts, 0);
  assert.equal(late.error.type, 'cancelled');
  const failed = [];
  for await (const ev of client.stream(run.id)) if (ev.name === 'step.failed') failed.push(ev.data);
  assert.deepEqual(failed.map((d) => [d.name, d.attempt, d.final]), [['late', 0, true]]);
  await w.stop();
});

const versionWf = (version, alsoServes) => defineWorkflow('t.versioned', async (ctx) => ctx.run.version, { version, alsoServes });

test('a start pinned to a version waits for a worker that serves it; one without a version goes to any', async () => {
  const q = freshQueue();
  const v2 = await worker(q, [versionWf(2)]);
  const pinned = await client.start('t.versioned', null, { queue: q, version: 3 });
  const two = await client.start('t.versioned', null, { queue: q, version: 2 });
  const free = await client.start('t.versioned', null, { queue: q });
  assert.equal(await client.result(two.id, { timeout: 10_000 }), 2);
  assert.equal(await client.result(free.id, { timeout: 10_000 }), 0, 'a run without a version: version 0, any worker');
  await new Promise((r) => setTimeout(r, 300));
  const waiting = await client.getRun(pinned.id);
  assert.equal(waiting.status, 'pending');
  assert.equal(waiting.pinned, true);
  assert.equal(waiting.attempts, 0);
  assert.equal(waiting.wait_reason, 'version 3 of workflow "t.versioned" is served by no live worker; live workers serve version 2');
  await worker(q, [versionWf(4, [3])]);
  assert.equal(await client.result(pinned.id, { timeout: 10_000 }), 3);
  await v2.stop();
  assert.throws(() => defineWorkflow('t.bad', async () => 0, { alsoServes: [0] }), /alsoServes/);
  assert.throws(() => defineWorkflow('t.bad', async () => 0, { version: -1 }), /version/);
  await assert.rejects(client.start('t.versioned', null, { queue: q, version: -1 }), (e) => e instanceof ApiError && e.status === 400);
});

test('a claim read after its lease expired is dropped when another worker has the run, and goes on when only the clock was ahead', async () => {
  const { workerClient, duration } = await import('../src/proto.js');
  const q = freshQueue();
  const w = await worker(freshQueue(), [replayWf]);
  const raw = workerClient(srv.url, srv.token);
  const claimOne = async (name, leaseMs) => {
    for await (const m of raw.claim({ namespace: 'default', queues: [q], workflows: ['t.stale'], worker: name, credit: 1n,
      leaseDuration: duration(leaseMs) })) {
      if (m.runs.length) return m.runs[0];
    }
    throw new Error(`nothing claimed for ${name}`);
  };
  const leaseOf = (cr) => ({ namespace: cr.run.namespace, runId: cr.run.id, token: cr.leaseToken, queue: cr.run.queue, secret: cr.leaseSecret });
  const stopped = [];
  const exec = (cr) => ({ lease: leaseOf(cr), leaseExpiresMs: Date.now() - 1, abort: (why) => stopped.push([cr.run.id, why]) });

  const taken = await client.start('t.stale', 1, { queue: q });
  const stale = await claimOne('frozen', 1000);
  await new Promise((r) => setTimeout(r, 1500)); // the lease lapses; another worker claims the run
  await eventually(async () => { try { await claimOne('other', 60_000); return true; } catch { return false; } }, 10_000, 'the run claimed again');
  const r1 = exec(stale);
  assert.equal(await w.leaseHeld(r1), false);
  assert.deepEqual(stopped, [[taken.id, 'lease_lost']]);

  const held = await client.start('t.stale', 2, { queue: q });
  const cr = await claimOne('ahead', 60_000);
  assert.equal(cr.run.id, held.id);
  const r2 = exec(cr); // the worker's clock says expired; the server still holds it
  assert.equal(await w.leaseHeld(r2), true);
  assert.ok(r2.leaseExpiresMs > Date.now() + 1000, 'the lease was extended');
  assert.equal(w.leaseHeld({ ...r2 }), true, 'a lease known to last: no call, no promise');
  assert.equal(stopped.length, 1);
  await w.stop();
});

// A worker frozen between the answer to the checkpoint that precedes a step's
// attempt and the attempt (its process stopped there) wakes with the lease
// expired: it asks the server and, the run being another worker's by then,
// starts no attempt (docs/worker-protocol.md, Losing a lease). The freeze is
// the run held in that flush with the worker's heartbeats off (one slot: it
// claims nothing meanwhile), until the other worker has finished the run.
test('a worker frozen after the checkpoint before an attempt starts no attempt once the run is another worker\'s', async () => {
  const { RunExec } = await import('../src/run.js');
  const q = freshQueue();
  let aRan = false; let frozen = false; let froze; let thaw;
  const frozenAt = new Promise((r) => { froze = r; });
  const thawed = new Promise((r) => { thaw = r; });
  const bRan = [];
  const wf = defineWorkflow('t.frozenflush', async (ctx) => {
    await ctx.step.run('a', async () => { aRan = true; return 1; });
    return ctx.step.run('b', async () => { bRan.push(Date.now()); return 2; });
  });
  const w1 = await worker(q, [wf], { leaseMs: 1000, concurrency: 1 });
  const extend = w1.extendLeases;
  w1.extendLeases = async function () { if (!frozen) return extend.call(this); };
  const flush = RunExec.prototype.flush;
  RunExec.prototype.flush = async function () {
    await flush.call(this);
    if (this.host === w1 && aRan && !frozen && bRan.length === 0) {
      frozen = true;
      froze();
      await thawed; // as in a stopped process
    }
  };
  try {
    const run = await client.start('t.frozenflush', null, { queue: q });
    await frozenAt;
    await worker(q, [wf], { leaseMs: 10_000 });
    assert.equal(await client.result(run.id, { timeout: 30_000 }), 2);
    assert.equal(bRan.length, 1);
    frozen = false;
    thaw();
    await eventually(() => !w1.active.has(run.id), 10_000, 'the thawed worker let the run go');
    assert.equal(bRan.length, 1, 'the thawed worker ran b\'s attempt on a lease another worker had taken');
  } finally {
    RunExec.prototype.flush = flush;
    thaw();
  }
});

// Workflow retries: the workflow's opts.retry travels with its failing
// checkpoint; a start's retry is stored with the run; the failed step runs
// again with a fresh budget, its attempts numbered on, the succeeded one
// replays; every failed run attempt is in the run's record.
let wfRetryCharges = 0;
const wfRetryWf = defineWorkflow('t.wfretry', async (ctx, { failUntil }) => {
  await ctx.step.run('lookup', async () => { count(`lookup:${ctx.run.id}`); return 1; });
  await ctx.step.run('charge', async () => {
    wfRetryCharges++;
    if (wfRetryCharges <= failUntil) throw new Error(`card service down (${wfRetryCharges})`);
    return 42;
  }, { retry: { maxAttempts: 2, initialInterval: 1 } });
  return { workflowAttempt: ctx.run.workflowAttempt };
}, { retry: { maxAttempts: 3, initialInterval: 50 } });
const wfRetryPlain = defineWorkflow('t.wfretry.plain', async (ctx) => {
  await ctx.step.run('s', async () => { throw new Error('always'); }, { retry: { maxAttempts: 1 } });
});

test('workflow retries: replay, a fresh budget for failed steps, a start\'s own policy', async () => {
  const q = freshQueue();
  const w = await worker(q, [wfRetryWf, wfRetryPlain]);
  wfRetryCharges = 0;
  const run = await client.start('t.wfretry', { failUntil: 4 }, { queue: q });
  assert.deepEqual(await client.result(run.id, { timeout: 15_000 }), { workflowAttempt: 3 });
  assert.equal(calls.get(`lookup:${run.id}`), 1, 'the succeeded step replays');
  assert.equal(wfRetryCharges, 5);
  const r = await client.getRun(run.id);
  assert.equal(r.workflow_attempt, 3);
  assert.deepEqual(r.workflow_attempts.map((a) => [a.attempt, a.steps.map((s) => [s.name, s.attempts])]), [[1, [['charge', 2]]], [2, [['charge', 4]]]]);
  const ops = (await client.history(run.id)).ops;
  assert.equal(ops[1].attempts, 5);
  assert.deepEqual(ops[1].attempt_log.map((a) => a.attempt), [1, 2, 3, 4]);

  // Without a policy a run fails at once; with a start's policy it is retried.
  const plain = await client.start('t.wfretry.plain', {}, { queue: q });
  await assert.rejects(client.result(plain.id, { timeout: 10_000 }), RunFailedError);
  assert.equal((await client.getRun(plain.id)).workflow_attempt, 1);
  const own = await client.start('t.wfretry.plain', {}, { queue: q, retry: { maxAttempts: 2, initialInterval: 20 } });
  assert.equal(own.retry.max_attempts, 2);
  await assert.rejects(client.result(own.id, { timeout: 10_000 }), RunFailedError);
  const ended = await client.getRun(own.id);
  assert.equal(ended.workflow_attempt, 2);
  assert.equal(ended.workflow_attempts.length, 1);
  const [s] = (await client.history(own.id)).ops;
  assert.equal(s.attempts, 2, 'one attempt per run attempt: a fresh budget of 1');

  await assert.rejects(client.start('t.wfretry.plain', {}, { queue: q, retry: { maxAttempts: 0 } }),
    (e) => e instanceof ApiError && e.status === 400 && /retry.max_attempts/.test(e.message));
  assert.throws(() => defineWorkflow('t.bad', async () => {}, { retry: { maxAttempts: 0 } }), /retry.maxAttempts/);
  await w.stop();
});
