// The kit's 17 workflows, run by the conformance worker (a separate process)
// against a real server, checked as the kit's runner checks them: outputs,
// histories, streams, and the takeover of a SIGKILLed worker's run.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '../src/index.js';
import { startServer, startWorker, eventually, sleep, freshQueue } from './helpers.mjs';

let srv; let client; let worker; let queue;

before(async () => {
  srv = await startServer();
  client = new Client({ server: srv.url, token: srv.token });
  queue = freshQueue('kit');
  worker = await startWorker(srv, { queue });
});

after(async () => {
  await worker?.stop();
  await srv?.stop();
});

const start = (wf, input) => client.start(wf, input, { queue });
const ops = async (id) => (await client.history(id)).ops;
const waiting = (id) => eventually(async () => (await client.getRun(id)).status === 'waiting', 20_000, `run ${id} waiting`);

test('three_steps', async () => {
  const run = await start('conformance.three_steps', { x: 2 });
  assert.equal(await client.result(run.id, { timeout: 15_000 }), 'result=30');
  const h = await ops(run.id);
  assert.deepEqual(h.map((o) => [o.kind, o.name, o.done, o.result, o.attempts]), [
    ['step', 'add', true, 3, 1], ['step', 'mul', true, 30, 1], ['step', 'format', true, 'result=30', 1]]);
  const events = [];
  for await (const ev of client.stream(run.id)) events.push(ev);
  assert.deepEqual(events.map((e) => e.name), ['run.started', 'step.completed', 'step.completed', 'step.completed', 'run.succeeded']);
  assert.deepEqual(events[0].data, { attempt: 1, workflow: 'conformance.three_steps' });
  assert.equal(events[1].data.name, 'add');
  assert.deepEqual(events.at(-1).data, { result: 'result=30' });
});

test('retries', async () => {
  const run = await start('conformance.retries', { fail_times: 2 });
  assert.equal(await client.result(run.id, { timeout: 15_000 }), 'ok after 3');
  const [op] = await ops(run.id);
  assert.equal(op.name, 'flaky');
  assert.equal(op.attempts, 3);
  assert.deepEqual(op.attempt_log.map((a) => a.error.message), ['flaky failure 1', 'flaky failure 2']);
  const gap1 = new Date(op.attempt_log[1].started_at) - new Date(op.attempt_log[0].finished_at);
  const gap2 = new Date(op.attempt_started_at) - new Date(op.attempt_log[1].finished_at);
  assert.ok(gap1 >= 195, `first backoff ${gap1} ms`);
  assert.ok(gap2 >= 395, `second backoff ${gap2} ms`);
});

test('step_timeout', async () => {
  const run = await start('conformance.step_timeout', {});
  assert.deepEqual(await client.result(run.id, { timeout: 15_000 }), { error_type: 'step_timeout' });
  const [op] = await ops(run.id);
  assert.equal(op.name, 'slow');
  assert.equal(op.error.type, 'step_timeout');
  assert.equal(op.attempts, 2);
});

test('sleep', async () => {
  const t0 = Date.now();
  const run = await start('conformance.sleep', { seconds: 2 });
  assert.equal(await client.result(run.id, { timeout: 15_000 }), 'slept');
  assert.ok(Date.now() - t0 >= 2000);
  const h = await ops(run.id);
  assert.deepEqual(h.map((o) => [o.kind, o.done]), [['timer', true], ['step', true]]);
  assert.equal(typeof h[0].result, 'string');
  assert.ok(!Number.isNaN(Date.parse(h[0].result)));
});

test('event_wait', async () => {
  const run = await start('conformance.event_wait', {});
  await waiting(run.id);
  await client.sendEvent(run.id, 'go', { color: 'green' });
  assert.deepEqual(await client.result(run.id, { timeout: 15_000 }), { go: { color: 'green' }, never: 'timeout' });
  const h = await ops(run.id);
  assert.deepEqual(h.map((o) => [o.kind, o.name, o.done]), [['event', 'go', true], ['event', 'never', true]]);
  assert.deepEqual(h[0].result, { color: 'green' });
  assert.equal(h[1].error.type, 'event_timeout');
});

test('approval', async () => {
  const run = await start('conformance.approval', {});
  await waiting(run.id);
  const [a] = await client.approvals({ run: run.id });
  assert.equal(a.name, 'ship');
  await client.approve(a.id, { comment: 'lgtm' });
  assert.deepEqual(await client.result(run.id, { timeout: 15_000 }), { approved: true });
  const [op] = await ops(run.id);
  assert.equal(op.kind, 'approval');
  assert.equal(op.done, true);
});

test('child', async () => {
  const run = await start('conformance.child', { n: 21 });
  assert.equal(await client.result(run.id, { timeout: 15_000 }), 42);
  const [op] = await ops(run.id);
  assert.deepEqual([op.kind, op.name, op.done], ['child', 'conformance.double', true]);
  const kids = await client.children(run.id, 0);
  assert.equal(kids.length, 1);
  assert.equal(kids[0].id, `${run.id}.0`);
  assert.equal(kids[0].parent_id, run.id);
});

test('map', async () => {
  const run = await start('conformance.map', { count: 20, concurrency: 5 });
  assert.deepEqual(await client.result(run.id, { timeout: 30_000 }), Array.from({ length: 20 }, (_, i) => 2 * i));
  const kids = await client.children(run.id, 0);
  assert.equal(kids.length, 20);
  const edges = kids.flatMap((k) => [[Date.parse(k.started_at), 1], [Date.parse(k.finished_at), -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let n = 0; let most = 0;
  for (const [, d] of edges) { n += d; most = Math.max(most, n); }
  assert.ok(most <= 5, `${most} children ran at once`);
});

test('select', async () => {
  const run = await start('conformance.select', {});
  await waiting(run.id);
  await client.sendEvent(run.id, 'pick', 'b');
  assert.deepEqual(await client.result(run.id, { timeout: 15_000 }), { index: 1, value: 'b' });
  const sel = (await ops(run.id)).find((o) => o.kind === 'select');
  assert.equal(sel.done, true);
  assert.equal(sel.result, 1);
});

test('cancel', async () => {
  const run = await start('conformance.cancel', {});
  await waiting(run.id);
  await client.cancel(run.id);
  const done = await client.waitRun(run.id, { timeout: 15_000 });
  assert.equal(done.status, 'cancelled');
  const h = await ops(run.id);
  assert.deepEqual(h[0].result, 'worked');
  const cleanup = h.find((o) => o.name === 'cleanup');
  assert.ok(cleanup, 'a cleanup step');
  assert.equal(cleanup.done, true);
  assert.equal(cleanup.result, 'cleaned');
});

test('kv', async () => {
  const run = await start('conformance.kv', {});
  assert.deepEqual(await client.result(run.id, { timeout: 15_000 }), { a: null, b: { x: 2 } });
  assert.deepEqual((await ops(run.id)).map((o) => [o.kind, o.name]), [['set', 'a'], ['set', 'b'], ['delete', 'a']]);
  assert.deepEqual(await client.value(run.id, 'b'), { x: 2 });
  assert.equal(await client.value(run.id, 'a'), undefined);
});

test('emit', async () => {
  const run = await start('conformance.emit', {});
  assert.equal(await client.result(run.id, { timeout: 15_000 }), 'done');
  assert.deepEqual((await ops(run.id)).map((o) => o.kind), ['emit', 'step', 'emit']);
  const events = [];
  for await (const ev of client.stream(run.id)) events.push([ev.name, ev.data]);
  assert.deepEqual(events.map((e) => e[0]), ['run.started', 'progress', 'step.completed', 'progress', 'run.succeeded']);
  assert.deepEqual(events[1][1], { pct: 50 });
  assert.equal(events[2][1].name, 'work');
  assert.deepEqual(events[3][1], { pct: 100 });
});

test('nondeterminism', async () => {
  const run = await start('conformance.nondeterminism', {});
  await waiting(run.id);
  await client.sendEvent(run.id, 'next', null);
  const r = await eventually(async () => { const x = await client.getRun(run.id); return x.status === 'blocked' && x; }, 15_000, 'blocked');
  assert.equal(r.error.type, 'non_determinism');
  assert.match(r.error.message, /position 0/);
});

test('job_sum', async () => {
  const run = await start('conformance.job_sum', { a: 2, b: 3 });
  assert.equal(await client.result(run.id, { timeout: 15_000 }), 5);
});

test('recorded', async () => {
  const run = await start('conformance.recorded', {});
  const out = await client.result(run.id, { timeout: 15_000 });
  const h = await ops(run.id);
  assert.deepEqual(h.map((o) => o.kind), ['now', 'uuid', 'random']);
  assert.equal(h[0].result, out.now);
  assert.equal(h[1].result, out.uuid);
  assert.match(out.uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.ok(Number.isInteger(h[2].result) || typeof h[2].result === 'number');
});

test('takeover: a SIGKILLed worker\'s run is taken over, each step recorded once', async () => {
  const run = await start('conformance.takeover', {});
  // once a heartbeat reported step slow (so the server records its attempt lost)
  await eventually(async () => (await ops(run.id)).some((o) => o.name === 'before' && o.done), 15_000, 'step before');
  await eventually(async () => (await client.getRun(run.id)).current_step?.name === 'slow', 15_000, 'step slow reported');
  await worker.kill();
  const t0 = Date.now();
  worker = await startWorker(srv, { queue });
  const done = await client.waitRun(run.id, { timeout: 20_000 });
  assert.equal(done.status, 'succeeded');
  assert.equal(done.output, 'survived');
  assert.ok(Date.now() - t0 < 5000 + 4000 + 5000, 'within lease + 4 s + slack');
  const h = await ops(run.id);
  // slow's interrupted attempt is in its history, lost; the new worker's is 2
  assert.deepEqual(h.map((o) => [o.name, o.attempts]), [['before', 1], ['slow', 2], ['after', 1]]);
  assert.deepEqual(h[1].attempt_log.map((a) => [a.attempt, a.outcome, a.error.type]), [[1, 'lost', 'attempt_lost']]);
});
