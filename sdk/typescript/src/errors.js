// Errors of the SDK. Each recorded error has a `type`: the stable name the
// history and the run's record keep (the Go engine's types where they mean the
// same thing: step_timeout, event_timeout, cancelled, non_determinism, ...).

/** Base class of the SDK's errors. */
export class TrellisError extends Error {
  /**
   * @param {string} message
   * @param {{type?: string, nonRetryable?: boolean, cause?: unknown}} [opts]
   */
  constructor(message, opts = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    /** The error's recorded type ("" when none). */
    this.type = opts.type ?? '';
    /** Set when a step must not retry it. */
    this.nonRetryable = opts.nonRetryable ?? false;
  }
}

/** Thrown by a step function to fail the step at once, without retries. */
export class NonRetryableError extends TrellisError {
  constructor(message, opts = {}) {
    super(message, { ...opts, nonRetryable: true });
  }
}

/** A step that failed for good: the workflow sees it as the step's outcome. */
export class StepError extends TrellisError {
  constructor(step, info, attempts) {
    super(info.message, { type: info.type ?? '', nonRetryable: info.nonRetryable ?? false });
    this.step = step;
    this.attempts = attempts;
  }
}

/** The run was cancelled: ops of the workflow throw it once the cancellation is known. */
export class CancelledError extends TrellisError {
  constructor(message = 'run cancelled') {
    super(message, { type: 'cancelled' });
  }
}

/** The run's deadline passed. */
export class DeadlineExceededError extends TrellisError {
  constructor(message = 'run deadline exceeded') {
    super(message, { type: 'deadline_exceeded', nonRetryable: true });
  }
}

/** A step attempt ran past its timeout. */
export class StepTimeoutError extends TrellisError {
  constructor(message) {
    super(message, { type: 'step_timeout' });
  }
}

/** An event wait (or an event case of a select) timed out. */
export class EventTimeoutError extends TrellisError {
  constructor(name) {
    super(`timed out waiting for event "${name}"`, { type: 'event_timeout' });
    this.event = name;
  }
}

/** An approval was not decided before its timeout. */
export class ApprovalTimeoutError extends TrellisError {
  constructor(name) {
    super(`approval timed out: ${name}`, { type: 'approval_timeout' });
    this.approval = name;
  }
}

/** A child run did not succeed. */
export class ChildError extends TrellisError {
  constructor(runId, status, message, type) {
    super(`child run ${runId} ${status}: ${message}`, { type: `child_${status}` });
    this.runId = runId;
    this.status = status;
    this.childMessage = message;
    this.childType = type ?? '';
  }
}

/** Items of a map failed (fail-fast): `failed` lists them. */
export class MapError extends TrellisError {
  constructor(workflow, failed) {
    super(`map of ${workflow}: ${failed.length} item(s) failed`, { type: 'map_failed' });
    this.failed = failed;
  }
}

/** The workflow asked for another op than the run's history holds. */
export class NonDeterminismError extends TrellisError {
  constructor(position, recorded, requested) {
    super(`non-determinism at position ${position}: history has ${recorded}, code asked for ${requested}`, { type: 'non_determinism' });
    this.position = position;
  }
}

/** A call of the HTTP API or the worker protocol was refused. */
export class ApiError extends TrellisError {
  constructor(message, { status = 0, code = '', reason = '', requestId = '' } = {}) {
    super(message, { type: code || reason });
    this.status = status;
    this.code = code;
    this.reason = reason;
    this.requestId = requestId;
  }
}

/** A run ended without succeeding (Client.result). */
export class RunFailedError extends TrellisError {
  constructor(run) {
    const e = run.error ?? {};
    super(`run ${run.id} ${run.status}: ${e.message ?? ''}`, { type: e.type ?? '' });
    this.run = run;
    this.status = run.status;
  }
}

/** The recorded form of an error: {message, type, non_retryable}. */
export function errorInfo(err) {
  if (err instanceof TrellisError) {
    return { message: err.message, type: err.type || '', nonRetryable: !!err.nonRetryable };
  }
  if (err instanceof Error) {
    const type = typeof err.type === 'string' ? err.type : err.name && err.name !== 'Error' ? err.name : '';
    return { message: err.message, type, nonRetryable: !!err.nonRetryable };
  }
  return { message: String(err), type: '', nonRetryable: false };
}

/** The JSON of an error info, as Go's store.ErrorInfo encodes it (omitempty). */
export function errorJSON(info) {
  const o = { message: info.message };
  if (info.type) o.type = info.type;
  if (info.nonRetryable) o.non_retryable = true;
  return o;
}
