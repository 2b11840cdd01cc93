#!/usr/bin/env node
// The TypeScript SDK's bench worker for `trellis bench --workload w1 --no-worker`:
// workflow bench-3-steps in namespace bench (steps a, b, c, each returning a
// 100-character string; the output is the last result's first 8 characters, as
// internal/bench/bench.go's threeSteps).
//
//   TRELLIS_SERVER=http://127.0.0.1:7070 TRELLIS_TOKEN=... node sdk/typescript/bench/w1.mjs
//   trellis bench --server http://127.0.0.1:7070 --token ... --workload w1 -n 5000 --no-worker
//
// Env: TRELLIS_CONCURRENCY (default 256), TRELLIS_HTTP (2 or 1.1; default 2).
import { Worker, defineWorkflow } from '../src/index.js';

const payload = `${'trellis-'.repeat(12)}bench`;
const noop = async () => payload;

export const threeSteps = defineWorkflow('bench-3-steps', async (ctx) => {
  let out = '';
  for (const name of ['a', 'b', 'c']) out = await ctx.step.run(name, noop);
  return out.slice(0, 8);
});

const env = process.env;
const worker = new Worker({
  server: env.TRELLIS_SERVER,
  token: env.TRELLIS_TOKEN,
  namespace: 'bench',
  queues: (env.TRELLIS_QUEUES || 'default').split(','),
  name: env.TRELLIS_WORKER_NAME,
  concurrency: Number(env.TRELLIS_CONCURRENCY || 256),
  httpVersion: env.TRELLIS_HTTP || '2',
  maxCheckpointCalls: Number(env.TRELLIS_CHECKPOINT_CALLS || 4),
});
worker.register(threeSteps);
console.error(`bench worker ${worker.name}: serving bench-3-steps on ${env.TRELLIS_SERVER}`);
await worker.run();
