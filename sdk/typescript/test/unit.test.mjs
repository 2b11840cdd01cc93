// The SDK's parts without a server: the worker's bookkeeping, the engine's
// replay of bad histories, timers, the client's stream parser, call timeouts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker, defineJob } from '../src/index.js';
import { encode } from '../src/codec.js';

const tick = (ms = 10) => new Promise((r) => setTimeout(r, ms));

/** A ClaimedRun of the protocol, as the claim stream gives it. */
function claimed(id, workflow, token, extra = {}) {
  return {
    run: { id, namespace: 'default', workflowId: id, workflow, queue: 'q', attempts: 1n, input: encode({}), cancelRequested: false, priority: 0n, ...extra.run },
    leaseToken: token, leaseSecret: '', history: extra.history ?? [], inbox: extra.inbox ?? [], queueRetry: undefined,
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
