// Definitions of workflows and jobs.

import { retryPolicy } from './run.js';

function checkDef(what, name, fn) {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError(`${what}: a name (a non-empty string) is required, got ${JSON.stringify(name)}`);
  if (typeof fn !== 'function') throw new TypeError(`${what} ${JSON.stringify(name)}: a function is required, got ${typeof fn}`);
}

/**
 * Defines a workflow: `fn(ctx, input)` is replayed from its history on every
 * execution, so it must reach the world only through ctx (steps, waits, ...).
 * opts.queue is the queue of its runs started as children (default: the
 * parent's queue); opts.version is recorded with its runs.
 */
export function defineWorkflow(name, fn, opts = {}) {
  checkDef('defineWorkflow', name, fn);
  return Object.freeze({ kind: 'workflow', name, fn, opts: { ...opts } });
}

/**
 * Defines a job: one function, no workflow code around it; `fn(input, info)`
 * where info has attempt, signal, runId and idempotencyKey. opts.retry and
 * opts.timeout as for a step.
 */
export function defineJob(name, fn, opts = {}) {
  checkDef('defineJob', name, fn);
  const policy = (queueRetry) => retryPolicy(opts, queueRetry);
  return Object.freeze({ kind: 'job', name, fn, opts: { ...opts }, policy });
}
