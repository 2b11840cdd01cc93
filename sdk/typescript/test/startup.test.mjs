// A worker started while its server is down (not up yet, restarting) tries to
// reach it again, with backoff, for up to STARTUP_PATIENCE_MS, as the Go
// worker's registration does, then runs as usual; a token the server refuses
// fails at once, and stop() ends the waiting.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Worker, defineWorkflow } from '../src/index.js';
import { startServer, eventually, freshQueue, sleep } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => { await srv?.stop(); });

const early = defineWorkflow('t.early', async (ctx, input) => ctx.step.run('echo', async () => input));

test('a worker started before its server runs once the server is up', async () => {
  await srv.halt();
  const queue = freshQueue();
  const logs = [];
  const w = new Worker({ server: srv.url, token: srv.token, queues: [queue], handleSignals: false, logger: (level, msg) => logs.push(`${level}: ${msg}`) });
  w.register(early);
  let settled = false;
  const running = w.run().finally(() => { settled = true; });
  try {
    await sleep(1500);
    assert.equal(settled, false, 'the worker gave up on a server down for 1.5 s');
    await srv.start();
    await w.ready();
    assert.ok(logs.some((l) => l.startsWith(`warn: cannot reach the server at ${srv.url}`)), logs.join('\n'));
    assert.ok(logs.some((l) => l.startsWith(`info: reached the server at ${srv.url}`)), logs.join('\n'));
    const client = new Client({ server: srv.url, token: srv.token });
    const run = await client.start('t.early', 'hi', { queue });
    assert.equal(await client.result(run.id), 'hi');
  } finally {
    await w.stop();
    await running;
  }
});

test('a token the server refuses fails at once', async () => {
  const w = new Worker({ server: srv.url, token: 'not-a-token', queues: [freshQueue()], handleSignals: false, logger: () => {} });
  w.register(early);
  const t0 = Date.now();
  await assert.rejects(w.run(), (err) => /unauthenticated/i.test(String(err.code ?? '') + err.message));
  assert.ok(Date.now() - t0 < 5000);
});

test('stop() ends the wait for a server', async () => {
  await srv.halt();
  const w = new Worker({ server: srv.url, token: srv.token, queues: [freshQueue()], handleSignals: false, logger: () => {} });
  w.register(early);
  const running = w.run();
  await sleep(1000);
  const t0 = Date.now();
  await w.stop();
  await running;
  assert.ok(Date.now() - t0 < 5000, `stop() took ${Date.now() - t0} ms`);
  await srv.start();
});
