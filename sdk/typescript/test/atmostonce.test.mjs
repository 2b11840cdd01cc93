// At-most-once steps: a worker process SIGKILLed in the middle of an
// attempt leaves it started; the worker that takes the run over does not run
// the step again, and its onUnknown policy decides. A failure the attempt
// reports is retried as usual.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Client, Worker, defineWorkflow, RunFailedError } from '../src/index.js';
import { startServer, startWorker, eventually, freshQueue, sdkDir } from './helpers.mjs';
import { amoAll } from './amo-workflows.mjs';

let srv; let client;

before(async () => {
  srv = await startServer();
  client = new Client({ server: srv.url, token: srv.token });
});

after(async () => { await srv?.stop(); });

const effects = (file) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').trim().split('\n').filter(Boolean) : []);

test('a killed attempt of an at-most-once step is not run again; onUnknown decides', async () => {
  const q = freshQueue('amo');
  const file = path.join(srv.dir, `effects-${q}.log`);
  process.env.AMO_EFFECTS = file;
  const hung = await startWorker(srv, { queue: q, lease: 1, script: path.join(sdkDir, 'test/amo-worker.mjs'), env: { AMO_EFFECTS: file, AMO_HANG: '1' } });
  const e = await client.start('amo.error', {}, { queue: q });
  const f = await client.start('amo.fail', {}, { queue: q });
  await eventually(() => effects(file).length === 2, 15_000, 'both attempts started');
  await hung.kill();

  const w = new Worker({ server: srv.url, token: srv.token, queues: [q], handleSignals: false, leaseMs: 2000, logger: () => {} });
  w.register(amoAll);
  const ready = w.ready();
  const running = w.run();
  await ready;
  try {
    assert.deepEqual(await client.result(e.id, { timeout: 15_000 }), { type: 'step_outcome_unknown', attempts: 1 });
    await assert.rejects(client.result(f.id, { timeout: 15_000 }), (err) => err instanceof RunFailedError && err.status === 'failed' && err.type === 'step_outcome_unknown');
    assert.equal(effects(file).length, 2, `each step ran once: ${effects(file)}`);
    for (const id of [e.id, f.id]) {
      const [op] = (await client.history(id)).ops;
      assert.equal(op.name, 'charge');
      assert.equal(op.done, true);
      assert.equal(op.error.type, 'step_outcome_unknown');
      assert.equal(op.attempt_log?.length ?? op.attemptLog?.length, 1, 'the unknown attempt stays in the history');
    }
  } finally {
    await w.stop();
    await running;
  }
});

const retried = defineWorkflow('amo.retry', async (ctx) => {
  const a = await ctx.step.run('once', async () => 'a', { atMostOnce: true });
  const b = await ctx.step.run('flaky', async ({ attempt }) => {
    if (attempt === 1) throw new Error('declined for now');
    return `b${attempt}`;
  }, { atMostOnce: true, onUnknown: 'failRun', retry: { maxAttempts: 2, initialInterval: 1 } });
  return a + b;
});

test('an at-most-once step retries a failure it reported; each start row is replaced by its end', async () => {
  const q = freshQueue('amo');
  const w = new Worker({ server: srv.url, token: srv.token, queues: [q], handleSignals: false, leaseMs: 5000, logger: () => {} });
  w.register([retried]);
  const ready = w.ready();
  const running = w.run();
  await ready;
  try {
    const run = await client.start('amo.retry', {}, { queue: q });
    assert.equal(await client.result(run.id, { timeout: 10_000 }), 'ab2');
    const ops = (await client.history(run.id)).ops;
    const log = (op) => op.attempt_log ?? op.attemptLog ?? [];
    assert.equal(log(ops[0]).length, 0, 'no started row left for the step done at its first attempt');
    assert.ok(ops[0].attempt_started_at ?? ops[0].attemptStartedAt, 'its attempt\'s start');
    assert.equal(log(ops[1]).length, 1);
    assert.equal(log(ops[1])[0].error.message, 'declined for now');
  } finally {
    await w.stop();
    await running;
  }
});

const badOpts = [
  [{ onUnknown: 'failRun' }, 'applies to at-most-once steps only'],
  [{ atMostOnce: true, onUnknown: 'retry' }, "onUnknown must be 'error' or 'failRun'"],
  [{ atMostOnce: 'yes' }, 'atMostOnce must be a boolean'],
];
let badRan = 0;
const bad = defineWorkflow('amo.bad', async (ctx, i) => ctx.step.run('s', async () => { badRan++; return 1; }, badOpts[i][0]));

test('bad at-most-once options fail the run with a clear error; the step neither runs nor is recorded', async () => {
  const q = freshQueue('amo');
  const w = new Worker({ server: srv.url, token: srv.token, queues: [q], handleSignals: false, leaseMs: 5000, logger: () => {} });
  w.register([bad]);
  const ready = w.ready();
  const running = w.run();
  await ready;
  try {
    for (let i = 0; i < badOpts.length; i++) {
      const run = await client.start('amo.bad', i, { queue: q });
      await assert.rejects(client.result(run.id, { timeout: 10_000 }), (err) => err instanceof RunFailedError && err.message.includes(badOpts[i][1]));
      assert.equal((await client.history(run.id)).ops.length, 0);
    }
    assert.equal(badRan, 0);
  } finally {
    await w.stop();
    await running;
  }
});
