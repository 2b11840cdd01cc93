// Definitions of workflows and jobs.

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
  const r = opts.retry ?? {};
  const policy = (queueRetry) => {
    let maxAttempts = r.maxAttempts;
    let initial = r.initialInterval;
    let coefficient = r.backoffCoefficient ?? 2;
    let maxInterval = r.maxInterval ?? 60_000;
    if (maxAttempts === undefined && queueRetry && queueRetry.maxAttempts > 0n) maxAttempts = Number(queueRetry.maxAttempts);
    if (initial === undefined && queueRetry?.initialBackoff) {
      initial = Number(queueRetry.initialBackoff.seconds) * 1000 + queueRetry.initialBackoff.nanos / 1e6;
      maxInterval = queueRetry.maxBackoff ? Number(queueRetry.maxBackoff.seconds) * 1000 + queueRetry.maxBackoff.nanos / 1e6 : Infinity;
      coefficient = 2;
    }
    return {
      maxAttempts: maxAttempts ?? 3,
      delay: (n) => Math.min((initial ?? 1000) * coefficient ** Math.max(n - 1, 0), maxInterval),
      nonRetryableTypes: r.nonRetryableTypes ?? [],
    };
  };
  return Object.freeze({ kind: 'job', name, fn, opts: { ...opts }, policy });
}
