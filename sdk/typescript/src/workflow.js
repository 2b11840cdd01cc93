// Definitions of workflows and jobs.

import { retryPolicy } from './run.js';

function checkDef(what, name, fn) {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError(`${what}: a name (a non-empty string) is required, got ${JSON.stringify(name)}`);
  if (typeof fn !== 'function') throw new TypeError(`${what} ${JSON.stringify(name)}: a function is required, got ${typeof fn}`);
}

/** The highest workflow version a run may be pinned to. */
export const MAX_VERSION = 2147483647;

function checkVersions(what, name, opts) {
  const ok = (v, lo) => Number.isInteger(v) && v >= lo && v <= MAX_VERSION;
  if (opts.version !== undefined && !ok(opts.version, 0)) {
    throw new TypeError(`${what} ${JSON.stringify(name)}: version must be an integer from 0 to ${MAX_VERSION}, got ${opts.version}`);
  }
  const older = opts.alsoServes ?? [];
  if (!Array.isArray(older) || !older.every((v) => ok(v, 1))) {
    throw new TypeError(`${what} ${JSON.stringify(name)}: alsoServes must be a list of integers from 1 to ${MAX_VERSION}`);
  }
}

/**
 * The versions a worker of definition d serves to runs pinned to a version
 * (a start's version): opts.version (default 0), then opts.alsoServes.
 */
export function servedVersions(d) {
  const out = [d.opts.version ?? 0];
  for (const v of d.opts.alsoServes ?? []) if (!out.includes(v)) out.push(v);
  return out;
}

/**
 * Defines a workflow: `fn(ctx, input)` is replayed from its history on every
 * execution, so it must reach the world only through ctx (steps, waits, ...).
 * opts.queue is the queue of its runs started as children (default: the
 * parent's queue); opts.version is recorded with its children's runs, and it
 * and opts.alsoServes (older versions the code still runs, branching on
 * ctx.run.version) are the versions a worker serves to runs pinned to a
 * version: such a run goes only to a worker that serves its version.
 * opts.retry (as a step's: maxAttempts, initialInterval, backoffCoefficient,
 * maxInterval, nonRetryableTypes) retries a run whose function fails (workflow
 * retries, docs/workflow-retries.md); unset, a run fails on its first failure.
 */
export function defineWorkflow(name, fn, opts = {}) {
  checkDef('defineWorkflow', name, fn);
  checkVersions('defineWorkflow', name, opts);
  if (opts.retry !== undefined) checkWorkflowRetry(name, opts.retry);
  return Object.freeze({ kind: 'workflow', name, fn, opts: { ...opts } });
}

/**
 * Defines a job: one function, no workflow code around it; `fn(input, info)`
 * where info has attempt, signal, runId and idempotencyKey. opts.retry and
 * opts.timeout as for a step.
 */
export function defineJob(name, fn, opts = {}) {
  checkDef('defineJob', name, fn);
  checkVersions('defineJob', name, opts);
  const policy = (queueRetry) => retryPolicy(opts, queueRetry);
  return Object.freeze({ kind: 'job', name, fn, opts: { ...opts }, policy });
}

/** Checks a workflow's retry policy as the store will (store.RunRetry.Validate). */
function checkWorkflowRetry(name, r) {
  const bad = (msg) => { throw new TypeError(`defineWorkflow ${JSON.stringify(name)}: retry.${msg}`); };
  if (r === null || typeof r !== 'object') bad(`must be an object, got ${r}`);
  const n = r.maxAttempts ?? 3;
  if (!Number.isInteger(n) || n < 1 || n > 1000) bad(`maxAttempts must be an integer from 1 to 1000, got ${n}`);
  if (r.initialInterval !== undefined && !(r.initialInterval > 0)) bad(`initialInterval must be a positive number of ms, got ${r.initialInterval}`);
  if (r.maxInterval !== undefined && !(r.maxInterval > 0)) bad(`maxInterval must be a positive number of ms, got ${r.maxInterval}`);
  const f = r.backoffCoefficient;
  if (f !== undefined && !(f >= 1 && f <= 100)) bad(`backoffCoefficient must be from 1 to 100, got ${f}`);
  for (const t of r.nonRetryableTypes ?? []) {
    if (typeof t !== 'string' || t.length === 0 || t.length > 200) bad(`nonRetryableTypes must be non-empty strings, got ${JSON.stringify(t)}`);
  }
}
