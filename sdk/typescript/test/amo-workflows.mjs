// The at-most-once workflows of test/atmostonce.test.mjs, shared by the test
// and its worker process (test/amo-worker.mjs): one step that appends
// "<run id> <idempotency key> <attempt>" to $AMO_EFFECTS, then, with
// $AMO_HANG set, blocks until its process is killed.
import fs from 'node:fs';
import { defineWorkflow, StepError } from '../src/index.js';

function charge(ctx, onUnknown) {
  return ctx.step.run('charge', async ({ runId, idempotencyKey, attempt }) => {
    fs.appendFileSync(process.env.AMO_EFFECTS, `${runId} ${idempotencyKey} ${attempt}\n`);
    if (process.env.AMO_HANG) await new Promise(() => {}); // until SIGKILL
    return 'receipt';
  }, { atMostOnce: true, onUnknown });
}

export const amoError = defineWorkflow('amo.error', async (ctx) => {
  try {
    return await charge(ctx, 'error');
  } catch (err) {
    if (err instanceof StepError) return { type: err.type, attempts: err.attempts };
    throw err;
  }
});

export const amoFail = defineWorkflow('amo.fail', async (ctx) => {
  const r = await charge(ctx, 'failRun');
  return { returned: r }; // never reached after an unknown outcome
});

export const amoAll = [amoError, amoFail];
