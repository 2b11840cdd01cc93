// The conformance kit's 17 workflows (docs: the env contract), as a
// TypeScript-SDK program writes them.
import { defineWorkflow, defineJob, StepError, CancelledError, EventTimeoutError } from '../src/index.js';

const abortable = (ms, signal) => new Promise((resolve, reject) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); reject(signal.reason); }, { once: true });
});

export const threeSteps = defineWorkflow('conformance.three_steps', async (ctx, { x }) => {
  const a = await ctx.step.run('add', async () => x + 1);
  const b = await ctx.step.run('mul', async () => a * 10);
  return ctx.step.run('format', async () => `result=${b}`);
});

export const retries = defineWorkflow('conformance.retries', async (ctx, { fail_times: failTimes }) =>
  ctx.step.run('flaky', async ({ attempt }) => {
    if (attempt <= failTimes) throw new Error(`flaky failure ${attempt}`);
    return `ok after ${attempt}`;
  }, { retry: { maxAttempts: 4, initialInterval: 200, backoffCoefficient: 2 } }));

export const stepTimeout = defineWorkflow('conformance.step_timeout', async (ctx) => {
  try {
    await ctx.step.run('slow', async ({ signal }) => abortable(10_000, signal), { timeout: 300, retry: { maxAttempts: 2, initialInterval: 100 } });
    return { error_type: null };
  } catch (err) {
    if (err instanceof StepError) return { error_type: err.type };
    throw err;
  }
});

export const sleep = defineWorkflow('conformance.sleep', async (ctx, { seconds }) => {
  await ctx.sleep(seconds * 1000);
  return ctx.step.run('after', async () => 'slept');
});

export const eventWait = defineWorkflow('conformance.event_wait', async (ctx) => {
  const go = await ctx.waitForEvent('go', { timeout: 60_000 });
  let never;
  try {
    never = await ctx.waitForEvent('never', { timeout: 1000 });
  } catch (err) {
    if (!(err instanceof EventTimeoutError)) throw err;
    never = 'timeout';
  }
  return { go, never };
});

export const approval = defineWorkflow('conformance.approval', async (ctx) => {
  const d = await ctx.approval('ship');
  return { approved: d.approved };
});

export const double = defineWorkflow('conformance.double', async (ctx, { n }) => ctx.step.run('double', async () => n * 2));

// queue, when given, is another worker's queue, of any language (docs/conformance.md).
export const child = defineWorkflow('conformance.child', async (ctx, { n, queue }) => ctx.child(double, { n }, { queue: queue || ctx.run.queue }));

export const map = defineWorkflow('conformance.map', async (ctx, { count, concurrency }) => {
  const items = Array.from({ length: count }, (_, n) => ({ n }));
  return ctx.map(double, items, { concurrency, queue: ctx.run.queue });
});

export const select = defineWorkflow('conformance.select', async (ctx) => {
  const timer = ctx.timer(60_000);
  const pick = ctx.event('pick');
  const { index, value } = await ctx.select(timer, pick);
  return { index, value };
});

export const cancel = defineWorkflow('conformance.cancel', async (ctx) => {
  await ctx.step.run('work', async () => 'worked');
  try {
    await ctx.waitForEvent('never');
    return 'not cancelled';
  } catch (err) {
    if (err instanceof CancelledError) {
      await ctx.detached().step.run('cleanup', async () => 'cleaned');
    }
    throw err;
  }
});

export const kv = defineWorkflow('conformance.kv', async (ctx) => {
  ctx.set('a', 1);
  ctx.set('b', { x: 2 });
  ctx.delete('a');
  return { a: ctx.get('a') ?? null, b: ctx.get('b') ?? null };
});

export const emit = defineWorkflow('conformance.emit', async (ctx) => {
  ctx.emit('progress', { pct: 50 });
  await ctx.step.run('work', async () => 'w');
  ctx.emit('progress', { pct: 100 });
  return 'done';
});

export const nondeterminism = defineWorkflow('conformance.nondeterminism', async (ctx) => {
  if (ctx.run.attempt === 1) await ctx.step.run('before', async () => 'b');
  else await ctx.step.run('after', async () => 'a');
  await ctx.waitForEvent('next');
  return 'unreachable';
});

export const jobSum = defineJob('conformance.job_sum', async ({ a, b }) => a + b);

export const takeover = defineWorkflow('conformance.takeover', async (ctx) => {
  await ctx.step.run('before', async () => 'b');
  await ctx.step.run('slow', async ({ signal }) => { await abortable(4000, signal); return 's'; });
  await ctx.step.run('after', async () => 'a');
  return 'survived';
});

export const atMostOnce = defineWorkflow('conformance.at_most_once', async (ctx) => {
  await ctx.step.run('before', async () => 'b');
  try {
    const c = await ctx.step.run('charge', async ({ signal }) => { await abortable(4000, signal); return 'c'; }, { atMostOnce: true });
    return { charged: c };
  } catch (err) {
    if (err instanceof StepError) return { error_type: err.type };
    throw err;
  }
});

export const recorded = defineWorkflow('conformance.recorded', async (ctx) => {
  const now = ctx.now();
  const uuid = ctx.uuid();
  ctx.random();
  return { now: now.toISOString(), uuid };
});

export const workflowRetry = defineWorkflow('conformance.workflow_retry', async (ctx, { fail_times: failTimes }) => {
  await ctx.step.run('lookup', async () => 'found');
  const result = await ctx.step.run('flaky', async ({ attempt }) => {
    if (attempt <= failTimes) throw new Error(`flaky failure ${attempt}`);
    return `ok after ${attempt}`;
  }, { retry: { maxAttempts: 2, initialInterval: 50, backoffCoefficient: 1 } });
  return { workflow_attempt: ctx.run.workflowAttempt, result };
}, { retry: { maxAttempts: 3, initialInterval: 100, backoffCoefficient: 2 } });

export const all = [threeSteps, retries, stepTimeout, sleep, eventWait, approval, double, child, map, select,
  cancel, kv, emit, nondeterminism, jobSum, takeover, atMostOnce, recorded, workflowRetry];
