#!/usr/bin/env node
// The conformance kit's worker command: `trellis conformance --worker-cmd 'node
// sdk/typescript/conformance/worker.mjs'`. It reads TRELLIS_SERVER,
// TRELLIS_TOKEN, TRELLIS_NAMESPACE, TRELLIS_QUEUE, TRELLIS_WORKER_NAME and
// TRELLIS_LEASE_SECONDS, serves the kit's workflows on that one queue, and
// stops gracefully on SIGTERM.
import { Worker } from '../src/index.js';
import { all } from './workflows.mjs';

const env = process.env;
if (!env.TRELLIS_SERVER) {
  console.error('conformance worker: TRELLIS_SERVER is required');
  process.exit(2);
}
const worker = new Worker({
  server: env.TRELLIS_SERVER,
  token: env.TRELLIS_TOKEN,
  namespace: env.TRELLIS_NAMESPACE || 'default',
  queues: [env.TRELLIS_QUEUE || 'default'],
  name: env.TRELLIS_WORKER_NAME || undefined,
  leaseMs: Number(env.TRELLIS_LEASE_SECONDS || 10) * 1000,
  concurrency: 50,
});
worker.register(all);
try {
  await worker.run();
} catch (err) {
  console.error(`conformance worker: ${err.stack ?? err}`);
  process.exit(1);
}
