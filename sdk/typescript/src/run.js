// The replay engine: one claimed run executed by calling its workflow function
// from the start, matching each op the code asks for against the run's history
// (position, kind, name), executing what history does not hold yet, and saving it
// in checkpoints, as the Go engine (internal/engine) does, op for op, so that a
// run's history and stream look the same whichever language ran it.
//
// JavaScript has no goroutine to end, so a run that must stop (wait, block, be
// handed back or abandoned) leaves the workflow's pending op unresolved forever:
// the executor races the workflow's promise with the run's "unwinding" promise,
// and the abandoned function is garbage collected.

import { encode, encodeRaw, decode, text } from './codec.js';
import {
  CancelledError, DeadlineExceededError, StepError, StepTimeoutError, EventTimeoutError,
  ApprovalTimeoutError, ChildError, MapError, NonDeterminismError, TrellisError, errorInfo, errorJSON,
} from './errors.js';
import { create } from '@bufbuild/protobuf';
import { LeaseSchema } from '../gen/trellis/worker/v1/worker_pb.js';
import { ts, date, reasonOf } from './proto.js';
import { longTimeout, clearLongTimeout } from './timer.js';

/** Thrown inside the engine when the run unwinds; never reaches workflow code. */
const UNWIND = Symbol('trellis.unwind');
/** A promise that never settles: what an op of an unwinding run returns. */
const NEVER = new Promise(() => {});

const STEP_ABANDON_GRACE_MS = 200;
const textEnc = new TextEncoder();

// fail: an at-most-once step's unknown outcome fails the run (onUnknown 'failRun').
const U = { none: 0, blocked: 1, suspend: 2, handBack: 3, abandon: 4, fail: 5 };

/** A Go time.Duration's String form for the durations errors name (ms precision). */
export function fmtDuration(ms) {
  if (ms < 1000) return `${ms}ms`;
  const parts = [];
  let s = ms / 1000;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (h) parts.push(`${h}h`);
  if (h || m) parts.push(`${m}m`);
  parts.push(`${Number(s.toFixed(3))}s`);
  return parts.join('');
}

function describe(kind, name) {
  return name ? `${kind} ${JSON.stringify(name)}` : kind;
}

function sleepFor(ms, signals) {
  return new Promise((resolve) => {
    const done = () => {
      clearLongTimeout(t);
      for (const s of signals) s?.removeEventListener('abort', done);
      resolve();
    };
    const t = longTimeout(done, ms);
    for (const s of signals) {
      if (!s) continue;
      if (s.aborted) { done(); return; }
      s.addEventListener('abort', done, { once: true });
    }
  });
}

/** Normalizes a history op of the protocol. */
function opOf(o) {
  return {
    position: Number(o.position), kind: o.kind, name: o.name, done: o.done,
    result: o.result, error: o.error ? { message: o.error.message, type: o.error.type, nonRetryable: o.error.nonRetryable } : undefined,
    attempts: Number(o.attempts), startedAt: date(o.startedAt) ?? new Date(), ended: endedAttempt(o),
    attemptLog: (o.attemptLog ?? []).map((a) => ({ attempt: Number(a.attempt), outcome: a.outcome ?? '', startedAt: date(a.startedAt) })),
  };
}

/**
 * A step's last attempt when it ended without its worker: recorded by the
 * server as lost (its lease expired) or timed out, numbered as the op's
 * attempts. It counts against the step's attempts; the next one starts at once.
 */
export function endedAttempt(o) {
  const log = o.attemptLog ?? [];
  const a = log[log.length - 1];
  if (!a || a.attempt !== o.attempts || (a.outcome !== 'lost' && a.outcome !== 'timed_out')) return undefined;
  return { message: a.error?.message ?? `attempt ${a.outcome}`, type: a.error?.type ?? '' };
}

/**
 * The last attempt of rec, a step op in progress, when its outcome is unknown:
 * it started and never recorded its end (outcome "started"), or, for an
 * at-most-once step, its lease expired while it ran ("lost") or the server
 * ended it after its timeout ("timed_out"). null otherwise. Such a step is not
 * run again (docs/worker-protocol.md, "At-most-once steps").
 */
function unknownAttempt(rec, atMostOnce) {
  if (rec.done || rec.attemptLog.length === 0) return null;
  const a = rec.attemptLog[rec.attemptLog.length - 1];
  if (a.attempt !== rec.attempts) return null;
  if (a.outcome === 'started' || (atMostOnce && (a.outcome === 'lost' || a.outcome === 'timed_out'))) return a;
  return null;
}

function isOutcomeUnknown(op) {
  return op.kind === 'step' && op.done && op.error?.type === 'step_outcome_unknown';
}

function emptyQueue() {
  return { ops: [], atts: [], kv: [], consume: [], noEvents: [], children: [], approvals: [], expire: [], stream: [] };
}

function queueEmpty(q) {
  return q.ops.length === 0 && q.atts.length === 0 && q.kv.length === 0 && q.consume.length === 0 &&
    q.noEvents.length === 0 && q.children.length === 0 && q.approvals.length === 0 && q.expire.length === 0 &&
    q.stream.length === 0;
}

function lifecycle(name, obj) {
  return { name, data: encode(obj) };
}

/**
 * How many attempts of the step at position pos earlier attempts of the run
 * made (workflow retries, the protocol's Run.workflow_attempts): they do not
 * count against the step's maxAttempts in this one.
 */
export function priorAttempts(workflowAttempts, pos) {
  for (let i = (workflowAttempts?.length ?? 0) - 1; i >= 0; i--) {
    for (const s of workflowAttempts[i].steps ?? []) {
      if (Number(s.position) === Number(pos)) return Number(s.attempts);
    }
  }
  return 0;
}

/**
 * A workflow's retry policy (defineWorkflow's opts.retry: maxAttempts,
 * initialInterval and maxInterval in ms, backoffCoefficient,
 * nonRetryableTypes) as the protocol's RunRetry, sent with the checkpoint
 * that fails a run: the store retries the run while it has attempts left.
 * undefined when the workflow has none.
 */
export function workflowRetryPB(r) {
  if (!r) return undefined;
  const dur = (ms) => (ms > 0 ? { seconds: BigInt(Math.floor(ms / 1000)), nanos: Math.round((ms % 1000) * 1e6) } : undefined);
  const initial = r.initialInterval ?? 1000;
  return {
    maxAttempts: BigInt(r.maxAttempts ?? 3),
    initialBackoff: dur(initial),
    factor: r.backoffCoefficient ?? 2,
    maxBackoff: dur(Math.max(r.maxInterval ?? 60_000, initial)),
    jitter: 0,
    nonRetryableTypes: r.nonRetryableTypes ?? [],
  };
}

/** The recorded step retry policy, defaults applied (a step's, or a job's). */
// payloadLimit is a claimed run's payload limit: the worker's, or its queue's
// when lower (ClaimedRun.payloadLimit, docs/payloads.md); `of` says which, for
// errors.
export function payloadLimit(host, claimed) {
  const q = Number(claimed.payloadLimit ?? 0n);
  if (q > 0 && q < host.maxPayloadBytes) return { limit: q, of: `queue ${JSON.stringify(claimed.run.queue)} ` };
  return { limit: host.maxPayloadBytes, of: '' };
}

export function retryPolicy(opts, queueRetry) {
  const r = opts?.retry ?? {};
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
}

/** A run being executed: its history, the ops not yet checkpointed, what stops it. */
export class RunExec {
  /**
   * @param {object} host the worker: checkpoint(item), listChildren(...), options
   * @param {object} claimed the protocol's ClaimedRun
   * @param {object} def the workflow definition
   */
  constructor(host, claimed, def) {
    this.host = host;
    this.def = def;
    const r = claimed.run;
    this.run = {
      namespace: r.namespace, id: r.id, workflowId: r.workflowId, workflow: r.workflow, queue: r.queue,
      attempt: Number(r.attempts), input: r.input, parentId: r.parentId, priority: Number(r.priority),
      version: Number(r.version), deadline: date(r.deadline), createdAt: date(r.createdAt),
      workflowAttempt: Number(r.workflowAttempt ?? 0n) || 1,
    };
    // the run's failed attempts that a workflow retry followed (oldest first)
    this.workflowAttempts = r.workflowAttempts ?? [];
    // made once: every checkpoint and heartbeat carries it as it is
    this.lease = create(LeaseSchema, { namespace: r.namespace, runId: r.id, token: claimed.leaseToken, queue: r.queue, secret: claimed.leaseSecret });
    this.queueRetry = claimed.queueRetry;
    this.payload = payloadLimit(host, claimed);
    this.history = new Map();
    this.lastPos = -1;
    for (const o of claimed.history) {
      const op = opOf(o);
      this.history.set(op.position, op);
      this.lastPos = Math.max(this.lastPos, op.position);
    }
    this.rawHistory = claimed.history;
    this.inbox = claimed.inbox.map((e) => ({ seq: e.seq, name: e.name, payload: e.payload }));
    this.consumed = new Set();
    this.nextPos = 0;
    this.pending = emptyQueue();
    this.openApprovals = new Set();
    this.kv = new Map();
    this.cancelRequested = r.cancelRequested;
    this.cancelSeen = false;
    this.startPending = true;
    this.replayed = claimed.history.length;
    this.deadlineHit = false;
    this.unwind = { kind: U.none, err: null, wakeAt: null, reason: '', events: [] };
    this.unwinding = new Promise((res) => { this.resolveUnwinding = res; });
    this.ckChain = Promise.resolve();
    this.ckSeq = 0;
    this.inflight = new Set();
    // stop: aborted when the lease is lost ('lease_lost') or the worker stops
    // hard ('shutdown'); cancel: aborted by a cancellation, or by stop.
    this.stop = new AbortController();
    this.cancel = new AbortController();
    this.stop.signal.addEventListener('abort', () => this.cancel.abort(this.stop.signal.reason), { once: true });
    // The running step attempts' hooks, called when the run is cancelled
    // (cancelHooks; stopping cancels too) or stopped (stopHooks, of detached steps).
    this.cancelHooks = new Set();
    this.stopHooks = new Set();
    this.cancel.signal.addEventListener('abort', () => { for (const h of [...this.cancelHooks]) h(); }, { once: true });
    this.stop.signal.addEventListener('abort', () => { for (const h of [...this.stopHooks]) h(); }, { once: true });
    if (this.cancelRequested) this.cancel.abort(new CancelledError());
    /** The step attempt under way, for lease heartbeats. */
    this.currentStep = null;
  }

  now() { return new Date(); }

  // ---- signals from the worker ----

  /** The run's cancellation became known. */
  requestCancel() {
    if (this.cancelRequested) return;
    this.cancelRequested = true;
    if (!this.cancel.signal.aborted) this.cancel.abort(new CancelledError());
  }

  /** Stops the run: 'lease_lost' writes nothing more, 'shutdown' hands it back. */
  abort(why) {
    if (!this.stop.signal.aborted) this.stop.abort(why);
  }

  ctxKind() {
    return this.stop.signal.reason === 'lease_lost' ? U.abandon : U.handBack;
  }

  // ---- positions, unwinding ----

  next(kind, name) {
    const pos = this.nextPos++;
    const rec = this.history.get(pos);
    if (rec && (rec.kind !== kind || rec.name !== name)) {
      this.block(new NonDeterminismError(pos, describe(rec.kind, rec.name), describe(kind, name)));
    }
    return { pos, rec };
  }

  block(err) {
    this.requestUnwind(U.blocked, err, null, '');
    throw UNWIND;
  }

  requestUnwind(kind, err, wakeAt, reason, events) {
    const u = this.unwind;
    if (u.kind === U.none) {
      // first reason wins
    } else if (kind === U.abandon && u.kind !== U.abandon) {
      // a lost lease overrides everything
    } else if (kind === U.fail && (u.kind === U.suspend || u.kind === U.handBack)) {
      // what is queued is saved with the run's failure instead
    } else if (kind === U.suspend && u.kind === U.suspend) {
      if (wakeAt && (!u.wakeAt || wakeAt < u.wakeAt)) { u.wakeAt = wakeAt; u.reason = reason; }
      if (events) u.events.push(...events);
      return;
    } else {
      return;
    }
    const first = u.kind === U.none;
    this.unwind = { kind, err, wakeAt, reason, events: kind === U.suspend ? [...(events ?? [])] : [] };
    if (first) this.resolveUnwinding();
  }

  get unwound() { return this.unwind.kind !== U.none; }

  checkUnwind() {
    if (this.stop.signal.aborted) this.requestUnwind(this.ctxKind(), null, null, '');
    if (this.unwound) throw UNWIND;
  }

  interrupted(detached) {
    const d = this.run.deadline;
    if (d && this.now() >= d) {
      this.deadlineHit = true;
      return new DeadlineExceededError();
    }
    if (detached) return null;
    if (this.cancelRequested) {
      this.cancelSeen = true;
      return new CancelledError();
    }
    return null;
  }

  // ---- the queue of the next checkpoint ----

  pushOp(op) {
    const ops = this.pending.ops;
    const i = ops.findIndex((o) => o.position === op.position);
    if (i >= 0) ops[i] = op; else ops.push(op);
  }

  record(op, kv) {
    this.pushOp(op);
    if (kv) this.pending.kv.push(kv);
  }

  recordWait(pos, kind, name, done, result, err) {
    const at = this.now();
    const op = { position: pos, kind, name, done, result, attempts: 1, startedAt: at, finishedAt: done ? at : undefined };
    if (err) op.error = errorInfo(err);
    this.record(op);
    return op;
  }

  recordInternal(pos, kind, name, resultBytes) {
    const at = this.now();
    this.record({ position: pos, kind, name, done: true, result: resultBytes, attempts: 1, startedAt: at, finishedAt: at });
  }

  take() {
    const q = this.pending;
    this.pending = emptyQueue();
    return q;
  }

  onlyDerivable(pendingTimers) {
    const q = this.pending;
    if (q.atts.length || q.kv.length || q.noEvents.length || q.children.length || q.approvals.length ||
      q.expire.length || q.stream.length) return false;
    return q.ops.every((op) => (op.kind === 'timer' && (op.done || pendingTimers)) ||
      (op.kind === 'event' && op.done && !op.error));
  }

  takeEvent(name) {
    for (const e of this.inbox) {
      const k = String(e.seq);
      if (e.name === name && !this.consumed.has(k)) {
        this.consumed.add(k);
        this.pending.consume.push(e.seq);
        return e;
      }
    }
    return null;
  }

  // ---- checkpoints ----

  /** Checkpoints what is queued with the run still running (before every side effect). */
  async flush() {
    if (this.onlyDerivable(false)) return;
    await this.checkpoint({ status: 'running' }, false);
  }

  async flushBeforeSleep() {
    if (this.onlyDerivable(true)) return;
    try {
      await this.checkpoint({ status: 'running' }, false);
    } catch (err) {
      this.requestUnwind(flushFailure(err), err, null, '');
      throw UNWIND;
    }
  }

  addStarted(q, status) {
    if (!this.startPending || (status === 'pending' && q.ops.length === 0)) return;
    this.startPending = false;
    const ev = this.replayed === 0
      ? lifecycle('run.started', { attempt: this.run.attempt, workflow: this.run.workflow })
      : lifecycle('run.resumed', { attempt: this.run.attempt, replayed: this.replayed });
    q.stream.unshift(ev);
  }

  /** Saves the queued writes with the state p; serialised, numbered by seq. */
  checkpoint(p, force) {
    const run = async () => {
      const q = this.take();
      if (!force && queueEmpty(q)) return {};
      this.ckSeq++;
      this.addStarted(q, p.status);
      const item = {
        lease: this.lease,
        seq: BigInt(this.ckSeq),
        status: p.status,
        ops: q.ops.map(opPB),
        attempts: q.atts.map(attemptPB),
        kv: q.kv,
        consume: q.consume,
        noEvents: q.noEvents,
        children: q.children,
        approvals: q.approvals,
        expireApprovals: [...q.expire, ...(p.expire ?? [])],
        stream: [...q.stream, ...(p.stream ?? [])],
        output: p.output,
        error: p.error,
        waitReason: p.waitReason ?? '',
        wakeAt: ts(p.wakeAt),
        waitEvents: p.waitEvents ?? [],
        retry: p.retry,
      };
      let res;
      try {
        res = await this.host.checkpoint(item);
      } catch (err) {
        // Fenced: another worker has the run. Its steps in flight are
        // aborted and none starts, as when a heartbeat reports it lost.
        if (reasonOf(err) === 'LEASE_LOST' || err?.reason === 'LEASE_LOST') this.abort('lease_lost');
        throw err;
      }
      if (res.cancelRequested) this.requestCancel();
      return res;
    };
    const p2 = this.ckChain.then(run, run);
    this.ckChain = p2.catch(() => {});
    return p2;
  }

  // ---- execution ----

  /** Executes the run; resolves with the status it saved ('' when none). */
  async execute() {
    if (this.run.deadline && this.now() >= this.run.deadline) {
      this.deadlineHit = true;
      return this.finish(undefined, new DeadlineExceededError());
    }
    const ctx = new WorkflowContext(this, false);
    let input;
    try {
      input = decode(this.run.input);
    } catch (err) {
      return this.finish(undefined, new TrellisError(`decoding input: ${err.message}`, { type: 'invalid_input' }));
    }
    const wf = Promise.resolve().then(() => this.def.fn(ctx, input));
    const outcome = await Promise.race([
      wf.then((v) => ({ returned: true, v }), (e) => ({ returned: true, e })),
      this.unwinding.then(() => ({ returned: false })),
    ]);
    await this.settleInflight();
    if (this.unwind.kind === U.fail) return this.finish(undefined, this.unwind.err);
    if (!outcome.returned || outcome.e === UNWIND || (this.unwound && outcome.e instanceof RunUnwound)) return this.saveUnwind();
    if (outcome.e !== undefined) return this.finish(undefined, outcome.e);
    let out;
    try {
      out = encode(outcome.v);
    } catch (err) {
      return this.finish(undefined, new TrellisError(`encoding output: ${err.message}`));
    }
    return this.finish(out, undefined);
  }

  async settleInflight() {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }

  async saveUnwind() {
    const u = this.unwind;
    const p = { stream: [] };
    switch (u.kind) {
      case U.blocked: {
        const info = errorInfo(u.err);
        info.type = 'non_determinism';
        p.status = 'blocked';
        p.error = info;
        p.stream.push(lifecycle('run.blocked', { error: errorJSON(info) }));
        this.host.log?.('error', `run ${this.run.id} blocked: ${u.err.message}`);
        break;
      }
      case U.suspend: {
        let wakeAt = u.wakeAt;
        const d = this.run.deadline;
        if (d && (!wakeAt || d < wakeAt)) wakeAt = d;
        const events = [...new Set(u.events)].sort();
        p.status = 'waiting';
        p.wakeAt = wakeAt;
        p.waitReason = u.reason;
        p.waitEvents = events;
        const data = { reason: u.reason };
        if (wakeAt) data.wake_at = wakeAt.toISOString();
        if (events.length) data.events = events;
        p.stream.push(lifecycle('run.waiting', data));
        break;
      }
      case U.handBack:
        p.status = 'pending';
        break;
      default:
        this.host.log?.('warn', `abandoning run ${this.run.id}: ${u.err?.message ?? this.stop.signal.reason ?? 'lease lost'}`);
        return '';
    }
    this.ending = true; // the lease ends with this checkpoint: heartbeats leave it out
    try {
      await this.checkpoint(p, true);
      return p.status;
    } catch (err) {
      if (reasonOf(err) === 'CONFLICT' || err?.reason === 'CONFLICT') return (await this.handBack()) ? 'pending' : '';
      this.host.log?.('warn', `saving run ${this.run.id} (${p.status}): ${err.message}`);
      return '';
    }
  }

  async handBack() {
    try {
      await this.checkpoint({ status: 'pending' }, true);
      return true;
    } catch (err) {
      this.host.log?.('warn', `handing back run ${this.run.id}: ${err.message}`);
      return false;
    }
  }

  async finish(out, err) {
    const p = { status: 'succeeded', output: out, stream: [] };
    if (this.deadlineHit) {
      p.status = 'failed'; p.output = undefined; p.error = errorInfo(new DeadlineExceededError());
    } else if (err !== undefined && (this.cancelSeen || err instanceof CancelledError)) {
      p.status = 'cancelled'; p.output = undefined; p.error = errorInfo(err); p.error.type = 'cancelled';
    } else if (err !== undefined) {
      p.status = 'failed'; p.output = undefined; p.error = errorInfo(err);
    } else if (out.length > this.payload.limit) {
      p.status = 'failed'; p.output = undefined;
      p.error = { message: `payload too large: output is ${out.length} bytes (${this.payload.of}limit ${this.payload.limit})`, type: 'payload_too_large', nonRetryable: true };
    }
    p.expire = [...this.openApprovals].sort();
    this.ending = true;
    if (p.status === 'succeeded') {
      p.stream.push({ name: 'run.succeeded', data: encodeRaw(`{"result":${text(p.output)}}`) });
    } else {
      p.stream.push(lifecycle(p.status === 'cancelled' ? 'run.cancelled' : 'run.failed', { error: errorJSON(p.error) }));
    }
    if (p.status === 'failed') p.retry = workflowRetryPB(this.def.opts?.retry);
    try {
      const res = await this.checkpoint(p, true);
      // the store made the failure a workflow retry: the run waits for its next attempt
      if (res?.retryAt) return 'waiting';
      return p.status;
    } catch (e) {
      if (reasonOf(e) === 'CONFLICT' || e?.reason === 'CONFLICT') { await this.handBack(); return ''; }
      this.host.log?.('warn', `saving the outcome of run ${this.run.id} (${p.status}): ${e.message}`);
      return '';
    }
  }

  // ---- ops ----

  /**
   * An engine op's value: on replay parse(recorded JSON), otherwise gen()'s JSON,
   * recorded. A recorded value parse refuses blocks the run (non_determinism), as
   * the Go engine does: the workflow never sees it.
   */
  internal(kind, gen, parse) {
    this.checkUnwind();
    const { pos, rec } = this.next(kind, '');
    if (rec) {
      let v;
      try {
        v = parse(text(rec.result));
      } catch {
        this.block(new NonDeterminismError(pos, `undecodable ${kind}`, kind));
      }
      return v;
    }
    const raw = gen();
    this.recordInternal(pos, kind, '', encodeRaw(raw));
    return parse(raw);
  }

  now_() {
    return this.internal('now', () => JSON.stringify(this.now().toISOString()), (raw) => {
      const d = recordedTime(JSON.parse(raw));
      if (!d) throw new TypeError('not a time');
      return d;
    });
  }

  uuid() {
    return this.internal('uuid', () => JSON.stringify(crypto.randomUUID()), (raw) => {
      const v = JSON.parse(raw);
      if (typeof v !== 'string') throw new TypeError('not a string');
      return v;
    });
  }

  random() {
    const n = this.internal('random', () => crypto.getRandomValues(new BigUint64Array(1))[0].toString(), (raw) => {
      // a JSON unsigned 64-bit integer, as Go decodes one into a uint64
      const t = raw.trim();
      if (!/^(0|[1-9][0-9]*)$/.test(t)) throw new TypeError('not an unsigned integer');
      const v = BigInt(t);
      if (v >= 2n ** 64n) throw new RangeError('out of range');
      return v;
    });
    return Number(n >> 11n) / 2 ** 53;
  }

  patched(id) {
    this.checkUnwind();
    const pos = this.nextPos;
    const rec = this.history.get(pos);
    if (rec && rec.kind === 'patch' && rec.name === id) { this.nextPos++; return true; }
    if (rec || pos <= this.lastPos) return false;
    this.nextPos++;
    this.recordInternal(pos, 'patch', id, encodeRaw('true'));
    return true;
  }

  set(key, value) {
    this.checkUnwind();
    checkName('key', key);
    let b = encode(value);
    if (b.length > this.payload.limit) {
      throw new TrellisError(`set ${JSON.stringify(key)}: payload too large: ${b.length} bytes (${this.payload.of}limit ${this.payload.limit})`, { type: 'payload_too_large', nonRetryable: true });
    }
    const { pos, rec } = this.next('set', key);
    if (rec) {
      b = rec.result;
    } else {
      const at = this.now();
      this.record({ position: pos, kind: 'set', name: key, done: true, result: b, attempts: 1, startedAt: at, finishedAt: at },
        { key, value: b, delete: false });
    }
    this.kv.set(key, b);
  }

  delete(key) {
    this.checkUnwind();
    checkName('key', key);
    const { pos, rec } = this.next('delete', key);
    if (!rec) {
      const at = this.now();
      this.record({ position: pos, kind: 'delete', name: key, done: true, attempts: 1, startedAt: at, finishedAt: at },
        { key, delete: true });
    }
    this.kv.delete(key);
  }

  get(key) {
    const b = this.kv.get(key);
    return b === undefined ? undefined : decode(b);
  }

  emit(name, data) {
    this.checkUnwind();
    if (typeof name !== 'string' || name.length === 0 || textEnc.encode(name).length > 200) {
      throw new TypeError(`emit: an event name is 1 to 200 bytes, got ${JSON.stringify(name)}`);
    }
    if (name.startsWith('run.') || name.startsWith('step.')) {
      throw new TypeError(`emit: event names starting with "run." or "step." are reserved, got ${JSON.stringify(name)}`);
    }
    const b = encode(data);
    if (b.length > this.payload.limit) {
      throw new TrellisError(`emit ${JSON.stringify(name)}: payload too large: ${b.length} bytes (${this.payload.of}limit ${this.payload.limit})`, { type: 'payload_too_large', nonRetryable: true });
    }
    const { pos, rec } = this.next('emit', name);
    if (rec) return;
    const at = this.now();
    this.pushOp({ position: pos, kind: 'emit', name, done: true, attempts: 1, startedAt: at, finishedAt: at });
    this.pending.stream.push({ name, data: b });
  }

  // ---- steps ----

  /** Runs fn as a step: recorded outcome on replay, else its attempts. Returns the op, done. */
  async step(name, fn, opts, detached) {
    this.checkUnwind();
    const { pos, rec } = this.next('step', name);
    if (rec && rec.done) {
      if (opts?.atMostOnce && opts.onUnknown === 'failRun' && isOutcomeUnknown(rec)) {
        this.requestUnwind(U.fail, new TrellisError(rec.error.message, { type: 'step_outcome_unknown', nonRetryable: true }), null, '');
        throw UNWIND;
      }
      return rec;
    }
    const call = new StepCall(this, name, pos, rec, fn, opts ?? {}, detached);
    const p = call.execute();
    this.inflight.add(p);
    try {
      return await p;
    } finally {
      this.inflight.delete(p);
    }
  }

  // ---- waits ----

  async awaitAny(ws, detached) {
    for (let i = 0; i < ws.length; i++) if (ws[i].settled()) return i;
    for (;;) {
      const err = this.interrupted(detached);
      if (err) throw err;
      for (let i = 0; i < ws.length; i++) if (await ws[i].try()) return i;
      let wakeAt = null;
      const events = [];
      const reasons = [];
      for (const w of ws) {
        const n = w.needs();
        if (n.wakeAt && (!wakeAt || n.wakeAt < wakeAt)) wakeAt = n.wakeAt;
        events.push(...n.events);
        if (n.reason) reasons.push(n.reason);
      }
      const reason = reasons.length === 1 ? reasons[0] : `first of ${JSON.stringify(reasons)}`;
      if (!(await this.waitInPlace(wakeAt, events))) {
        this.requestUnwind(U.suspend, null, wakeAt, reason, events);
        throw UNWIND;
      }
    }
  }

  async waitInPlace(wakeAt, events) {
    if (!wakeAt || events.length > 0) return false;
    if (wakeAt - this.now() > this.host.maxInlineBackoffMs) return false;
    await this.flushBeforeSleep();
    await sleepFor(wakeAt - this.now(), [this.cancel.signal, this.stop.signal]);
    this.checkUnwind();
    return true;
  }

  newTimer(ms) {
    this.checkUnwind();
    if (typeof ms !== 'number' || !(ms >= 0)) throw new TypeError(`sleep: a duration in milliseconds >= 0, got ${ms}`);
    const { pos, rec } = this.next('timer', '');
    const t = new TimerWait(this, pos);
    if (rec) {
      let at = null;
      try { at = recordedTime(decode(rec.result)); } catch { /* unreadable */ }
      if (!at) this.block(new NonDeterminismError(pos, 'timer without a due time', 'timer'));
      t.at = at;
      t.done = rec.done;
      return t;
    }
    t.at = new Date(this.now().getTime() + ms);
    this.recordWait(pos, 'timer', '', false, encode(t.at.toISOString()));
    return t;
  }

  newEvent(name, timeoutMs) {
    this.checkUnwind();
    checkName('event name', name);
    const { pos, rec } = this.next('event', name);
    const w = new EventWait(this, pos, name);
    if (rec && rec.done) {
      w.op = rec;
    } else if (rec) {
      let st;
      try { st = decode(rec.result) ?? {}; } catch { st = null; }
      // an object whose deadline, when there is one, is a time (Go's eventState)
      const deadline = st && typeof st === 'object' && !Array.isArray(st) && st.deadline != null ? recordedTime(st.deadline) : undefined;
      if (!st || typeof st !== 'object' || Array.isArray(st) || deadline === null) {
        this.block(new NonDeterminismError(pos, `${describe(rec.kind, rec.name)} with unreadable state`, describe('event', name)));
      }
      w.deadline = deadline ?? null;
    } else {
      const st = {};
      if (timeoutMs > 0) {
        w.deadline = new Date(this.now().getTime() + timeoutMs);
        st.deadline = w.deadline.toISOString();
      }
      this.recordWait(pos, 'event', name, false, encode(st));
    }
    return w;
  }

  newApproval(name, spec) {
    this.checkUnwind();
    checkName('approval name', name);
    const { pos, rec } = this.next('approval', name);
    const w = new ApprovalWait(this, pos, name);
    const id = `${this.run.id}.approval.${pos}`;
    if (rec) {
      let st;
      try { st = decode(rec.result); } catch { st = null; }
      w.id = st?.id || id;
      w.expiresAt = st?.expires_at ? new Date(st.expires_at) : null;
      if (rec.done) w.op = rec; else this.openApprovals.add(w.id);
      return w;
    }
    w.id = id;
    const req = { id, position: BigInt(pos), name, approvers: spec.approvers ?? [], subject: spec.subject ?? '' };
    if (spec.details !== undefined) req.details = encode(spec.details);
    const st = { id };
    if (spec.timeout > 0) {
      w.expiresAt = new Date(this.now().getTime() + spec.timeout);
      req.expiresAt = ts(w.expiresAt);
      st.expires_at = w.expiresAt.toISOString();
    }
    this.pending.approvals.push(req);
    this.openApprovals.add(id);
    this.recordWait(pos, 'approval', name, false, encode(st));
    return w;
  }

  childParams(workflow, runId, input, o) {
    return {
      id: runId, workflowId: o.id || runId, workflow, queue: o.queue || this.run.queue,
      priority: BigInt(o.priority ?? 0), version: BigInt(o.version ?? 0), input, traceParent: '',
    };
  }

  startChild(workflow, input, o, detached) {
    this.checkUnwind();
    checkName('child workflow', workflow);
    const { pos, rec } = this.next('child', workflow);
    const w = new ChildWait(this, pos, `${this.run.id}.${pos}`, !!o.detached);
    if (rec) {
      if (rec.done && !o.detached) w.op = rec;
      return w;
    }
    const err = this.interrupted(detached);
    if (err) { w.err = err; return w; }
    let b;
    try { b = encode(input); } catch (e) { w.err = new TrellisError(`encoding input of child ${workflow}: ${e.message}`); return w; }
    this.pending.children.push({ position: BigInt(pos), maxConcurrency: 0n, failFast: false, detached: !!o.detached,
      runs: [this.childParams(workflow, w.runId, b, o)] });
    this.recordWait(pos, 'child', workflow, !!o.detached, encode({ run_id: w.runId }));
    return w;
  }

  async map(workflow, items, o, detached) {
    this.checkUnwind();
    checkName('map workflow', workflow);
    if (!Array.isArray(items)) throw new TypeError(`map: items must be an array, got ${typeof items}`);
    const { pos, rec } = this.next('child', workflow);
    const m = new MapWait(this, pos, workflow, !!o.collectErrors);
    if (!rec) {
      const err = this.interrupted(detached);
      if (err) throw err;
      const runs = items.map((item, i) => this.childParams(workflow, `${this.run.id}.${pos}.${i}`, encode(item), { queue: o.queue, priority: o.priority, version: o.version }));
      if (items.length > 0) {
        this.pending.children.push({ position: BigInt(pos), maxConcurrency: BigInt(o.concurrency ?? 0), failFast: !o.collectErrors, detached: false, runs });
      }
      m.state = { items: items.length };
      this.recordWait(pos, 'child', workflow, items.length === 0, encode(m.state));
      m.done = items.length === 0;
    } else {
      try { m.state = decode(rec.result); } catch { m.state = null; }
      if (!m.state) this.block(new NonDeterminismError(pos, `${describe(rec.kind, rec.name)} with unreadable state`, `map of ${workflow}`));
      m.done = rec.done;
      if (m.state.items !== items.length) {
        this.block(new NonDeterminismError(pos, `map of ${m.state.items} items`, `map of ${items.length} items`));
      }
    }
    await this.awaitAny([m], detached);
    const st = m.state;
    if (!o.collectErrors && st.failed?.length > 0) {
      throw new MapError(workflow, st.failed.map((f) => ({ index: f.index, runId: f.run_id, status: f.status, message: f.message, type: f.type ?? '' })));
    }
    if (items.length === 0) return [];
    let results = st.results;
    if (!results || results.length !== items.length) {
      const runs = await this.children(pos);
      results = runs.map((r) => ({ status: r.status, output: r.output ? Buffer.from(r.output).toString('base64') : undefined, error: r.error }));
    }
    return results.map((r, i) => {
      if (r.status === 'succeeded') return r.output === undefined ? undefined : JSON.parse(Buffer.from(r.output, 'base64').toString('utf8'));
      return new ChildError(`${this.run.id}.${pos}.${i}`, r.status, r.error?.message ?? '', r.error?.type);
    });
  }

  async children(pos) {
    try {
      return await this.host.listChildren(this.run.namespace, this.run.id, pos);
    } catch (err) {
      this.requestUnwind(U.abandon, new Error(`reading child runs: ${err.message}`), null, '');
      throw UNWIND;
    }
  }

  async select(ws, detached) {
    this.checkUnwind();
    const { pos, rec } = this.next('select', '');
    if (rec && rec.done) {
      let i;
      try { i = decode(rec.result); } catch { i = -1; }
      if (!Number.isInteger(i) || i < 0 || i >= ws.length) {
        this.block(new NonDeterminismError(pos, `select of case ${lossyText(rec.result)}`, `select of ${ws.length} cases`));
      }
      return i;
    }
    const i = await this.awaitAny(ws, detached);
    this.recordWait(pos, 'select', '', true, encode(i));
    return i;
  }
}

/** A recorded RFC 3339 time (as Go writes one, to the nanosecond) as a Date; null when v is none. */
function recordedTime(v) {
  if (typeof v !== 'string' || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(v)) return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** Recorded bytes as text for a message, whatever they hold. */
function lossyText(b) {
  return b ? new TextDecoder().decode(b) : '';
}

// leaseCheck is null while the run's lease is known to last (the worker's
// leaseHeld: a clock read), else a promise that unwinds the run (abandoned)
// when the server says the lease may be another worker's (one ExtendLeases).
function leaseCheck(rs) {
  const held = rs.host.leaseHeld ? rs.host.leaseHeld(rs) : true;
  if (held === true) return null;
  return Promise.resolve(held).then((ok) => {
    if (!ok) { rs.requestUnwind(U.abandon, null, null, ''); throw UNWIND; }
  });
}

function flushFailure(err) {
  return reasonOf(err) === 'CONFLICT' || err?.reason === 'CONFLICT' ? U.handBack : U.abandon;
}

function checkName(what, name) {
  if (typeof name !== 'string' || name.length === 0) {
    throw new TypeError(`${what} must be a non-empty string, got ${JSON.stringify(name)}`);
  }
}

function opPB(op) {
  return {
    position: BigInt(op.position), kind: op.kind, name: op.name ?? '', done: !!op.done, result: op.result,
    error: op.error, attempts: BigInt(op.attempts ?? 1), startedAt: ts(op.startedAt), finishedAt: ts(op.finishedAt),
    attemptStartedAt: ts(op.attemptStartedAt),
  };
}

function attemptPB(a) {
  return { position: BigInt(a.position), attempt: BigInt(a.attempt), error: a.error, startedAt: ts(a.startedAt), finishedAt: ts(a.finishedAt), outcome: a.outcome ?? '' };
}

/** One step's attempts (internal/engine/step.go stepCall). */
class StepCall {
  constructor(rs, name, pos, rec, fn, opts, detached) {
    this.rs = rs;
    this.name = name;
    this.pos = pos;
    this.fn = fn;
    this.detached = detached;
    this.opts = opts;
    this.policy = retryPolicy(opts, rs.queueRetry);
    this.timeout = opts.timeout ?? 0;
    this.attempt = rec ? rec.attempts : 0;
    // attempts made in earlier attempts of the run (workflow retries) do not count
    this.prior = rec && !rec.done ? Math.min(priorAttempts(rs.workflowAttempts, pos), rec.attempts) : 0;
    this.started = rec ? rec.startedAt : rs.now();
    this.ended = rec?.ended;
    this.attemptStart = null;
    this.attemptT0 = 0;
    this.failReported = false;
    this.atMostOnce = opts.atMostOnce === true;
    this.unknown = rec ? unknownAttempt(rec, this.atMostOnce) : null;
  }

  op() {
    return { position: this.pos, kind: 'step', name: this.name, attempts: this.attempt, startedAt: this.started, done: false };
  }

  duration() {
    if (!this.attemptStart) return 0;
    return Math.round((performance.now() - this.attemptT0) * 1000) / 1000;
  }

  stepEvent(name, info, final) {
    const d = { name: this.name, attempt: this.attempt, duration_ms: this.duration() };
    if (info) d.error = errorJSON(info);
    if (final) d.final = true;
    return lifecycle(name, d);
  }

  async execute() {
    const rs = this.rs;
    if (this.unknown) return this.outcomeUnknown();
    // The last attempt was lost or timed out and may not be retried: the step
    // fails with its error (internal/engine/step.go endedFinal).
    if (this.ended && (this.attempt >= this.policy.maxAttempts || this.policy.nonRetryableTypes.includes(this.ended.type))) {
      return this.finish(undefined, new TrellisError(this.ended.message, { type: this.ended.type }));
    }
    for (;;) {
      // may the next attempt start?
      if (rs.stop.signal.aborted) { rs.requestUnwind(rs.ctxKind(), null, null, ''); throw UNWIND; }
      let err = rs.interrupted(this.detached);
      if (err) return this.finish(undefined, err);
      // A lease that expired while the worker could not heartbeat may be
      // another worker's by now: no attempt starts on it. Checked last,
      // after the flush (a process frozen while its checkpoint was answered
      // wakes with the lease expired); an at-most-once attempt's start is
      // itself a checkpoint the server fences.
      if (this.atMostOnce) {
        const check = leaseCheck(rs);
        if (check) await check;
        const done = await this.begin();
        if (done) return done;
      } else {
        try {
          if (!rs.onlyDerivable(false)) await rs.flush();
        } catch (e) {
          rs.requestUnwind(flushFailure(e), e, null, '');
          throw UNWIND;
        }
        err = rs.interrupted(this.detached);
        if (err) return this.finish(undefined, err);
        const check = leaseCheck(rs);
        if (check) await check;
        this.attempt++;
        this.attemptStart = rs.now();
      }
      const t0 = this.attemptStart;
      this.attemptT0 = performance.now();
      rs.currentStep = { name: this.name, attempt: this.attempt, since: t0, position: this.pos, timeout: this.timeout };
      const { ok, value, error } = await this.runAttempt();
      rs.currentStep = null;
      if (rs.stop.signal.aborted) { rs.requestUnwind(rs.ctxKind(), null, null, ''); throw UNWIND; }
      let res;
      let failure = error;
      if (ok) {
        try {
          res = encode(value);
          if (res.length > rs.payload.limit) {
            failure = new TrellisError(`payload too large: ${res.length} bytes (${rs.payload.of}limit ${rs.payload.limit})`, { type: 'payload_too_large', nonRetryable: true });
          }
        } catch (e) {
          failure = new TrellisError(`encoding value: ${e.message}`);
        }
        if (!failure) return this.finish(res, undefined);
      }
      // a failed attempt
      const info = errorInfo(failure);
      const att = { position: this.pos, attempt: this.attempt, error: info, startedAt: t0, finishedAt: rs.now() };
      const retry = this.retryable(failure, info);
      rs.pushOp(this.op());
      rs.pending.atts.push(att);
      rs.pending.stream.push(this.stepEvent('step.failed', info, !retry));
      if (!retry) {
        this.failReported = true;
        return this.finish(undefined, failure);
      }
      const delay = this.policy.delay(this.attempt);
      if (delay > rs.host.maxInlineBackoffMs) {
        const wake = new Date(rs.now().getTime() + delay);
        rs.requestUnwind(U.suspend, null, wake, `retry backoff: step ${JSON.stringify(this.name)} attempt ${this.attempt + 1} at ${wake.toISOString()}`, []);
        throw UNWIND;
      }
      await sleepFor(delay, [this.detached ? null : rs.cancel.signal, rs.stop.signal]);
    }
  }

  /**
   * Starts the next attempt of an at-most-once step: a checkpoint (with what
   * the run queued) of the op in progress at the new attempt and its attempt
   * row of outcome "started", before the function runs. The attempt's end
   * replaces the row. Returns the op, done, when the step ends without the
   * attempt (a cancellation learnt from the checkpoint), else null.
   */
  async begin() {
    const rs = this.rs;
    this.attempt++;
    const t0 = rs.now();
    this.attemptStart = t0;
    const att = { position: this.pos, attempt: this.attempt, outcome: 'started',
      error: { message: 'the attempt started; its outcome was not recorded' }, startedAt: t0, finishedAt: t0 };
    rs.pushOp(this.op());
    rs.pending.atts.push(att);
    try {
      await rs.checkpoint({ status: 'running' }, false);
    } catch (e) {
      rs.requestUnwind(flushFailure(e), e, null, '');
      throw UNWIND;
    }
    const err = rs.interrupted(this.detached);
    if (!err) return null;
    const info = errorInfo(err);
    rs.pushOp(this.op());
    rs.pending.atts.push({ ...att, outcome: 'failed', error: info, finishedAt: rs.now() });
    rs.pending.stream.push(this.stepEvent('step.failed', info, true));
    this.failReported = true;
    return this.finish(undefined, err);
  }

  /**
   * Ends a step whose last attempt's outcome is unknown without running it
   * again: done with an error of type step_outcome_unknown (made of what
   * history holds, so a replay that redoes it records the same), and, with
   * onUnknown 'failRun', the run failed with it.
   */
  outcomeUnknown() {
    const a = this.unknown;
    let why = 'its worker stopped before recording how it ended';
    if (a.outcome === 'lost') why = 'its lease expired while it ran';
    if (a.outcome === 'timed_out') why = 'it was ended after its timeout';
    const err = new TrellisError(`step outcome unknown: attempt ${a.attempt} of at-most-once step ${JSON.stringify(this.name)} started at ${a.startedAt?.toISOString()} and ${why}; it is not run again`,
      { type: 'step_outcome_unknown', nonRetryable: true });
    const op = this.finish(undefined, err);
    if (this.atMostOnce && this.opts.onUnknown === 'failRun') {
      this.rs.requestUnwind(U.fail, err, null, '');
      throw UNWIND;
    }
    return op;
  }

  retryable(err, info) {
    if (this.attempt - this.prior >= this.policy.maxAttempts) return false;
    if (info.nonRetryable) return false;
    if (err instanceof CancelledError || err instanceof DeadlineExceededError) return false;
    return !this.policy.nonRetryableTypes.includes(info.type);
  }

  /**
   * One attempt on the step function, with its signal, timeout and the run's
   * deadline. Without a timeout or deadline the attempt's signal is the run's
   * own (no AbortController per attempt); a function that ignores its signal is
   * abandoned STEP_ABANDON_GRACE_MS after it is aborted.
   */
  runAttempt() {
    const rs = this.rs;
    const hooks = this.detached ? rs.stopHooks : rs.cancelHooks;
    const parent = this.detached ? rs.stop.signal : rs.cancel.signal;
    let ac = null;
    let signal = parent;
    if (this.timeout > 0 || rs.run.deadline) {
      ac = new AbortController();
      signal = ac.signal;
    }
    const info = {
      runId: rs.run.id, step: this.name, position: this.pos, attempt: this.attempt, signal,
      idempotencyKey: `${rs.run.id}/${this.pos}`,
    };
    return new Promise((resolve) => {
      let settled = false;
      let grace = null;
      let t1 = null;
      let t2 = null;
      const finish = (r) => {
        if (settled) return;
        settled = true;
        hooks.delete(onAbort);
        if (grace) clearTimeout(grace);
        clearLongTimeout(t1);
        clearLongTimeout(t2);
        if (!r.ok && signal.aborted) {
          const why = signal.reason;
          if (why instanceof CancelledError || why instanceof DeadlineExceededError || why instanceof StepTimeoutError) r.error = why;
        }
        resolve(r);
      };
      const onAbort = (why) => {
        if (ac && !ac.signal.aborted) ac.abort(why ?? (parent.reason instanceof Error ? parent.reason : new CancelledError()));
        if (!grace && !settled) grace = setTimeout(() => finish({ ok: false, error: signal.reason }), STEP_ABANDON_GRACE_MS);
      };
      hooks.add(onAbort);
      if (ac) {
        if (this.timeout > 0) t1 = longTimeout(() => onAbort(new StepTimeoutError(`step attempt timed out after ${fmtDuration(this.timeout)}`)), this.timeout);
        if (rs.run.deadline) t2 = longTimeout(() => onAbort(new DeadlineExceededError()), rs.run.deadline - rs.now());
      }
      if (parent.aborted) onAbort();
      let p;
      try {
        p = this.fn(info);
      } catch (e) {
        finish({ ok: false, error: e });
        return;
      }
      if (p && typeof p.then === 'function') p.then((value) => finish({ ok: true, value }), (error) => finish({ ok: false, error }));
      else finish({ ok: true, value: p });
    });
  }

  finish(result, err) {
    const rs = this.rs;
    const at = rs.now();
    const op = this.op();
    // a step ended before any attempt (cancelled, past the deadline) records 0
    // attempts, as its step.failed event says (and as the Go engine records)
    op.done = true;
    op.result = result;
    op.finishedAt = at;
    if (err !== undefined) op.error = errorInfo(err);
    // an at-most-once step's succeeded row replaces its started row from the first attempt on
    if (err === undefined && this.attempt >= (this.atMostOnce ? 1 : 2) && this.attemptStart) op.attemptStartedAt = this.attemptStart;
    let ev = null;
    if (err === undefined) ev = this.stepEvent('step.completed');
    else if (!this.failReported) ev = this.stepEvent('step.failed', op.error, true);
    rs.pushOp(op);
    if (ev) rs.pending.stream.push(ev);
    return op;
  }
}

class TimerWait {
  constructor(rs, pos) { this.rs = rs; this.pos = pos; this.at = null; this.done = false; }
  settled() { return this.done; }
  try() {
    if (this.rs.now() < this.at) return false;
    this.rs.recordWait(this.pos, 'timer', '', true, encode(this.at.toISOString()));
    this.done = true;
    return true;
  }
  needs() { return { wakeAt: this.at, events: [], reason: `sleeping until ${this.at.toISOString()}` }; }
  value() { return undefined; }
}

class EventWait {
  constructor(rs, pos, name) { this.rs = rs; this.pos = pos; this.name = name; this.deadline = null; this.op = null; }
  settled() { return this.op !== null; }
  try() {
    const rs = this.rs;
    const e = rs.takeEvent(this.name);
    if (e) {
      this.op = rs.recordWait(this.pos, 'event', this.name, true, e.payload);
      return true;
    }
    if (this.deadline && rs.now() >= this.deadline) {
      rs.pending.noEvents.push(this.name);
      this.op = rs.recordWait(this.pos, 'event', this.name, true, undefined, new EventTimeoutError(this.name));
      return true;
    }
    return false;
  }
  needs() {
    let reason = `waiting for event ${JSON.stringify(this.name)}`;
    if (this.deadline) reason += ` until ${this.deadline.toISOString()}`;
    return { wakeAt: this.deadline, events: [this.name], reason };
  }
  value() {
    if (this.op.error) {
      if (this.op.error.type === 'event_timeout') throw new EventTimeoutError(this.name);
      throw new TrellisError(this.op.error.message, { type: this.op.error.type });
    }
    return decode(this.op.result);
  }
}

class ApprovalWait {
  constructor(rs, pos, name) { this.rs = rs; this.pos = pos; this.name = name; this.id = ''; this.expiresAt = null; this.op = null; }
  settled() { return this.op !== null; }
  try() {
    const rs = this.rs;
    const event = `trellis.approval.${this.id}`;
    const e = rs.takeEvent(event);
    if (e) {
      let a = {};
      try { a = decode(e.payload) ?? {}; } catch { /* a decision without details */ }
      const d = { approved: a.status === 'approved', principal: a.principal ?? '' };
      if (a.comment) d.comment = a.comment;
      d.decided_at = a.decided_at ?? '0001-01-01T00:00:00Z';
      this.op = rs.recordWait(this.pos, 'approval', this.name, true, encode(d));
      rs.openApprovals.delete(this.id);
      return true;
    }
    if (this.expiresAt && rs.now() >= this.expiresAt) {
      rs.pending.noEvents.push(event);
      rs.pending.expire.push(this.id);
      this.op = rs.recordWait(this.pos, 'approval', this.name, true, undefined, new ApprovalTimeoutError(this.name));
      rs.openApprovals.delete(this.id);
      return true;
    }
    return false;
  }
  needs() {
    let reason = `waiting for approval ${JSON.stringify(this.name)} (${this.id})`;
    if (this.expiresAt) reason += ` until ${this.expiresAt.toISOString()}`;
    return { wakeAt: this.expiresAt, events: [`trellis.approval.${this.id}`], reason };
  }
  value() {
    if (this.op.error) throw new ApprovalTimeoutError(this.name);
    const d = decode(this.op.result);
    return { approved: d.approved, principal: d.principal, comment: d.comment ?? '', decidedAt: d.decided_at ? new Date(d.decided_at) : undefined };
  }
}

class ChildWait {
  constructor(rs, pos, runId, detached) { this.rs = rs; this.pos = pos; this.runId = runId; this.detached = detached; this.op = null; this.err = null; }
  settled() { return this.op !== null || this.err !== null || this.detached; }
  async try() {
    const rs = this.rs;
    if (!rs.takeEvent(`trellis.group.${this.pos}`)) return false;
    const runs = await rs.children(this.pos);
    if (runs.length !== 1) {
      rs.requestUnwind(U.abandon, new Error(`child run ${this.runId}: the store holds ${runs.length} children at position ${this.pos}`), null, '');
      throw UNWIND;
    }
    const c = runs[0];
    if (c.status === 'succeeded') {
      this.op = rs.recordWait(this.pos, 'child', c.workflow, true, c.output);
      return true;
    }
    const ce = { RunID: c.id, Status: c.status, Message: c.error?.message ?? '', Type: c.error?.type ?? '' };
    const err = new ChildError(c.id, c.status, ce.Message, ce.Type);
    this.op = rs.recordWait(this.pos, 'child', c.workflow, true, encode(ce), err);
    return true;
  }
  needs() { return { wakeAt: null, events: [`trellis.group.${this.pos}`], reason: `waiting for child run ${this.runId}` }; }
  value() {
    if (this.err) throw this.err;
    if (this.op.error) {
      let ce = {};
      try { ce = decode(this.op.result) ?? {}; } catch { /* keep the message */ }
      const status = ce.Status ?? this.op.error.type.replace(/^child_/, '');
      throw new ChildError(this.runId, status, ce.Message ?? this.op.error.message, ce.Type);
    }
    return decode(this.op.result);
  }
}

class MapWait {
  constructor(rs, pos, name, collect) { this.rs = rs; this.pos = pos; this.name = name; this.collect = collect; this.state = null; this.done = false; }
  settled() { return this.done; }
  async try() {
    const rs = this.rs;
    const e = rs.takeEvent(`trellis.group.${this.pos}`);
    if (!e) return false;
    let outcome = {};
    try { outcome = decode(e.payload) ?? {}; } catch { /* counts unknown */ }
    this.state.outcome = outcome;
    const runs = await rs.children(this.pos);
    if (outcome.succeeded < outcome.total) {
      this.state.failed = [];
      runs.forEach((r, i) => {
        if (['failed', 'cancelled'].includes(r.status)) {
          const f = { index: i, run_id: r.id, status: r.status, message: r.error?.message ?? '' };
          if (r.error?.type) f.type = r.error.type;
          this.state.failed.push(f);
        }
      });
      if (this.state.failed.length === 0) delete this.state.failed;
    }
    if (outcome.succeeded === outcome.total || this.collect) {
      this.state.results = runs.map((r) => {
        const o = { status: r.status };
        if (r.output && r.output.length) o.output = Buffer.from(r.output).toString('base64');
        if (r.error) o.error = errorJSON(r.error);
        return o;
      });
    }
    rs.recordWait(this.pos, 'child', this.name, true, encode(this.state));
    this.done = true;
    return true;
  }
  needs() { return { wakeAt: null, events: [`trellis.group.${this.pos}`], reason: `waiting for ${this.state.items} child runs of ${this.name}` }; }
}

// ---- the workflow's API ----

async function guard(p) {
  try {
    return await p;
  } catch (e) {
    if (e === UNWIND) return NEVER;
    throw e;
  }
}

/** What a synchronous op throws when the run unwinds (the executor ignores the workflow from then on). */
export class RunUnwound extends Error {
  constructor() { super('the run is stopping: this execution of the workflow ends here'); this.name = 'RunUnwound'; }
}

function guardSync(rs, f) {
  try {
    return f();
  } catch (e) {
    if (e === UNWIND) throw new RunUnwound();
    throw e;
  }
}

/** A waiter a workflow made for select: a timer or an event. */
class Case {
  constructor(rs, w) { this.w = w; }
}

function workflowName(w) {
  if (typeof w === 'string') return w;
  if (w && typeof w.name === 'string') return w.name;
  throw new TypeError(`a workflow (a definition or its name) is required, got ${typeof w}`);
}

/** What a workflow function gets: its ops. Names follow the Go SDK's. */
export class WorkflowContext {
  constructor(rs, detached) {
    this._rs = rs;
    this._detached = detached;
    const ctx = this;
    /** Steps: `ctx.step.run(name, fn, {retry, timeout})`. */
    this.step = {
      run(name, fn, opts) { return ctx._step(name, fn, opts); },
    };
  }

  /**
   * The run: id, workflowId, workflow, namespace, queue, attempt (its claim
   * count), workflowAttempt (its attempt of the workflow function: 1, then one
   * more after each failed attempt a workflow retry followed), parentId, version.
   */
  get run() {
    const r = this._rs.run;
    return { id: r.id, workflowId: r.workflowId, workflow: r.workflow, namespace: r.namespace, queue: r.queue, attempt: r.attempt,
      workflowAttempt: r.workflowAttempt, parentId: r.parentId, version: r.version };
  }

  /** Whether the run's cancellation is known. */
  get cancelled() { return this._rs.cancelRequested; }

  /** A view of this context whose ops the cancellation does not stop (cleanup). */
  detached() { return new WorkflowContext(this._rs, true); }

  _step(name, fn, opts) {
    checkName('step name', name);
    if (typeof fn !== 'function') throw new TypeError(`step ${JSON.stringify(name)}: fn must be a function, got ${typeof fn}`);
    if (opts?.timeout !== undefined && !(opts.timeout >= 0)) throw new TypeError(`step ${JSON.stringify(name)}: timeout must be milliseconds >= 0`);
    if (opts?.atMostOnce !== undefined && typeof opts.atMostOnce !== 'boolean') throw new TypeError(`step ${JSON.stringify(name)}: atMostOnce must be a boolean`);
    if (opts?.onUnknown !== undefined && opts.onUnknown !== 'error' && opts.onUnknown !== 'failRun') throw new TypeError(`step ${JSON.stringify(name)}: onUnknown must be 'error' or 'failRun'`);
    if (opts?.onUnknown !== undefined && !opts.atMostOnce) throw new TypeError(`step ${JSON.stringify(name)}: onUnknown applies to at-most-once steps only (set atMostOnce)`);
    const rs = this._rs;
    return guard((async () => {
      const op = await rs.step(name, fn, opts, this._detached);
      if (op.error) throw new StepError(name, op.error, op.attempts);
      return decode(op.result);
    })());
  }

  /** Durable sleep: the run is released for long sleeps. */
  sleep(ms) {
    const rs = this._rs;
    return guard((async () => {
      const t = rs.newTimer(ms);
      await rs.awaitAny([t], this._detached);
    })());
  }

  /** A durable timer, for select: due ms from now (as recorded). */
  timer(ms) { return guardSync(this._rs, () => new Case(this._rs, this._rs.newTimer(ms))); }

  /** An event wait, for select. */
  event(name, opts = {}) { return guardSync(this._rs, () => new Case(this._rs, this._rs.newEvent(name, opts.timeout ?? 0))); }

  /** Waits for the next event `name`; throws EventTimeoutError after opts.timeout ms. */
  waitForEvent(name, opts = {}) {
    const rs = this._rs;
    return guard((async () => {
      const w = rs.newEvent(name, opts.timeout ?? 0);
      await rs.awaitAny([w], this._detached);
      return w.value();
    })());
  }

  /** Requests an approval and waits for its decision: {approved, principal, comment, decidedAt}. */
  approval(name, opts = {}) {
    const rs = this._rs;
    return guard((async () => {
      const w = rs.newApproval(name, opts);
      await rs.awaitAny([w], this._detached);
      return w.value();
    })());
  }

  /** Starts a child run and waits for its output (ChildError when it did not succeed). */
  child(workflow, input, opts = {}) {
    const rs = this._rs;
    return guard((async () => {
      const w = rs.startChild(workflowName(workflow), input, opts, this._detached);
      if (w.err) throw w.err;
      if (w.detached) return { runId: w.runId };
      await rs.awaitAny([w], this._detached);
      return w.value();
    })());
  }

  /** One child run per item, at most opts.concurrency at once; their outputs in order. */
  map(workflow, items, opts = {}) {
    return guard(this._rs.map(workflowName(workflow), items, opts, this._detached));
  }

  /** Waits for the first of the cases (ctx.timer, ctx.event): {index, value}. */
  select(...cases) {
    if (cases.length === 1 && Array.isArray(cases[0])) cases = cases[0];
    for (const c of cases) if (!(c instanceof Case)) throw new TypeError('select: each case must be ctx.timer(ms) or ctx.event(name)');
    const rs = this._rs;
    return guard((async () => {
      const ws = cases.map((c) => c.w);
      const index = await rs.select(ws, this._detached);
      const w = ws[index];
      if (!w.settled()) await rs.awaitAny([w], this._detached);
      return { index, value: w.value() };
    })());
  }

  /** Publishes an event on the run's stream (once, with the next checkpoint). */
  emit(name, data) { return guardSync(this._rs, () => this._rs.emit(name, data)); }

  /** Run store: set a value (saved with the next checkpoint). */
  set(key, value) { return guardSync(this._rs, () => this._rs.set(key, value)); }

  /** Run store: the value under key (undefined when absent). */
  get(key) { return this._rs.get(key); }

  /** Run store: removes key. */
  delete(key) { return guardSync(this._rs, () => this._rs.delete(key)); }

  /** The current time, recorded (a replay returns the same). */
  now() { return guardSync(this._rs, () => this._rs.now_()); }

  /** A random UUID, recorded. */
  uuid() { return guardSync(this._rs, () => this._rs.uuid()); }

  /** A random number in [0, 1), recorded (from a recorded 64-bit integer). */
  random() { return guardSync(this._rs, () => this._rs.random()); }

  /** Whether the run takes the new branch of the change `id` (false for runs recorded before it). */
  patched(id) {
    checkName('patch id', id);
    return guardSync(this._rs, () => this._rs.patched(id));
  }
}
