// The SDK's parts without a server: the worker's bookkeeping, the engine's
// replay of bad histories, timers, the client's stream parser, call timeouts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import http2 from 'node:http2';
import { ConnectError, Code } from '@connectrpc/connect';
import http from 'node:http';
import { Worker, Client, defineJob, defineWorkflow, ApiError } from '../src/index.js';
import { RunExec } from '../src/run.js';
import { sleep } from '../src/worker.js';
import { getEventListeners } from 'node:events';
import { encode } from '../src/codec.js';
import { workerClient } from '../src/proto.js';

const tick = (ms = 10) => new Promise((r) => setTimeout(r, ms));

/** A ClaimedRun of the protocol, as the claim stream gives it. */
function claimed(id, workflow, token, extra = {}) {
  return {
    run: { id, namespace: 'default', workflowId: id, workflow, queue: 'q', attempts: 1n, input: encode({}), cancelRequested: false, priority: 0n, ...extra.run },
    leaseToken: token, leaseSecret: '', history: extra.history ?? [], inbox: extra.inbox ?? [], queueRetry: undefined,
    payloadLimit: extra.payloadLimit ?? 0n,
  };
}

test('a run claimed again by the same worker stops its previous execution, which leaves the new one in place', async () => {
  const w = new Worker({ server: 'http://127.0.0.1:9', handleSignals: false, logger: () => {} });
  const reasons = [];
  w.register(defineJob('j', async (_, { signal }) => {
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    reasons.push(signal.reason);
    throw signal.reason;
  }));
  w.startRun(claimed('r1', 'j', 'lease-a'));
  const first = w.active.get('r1');
  w.startRun(claimed('r1', 'j', 'lease-b'));
  const second = w.active.get('r1');
  assert.notEqual(first, second);
  assert.equal(first.stopReason, 'lease_lost', 'the previous execution is stopped as a lost lease');
  assert.equal(second.stopReason, null);
  await tick();
  assert.deepEqual(reasons, ['lease_lost']);
  assert.equal(w.active.get('r1'), second, 'the previous execution\'s end leaves the new one\'s entry');
  second.abort('lease_lost');
  await tick();
  assert.equal(w.active.size, 0);
});

test('a lost lease reported for an execution a new claim replaced stops only the old one', async () => {
  const w = new Worker({ server: 'http://127.0.0.1:9', handleSignals: false, logger: () => {} });
  w.register(defineJob('j', async (_, { signal }) => {
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    throw signal.reason;
  }));
  let answer;
  w.client = { extendLeases: () => new Promise((r) => { answer = r; }) };
  w.startRun(claimed('r1', 'j', 'lease-a'));
  const extending = w.extendLeases();
  w.startRun(claimed('r1', 'j', 'lease-b'));
  const second = w.active.get('r1');
  answer({ lost: ['r1'], cancelRequested: ['r1'] });
  await extending;
  assert.equal(second.stopReason, null, 'the new claim keeps running');
  assert.equal(second.cancelRequested, false);
  second.abort('lease_lost');
  await tick();
});

/** A TCP server that accepts connections and never answers: a dead peer behind a live socket. */
async function blackHole() {
  const socks = new Set();
  const srv = net.createServer((s) => { socks.add(s); s.on('error', () => {}); });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${srv.address().port}`, close: () => { for (const s of socks) s.destroy(); srv.close(); } };
}

test('protocol calls to a peer that never answers time out: unary calls after callTimeoutMs, a checkpoint within the lease', { timeout: 10_000 }, async (t) => {
  const hole = await blackHole();
  t.after(hole.close);
  {
    const w = new Worker({ server: hole.url, handleSignals: false, logger: () => {}, leaseMs: 600, callTimeoutMs: 300 });
    let t0 = Date.now();
    await assert.rejects(w.heartbeat(true), (e) => e instanceof ConnectError && e.code === Code.DeadlineExceeded);
    assert.ok(Date.now() - t0 < 2000, `heartbeat took ${Date.now() - t0} ms`);
    t0 = Date.now();
    await assert.rejects(w.checkpoint({ lease: {}, seq: 1n }), (e) => e instanceof ApiError && e.code === 'DeadlineExceeded');
    const took = Date.now() - t0;
    assert.ok(took >= 550 && took < 2500, `the checkpoint gave up after ${took} ms (lease 600 ms)`);
  }
});

test('a connection that stops answering (half-open) is found by HTTP/2 PINGs: the open stream fails', { timeout: 10_000 }, async (t) => {
  // an HTTP/2 server that answers a stream's headers and then nothing, behind a
  // proxy that can freeze (drop everything both ways, sockets left open)
  const h2 = http2.createServer();
  h2.on('stream', (stream) => { stream.respond({ ':status': 200, 'content-type': 'application/connect+proto' }); });
  await new Promise((r) => h2.listen(0, '127.0.0.1', r));
  let frozen = false;
  const socks = new Set();
  const proxy = net.createServer((c) => {
    const u = net.connect(h2.address().port, '127.0.0.1');
    socks.add(c); socks.add(u);
    c.on('error', () => {}); u.on('error', () => {});
    c.on('data', (d) => { if (!frozen) u.write(d); });
    u.on('data', (d) => { if (!frozen) c.write(d); });
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  t.after(() => {
    for (const s of socks) s.destroy();
    proxy.close();
    h2.close();
  });
  {
    const client = workerClient(`http://127.0.0.1:${proxy.address().port}`, '', { pingIntervalMs: 200, pingTimeoutMs: 300 });
    const it = client.subscribe({ namespace: 'default', topic: 'cancel' })[Symbol.asyncIterator]();
    const next = it.next();
    await tick(300);
    frozen = true;
    const t0 = Date.now();
    const outcome = await Promise.race([next.then(() => 'message', () => 'failed'), tick(5000).then(() => 'still waiting')]);
    assert.equal(outcome, 'failed');
    assert.ok(Date.now() - t0 < 3000, `found after ${Date.now() - t0} ms`);
  }
});

/** Replays a run of fn over history (ops of the protocol) with a host that records its checkpoints. */
async function replay(fn, history) {
  const items = [];
  const host = { checkpoint: async (item) => { items.push(item); return {}; }, maxPayloadBytes: 1 << 20, maxInlineBackoffMs: 2000, log: () => {} };
  const ops = history.map(([kind, name, done, result], i) => ({ position: BigInt(i), kind, name, done, result: typeof result === 'string' ? new TextEncoder().encode(result) : result, attempts: 1n }));
  const exec = new RunExec(host, claimed('r1', 'w', 'lease', { history: ops }), defineWorkflow('w', fn));
  const status = await exec.execute();
  return { status, last: items.at(-1) };
}

test('a recorded value that does not decode blocks the run (non_determinism), never reaching the workflow', async () => {
  const due = '"2030-01-01T00:00:00.123456789Z"';
  const cases = [
    ['now', (ctx) => ctx.now(), [['now', '', true, '"garbage"']]],
    ['now', (ctx) => ctx.now(), [['now', '', true, 'not json']]],
    ['now', (ctx) => ctx.now(), [['now', '', true, '12345']]],
    ['now', (ctx) => ctx.now(), [['now', '', true, new Uint8Array([0x22, 0xff, 0x22])]]],
    ['uuid', (ctx) => ctx.uuid(), [['uuid', '', true, '5']]],
    ['uuid', (ctx) => ctx.uuid(), [['uuid', '', true, '{']]],
    ['random', (ctx) => ctx.random(), [['random', '', true, '"12"']]],
    ['random', (ctx) => ctx.random(), [['random', '', true, '-1']]],
    ['random', (ctx) => ctx.random(), [['random', '', true, '']]],
    ['random', (ctx) => ctx.random(), [['random', '', true, '0x10']]],
    ['random', (ctx) => ctx.random(), [['random', '', true, '18446744073709551616']]],
    ['timer without a due time', (ctx) => ctx.sleep(10), [['timer', '', false, '5']]],
    ['timer without a due time', (ctx) => ctx.sleep(10), [['timer', '', false, '"soon"']]],
    ['unreadable state', (ctx) => ctx.waitForEvent('e'), [['event', 'e', false, '{"deadline":"garbage"}']]],
    ['unreadable state', (ctx) => ctx.waitForEvent('e'), [['event', 'e', false, '5']]],
    ['select of case 7', (ctx) => ctx.select(ctx.timer(10), ctx.event('e')), [['timer', '', false, due], ['event', 'e', false, '{}'], ['select', '', true, '7']]],
    ['select of case', (ctx) => ctx.select(ctx.timer(10), ctx.event('e')), [['timer', '', false, due], ['event', 'e', false, '{}'], ['select', '', true, new Uint8Array([0xff])]]],
  ];
  for (const [want, op, history] of cases) {
    const seen = [];
    const { status, last } = await replay(async (ctx) => {
      try { seen.push(await op(ctx)); } catch (err) { seen.push(err); throw err; }
      return 'returned';
    }, history);
    const what = `${JSON.stringify(history.at(-1).slice(0, 2))} recording ${history.at(-1)[3]}`;
    assert.equal(status, 'blocked', what);
    assert.equal(last.error.type, 'non_determinism', what);
    assert.ok(last.error.message.includes(want), `${what}: ${last.error.message}`);
    assert.ok(seen.every((v) => v?.name === 'RunUnwound'), `${what}: the workflow saw ${seen}`);
  }
});

test('recorded values that decode are replayed: a Go time to the nanosecond, a uuid, the largest random', async () => {
  const { status, last } = await replay(async (ctx) => [ctx.now().toISOString(), ctx.uuid(), ctx.random()],
    [['now', '', true, '"2024-05-06T07:08:09.123456789Z"'], ['uuid', '', true, '"u-1"'], ['random', '', true, '18446744073709551615']]);
  assert.equal(status, 'succeeded');
  assert.deepEqual(JSON.parse(new TextDecoder().decode(last.output)), ['2024-05-06T07:08:09.123Z', 'u-1', (2 ** 53 - 1) / 2 ** 53]);
});

test('the worker\'s sleep leaves no abort listener behind, whether its timer fires or the signal aborts', async () => {
  const ac = new AbortController();
  for (let i = 0; i < 20; i++) await sleep(1, ac.signal);
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'after the timer fired');
  const p = sleep(60_000, ac.signal);
  assert.equal(getEventListeners(ac.signal, 'abort').length, 1);
  ac.abort();
  await p;
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'after the abort');
  await sleep(60_000, ac.signal); // already aborted: at once
});

/** An SSE server answering its n-th request with bodies[n] (then closing it); records the requests. */
async function sseServer(t, bodies) {
  const reqs = [];
  const srv = http.createServer((req, res) => {
    reqs.push({ url: req.url, lastEventId: req.headers['last-event-id'] });
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(bodies[reqs.length - 1] ?? '');
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  return { client: new Client({ server: `http://127.0.0.1:${srv.address().port}` }), reqs };
}

async function collect(it) {
  const out = [];
  for await (const ev of it) out.push([ev.sequence, ev.name]);
  return out;
}

test('stream: an event whose data is not JSON is an error, not a dropped connection', { timeout: 10_000 }, async (t) => {
  const { client, reqs } = await sseServer(t, ['id: 1\nevent: progress\ndata: {not json\n\n', 'id: 1\nevent: run.succeeded\ndata: {}\n\n']);
  await assert.rejects(collect(client.stream('r1')), (e) => e instanceof ApiError && e.code === 'invalid_response' && /data is not JSON/.test(e.message));
  assert.equal(reqs.length, 1, 'not retried');
});

test('stream: an event without an id leaves the resume position where it was', { timeout: 10_000 }, async (t) => {
  const { client, reqs } = await sseServer(t, ['event: progress\ndata: 1\n\n', 'id: 4\nevent: run.succeeded\ndata: {}\n\n']);
  assert.deepEqual(await collect(client.stream('r1', { after: 3 })), [[undefined, 'progress'], [4, 'run.succeeded']]);
  assert.deepEqual(reqs.map((r) => r.lastEventId), ['3', '3']);
});

test('stream: opened at "now", a reconnection before the first event resumes from the position the server gave', { timeout: 10_000 }, async (t) => {
  const { client, reqs } = await sseServer(t, [': hello\nid: 7\n\n', 'id: 8\nevent: run.succeeded\ndata: {}\n\n']);
  assert.deepEqual(await collect(client.stream('r1', { after: 'now' })), [[8, 'run.succeeded']]);
  assert.deepEqual(reqs.map((r) => [r.url.endsWith('?after=now'), r.lastEventId]), [[true, undefined], [false, '7']]);
});

test('a queue payload limit (ClaimedRun.payloadLimit) below the worker\'s holds step results, values, emitted events and the output', async () => {
  const big = 'x'.repeat(2000);
  const run = async (fn, limit = 1000n) => {
    const items = [];
    const host = { checkpoint: async (item) => { items.push(item); return {}; }, maxPayloadBytes: 1 << 20, maxInlineBackoffMs: 2000, log: () => {} };
    const exec = new RunExec(host, claimed('r1', 'w', 'lease', { payloadLimit: limit }), defineWorkflow('w', fn));
    await exec.execute();
    return items.at(-1).checkpoint ?? items.at(-1);
  };
  let attempts = 0;
  let last = await run((ctx) => ctx.step.run('big', async () => { attempts++; return big; }));
  assert.equal(last.status, 'failed');
  assert.match(last.error.message, /payload too large: 2002 bytes \(queue "q" limit 1000\)/);
  assert.equal(attempts, 1, 'not retried');
  for (const fn of [(ctx) => { ctx.set('k', big); return 1; }, (ctx) => { ctx.emit('progress', big); return 1; }, () => big]) {
    last = await run(fn);
    assert.equal(last.status, 'failed');
    assert.match(last.error.message, /queue "q" limit 1000/);
  }
  last = await run(() => big, 0n); // no queue limit: the worker's
  assert.equal(last.status, 'succeeded');
});
