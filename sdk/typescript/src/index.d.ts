// Types of @trellis/sdk (the package is plain ESM JavaScript; these describe it).

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface RetryPolicy {
  /** Counts the first attempt; default 3 (or the queue's default policy). */
  maxAttempts?: number;
  /** First backoff in ms; default 1000 (or the queue's). */
  initialInterval?: number;
  /** Growth of the backoff per retry; default 2. */
  backoffCoefficient?: number;
  /** Cap of the backoff in ms; default 60000. */
  maxInterval?: number;
  /** Recorded error types that fail the step at once. */
  nonRetryableTypes?: string[];
}

export interface StepOptions {
  retry?: RetryPolicy;
  /** Bound of each attempt in ms (StepTimeoutError, type step_timeout). */
  timeout?: number;
  /**
   * At most once: each attempt's start is checkpointed before fn runs, and an
   * attempt that started and never recorded its end (its worker died, its lease
   * expired, the server ended it after its timeout) is not run again: the step
   * ends with a StepError of type "step_outcome_unknown". A failure fn reports
   * is retried by `retry` as usual. One checkpoint more per attempt.
   */
  atMostOnce?: boolean;
  /** With atMostOnce: 'error' (the default) throws the StepError; 'failRun' fails the run with it. */
  onUnknown?: 'error' | 'failRun';
}

export interface StepInfo {
  runId: string;
  step: string;
  position: number;
  /** 1 for the first attempt. */
  attempt: number;
  /** Aborted by the run's cancellation, the attempt's timeout, the run's deadline or a lost lease. */
  signal: AbortSignal;
  /** "<run id>/<position>": the same on every attempt of the step. */
  idempotencyKey: string;
}

export interface RunInfo {
  id: string;
  workflowId: string;
  workflow: string;
  namespace: string;
  queue: string;
  /** The run's claim count: 1 on its first execution. */
  attempt: number;
  /**
   * The run's attempt of its workflow function: 1, then one more after each
   * failed attempt that a workflow retry followed (docs/workflow-retries.md).
   */
  workflowAttempt: number;
  parentId: string;
  /** The workflow version the run was started with (pinned by a start's version, else the starter's). */
  version: number;
}

export interface Decision {
  approved: boolean;
  principal: string;
  comment: string;
  decidedAt?: Date;
}

export interface ApprovalOptions {
  approvers?: string[];
  subject?: string;
  details?: Json;
  /** ms; ApprovalTimeoutError after it. */
  timeout?: number;
}

export interface ChildOptions {
  /** The child's workflow ID (default its run ID, "<parent>.<position>"). */
  id?: string;
  /** Default: the parent's queue. */
  queue?: string;
  priority?: number;
  version?: number;
  /** The parent does not wait: child() resolves with {runId}. */
  detached?: boolean;
}

export interface MapOptions {
  /** At most this many children running at once (0: no limit). */
  concurrency?: number;
  /** Wait for every item and return failed ones as ChildError values instead of throwing MapError. */
  collectErrors?: boolean;
  queue?: string;
  priority?: number;
}

/** A case of select: ctx.timer(ms) or ctx.event(name). */
export interface SelectCase { readonly __case: unique symbol }

export interface WorkflowContext {
  readonly run: RunInfo;
  /** Whether the run's cancellation is known. */
  readonly cancelled: boolean;
  readonly step: {
    run<T>(name: string, fn: (info: StepInfo) => T | Promise<T>, opts?: StepOptions): Promise<T>;
  };
  /** A view whose ops the cancellation does not stop (cleanup after CancelledError). */
  detached(): WorkflowContext;
  sleep(ms: number): Promise<void>;
  timer(ms: number): SelectCase;
  event(name: string, opts?: { timeout?: number }): SelectCase;
  waitForEvent<T = Json>(name: string, opts?: { timeout?: number }): Promise<T>;
  approval(name: string, opts?: ApprovalOptions): Promise<Decision>;
  child<O = Json>(workflow: WorkflowDefinition<any, O> | string, input: unknown, opts?: ChildOptions): Promise<O>;
  map<O = Json>(workflow: WorkflowDefinition<any, O> | string, items: unknown[], opts?: MapOptions): Promise<(O | ChildError)[]>;
  select(...cases: SelectCase[]): Promise<{ index: number; value: any }>;
  emit(name: string, data: unknown): void;
  set(key: string, value: unknown): void;
  get<T = Json>(key: string): T | undefined;
  delete(key: string): void;
  now(): Date;
  uuid(): string;
  random(): number;
  patched(id: string): boolean;
}

export interface WorkflowDefinition<I = any, O = any> {
  readonly kind: 'workflow';
  readonly name: string;
  readonly fn: (ctx: WorkflowContext, input: I) => Promise<O>;
  readonly opts: { version?: number; alsoServes?: number[] };
}

export interface JobInfo {
  runId: string;
  attempt: number;
  signal: AbortSignal;
  idempotencyKey: string;
}

export interface JobDefinition<I = any, O = any> {
  readonly kind: 'job';
  readonly name: string;
  readonly fn: (input: I, info: JobInfo) => Promise<O>;
  readonly opts: StepOptions;
}

/** opts.version (default 0) and opts.alsoServes are the versions a worker serves to runs pinned to a version. */
export function defineWorkflow<I = any, O = any>(name: string, fn: (ctx: WorkflowContext, input: I) => Promise<O>, opts?: {
  version?: number;
  alsoServes?: number[];
  /**
   * Workflow retries: a run whose function fails (not cancelled, not past its
   * deadline, not a non-retryable error) is attempted again after the
   * backoff, replaying what it recorded and running its failed steps again,
   * up to maxAttempts (default 3). Unset: a run fails on its first failure.
   * A run started with a retry policy of its own (the API's start) keeps that.
   */
  retry?: RetryPolicy;
}): WorkflowDefinition<I, O>;
export function defineJob<I = any, O = any>(name: string, fn: (input: I, info: JobInfo) => Promise<O> | O, opts?: StepOptions): JobDefinition<I, O>;

export interface WorkerOptions {
  server: string;
  token?: string;
  namespace?: string;
  /** Queues served; default ["default"]. */
  queues?: string[];
  /** Unique per start; default host-pid-random. */
  name?: string;
  /** Runs executing at once (the claim credit), 1 to 1000; default 100. */
  concurrency?: number;
  /** Lease duration in ms; default 10000. */
  leaseMs?: number;
  heartbeatMs?: number;
  /** How long stop() lets active runs finish before handing them back; default 10000. */
  shutdownGraceMs?: number;
  /** Retry backoffs and sleeps up to this long wait in the worker; longer ones release the run. Default 2000. */
  maxInlineBackoffMs?: number;
  maxPayloadBytes?: number;
  claimWaitMs?: number;
  /** Checkpoint batches in flight at once; default 2. */
  maxCheckpointCalls?: number;
  /** Stop gracefully on SIGTERM and SIGINT; default true. */
  handleSignals?: boolean;
  /** "2" (default) or "1.1". */
  httpVersion?: '2' | '1.1';
  /** Timeout of each unary protocol call (and of a checkpoint attempt, within the lease); default leaseMs. */
  callTimeoutMs?: number;
  /** HTTP/2: PING the server every this many ms, idle or not; default 10000. */
  pingIntervalMs?: number;
  /** HTTP/2: a PING unanswered this long closes the connection (its calls fail and are retried); default 10000. */
  pingTimeoutMs?: number;
  logger?: (level: 'debug' | 'info' | 'warn' | 'error', msg: string) => void;
}

export class Worker {
  constructor(opts: WorkerOptions);
  readonly name: string;
  register(...defs: (WorkflowDefinition | JobDefinition | (WorkflowDefinition | JobDefinition)[])[]): this;
  /** Runs until stop() (or SIGTERM): resolves once stopped. */
  run(): Promise<void>;
  /** Resolves once run() has written the worker's record. */
  ready(): Promise<void>;
  stop(): Promise<void>;
}

export const SDK_VERSION: string;

export interface Run {
  namespace: string;
  id: string;
  workflow_id: string;
  workflow: string;
  queue: string;
  status: 'pending' | 'running' | 'waiting' | 'blocked' | 'succeeded' | 'failed' | 'cancelled';
  input?: Json;
  output?: Json;
  error?: { message: string; type?: string; non_retryable?: boolean };
  wait_reason?: string;
  parent_id?: string;
  [field: string]: unknown;
}

export interface StartOptions {
  id?: string;
  queue?: string;
  priority?: number;
  deadline?: Date | string;
  startAt?: Date | string;
  reuse?: string;
  idempotencyKey?: string;
  /** Pins the run to this workflow version (1 to 2147483647): only a worker that serves it runs it. */
  version?: number;
  /** The run's workflow retry policy, stored with it: it replaces the workflow's (maxAttempts 1: no retries). */
  retry?: RetryPolicy;
}

/** An event of a run's stream; sequence is undefined only for an event sent without an id (a Trellis server always sends one). */
export interface StreamEvent { sequence: number; name: string; data: any }

export class Client {
  constructor(opts: { server: string; token?: string; namespace?: string; retries?: number });
  start(workflow: WorkflowDefinition | JobDefinition | string, input: unknown, opts?: StartOptions): Promise<Run>;
  getRun(id: string): Promise<Run>;
  result<T = Json>(id: string, opts?: { timeout?: number; signal?: AbortSignal }): Promise<T>;
  waitRun(id: string, opts?: { timeout?: number; signal?: AbortSignal }): Promise<Run>;
  cancel(id: string, opts?: { idempotencyKey?: string }): Promise<Run>;
  sendEvent(id: string, name: string, payload?: unknown, opts?: { idempotencyKey?: string }): Promise<void>;
  approvals(filter?: { run?: string; status?: string; limit?: number }): Promise<any[]>;
  approve(id: string, opts?: { comment?: string; idempotencyKey?: string }): Promise<any>;
  reject(id: string, opts?: { comment?: string; idempotencyKey?: string }): Promise<any>;
  listRuns(filter?: { status?: string | string[]; workflow?: string; workflowId?: string; queue?: string; limit?: number; pageToken?: string }): Promise<{ runs: Run[]; nextPageToken?: string }>;
  history(id: string): Promise<{ format: string; run: Run; ops: any[] }>;
  value<T = Json>(id: string, key: string): Promise<T | undefined>;
  children(id: string, position: number): Promise<Run[]>;
  stream(id: string, opts?: { after?: number | 'now'; signal?: AbortSignal }): AsyncGenerator<StreamEvent>;
}

export class TrellisError extends Error {
  constructor(message: string, opts?: { type?: string; nonRetryable?: boolean; cause?: unknown });
  type: string;
  nonRetryable: boolean;
}
export class NonRetryableError extends TrellisError {}
export class StepError extends TrellisError { step: string; attempts: number }
export class CancelledError extends TrellisError { constructor(message?: string) }
export class DeadlineExceededError extends TrellisError {}
export class StepTimeoutError extends TrellisError {}
export class EventTimeoutError extends TrellisError { event: string }
export class ApprovalTimeoutError extends TrellisError { approval: string }
export class ChildError extends TrellisError { runId: string; status: string; childMessage: string; childType: string }
export class MapError extends TrellisError { failed: { index: number; runId: string; status: string; message: string; type: string }[] }
export class NonDeterminismError extends TrellisError { position: number }
export class ApiError extends TrellisError { status: number; code: string; reason: string; requestId: string }
export class RunFailedError extends TrellisError { run: Run; status: string }
export class RunUnwound extends Error {}
