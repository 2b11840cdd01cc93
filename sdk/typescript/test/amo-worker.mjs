#!/usr/bin/env node
// The worker process of test/atmostonce.test.mjs (see helpers.mjs startWorker):
// serves the at-most-once workflows until it is killed.
import { Worker } from '../src/index.js';
import { amoAll } from './amo-workflows.mjs';

const env = process.env;
const worker = new Worker({
  server: env.TRELLIS_SERVER, token: env.TRELLIS_TOKEN, queues: [env.TRELLIS_QUEUE],
  name: env.TRELLIS_WORKER_NAME, leaseMs: Number(env.TRELLIS_LEASE_SECONDS) * 1000, logger: () => {},
});
worker.register(amoAll);
await worker.run();
