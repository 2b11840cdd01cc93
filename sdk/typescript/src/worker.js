// The worker: claims runs of its workflows from a Trellis server over the worker
// protocol (docs/worker-protocol.md), executes them (run.js), and keeps their
// leases: heartbeats, ExtendLeases with lost / cancel handling, the cancel
// subscription, batched checkpoints with their seq numbers, and a graceful stop
// that hands back the runs it cannot finish.

import os from 'node:os';
import { ConnectError, Code } from '@connectrpc/connect';
import { workerClient, reasonOf, duration, date, ts } from './proto.js';
import { RunExec, endedAttempt, payloadLimit, priorAttempts } from './run.js';
import { servedVersions } from './workflow.js';
import { encode, decode } from './codec.js';
import { ApiError, CancelledError, DeadlineExceededError, StepTimeoutError, TrellisError, errorInfo } from './errors.js';
import { fmtDuration } from './run.js';
import { longTimeout, clearLongTimeout } from './timer.js';

/**
 * The step attempt a heartbeat reports for a run: its name, attempt, start,
 * position and declared timeout (docs/worker-protocol.md, "Leases"). The
 * server ends the lease of a step past its timeout plus its grace, and records
 * the attempt lost if the worker goes away while it runs.
 */
function stepPB(s) {
  const st = { name: s.name, attempt: BigInt(s.attempt), since: ts(s.since), position: BigInt(s.position ?? 0) };
  if (s.timeout > 0) st.timeout = duration(s.timeout);
  return st;
}

export const SDK_VERSION = 'trellis-ts/0.1.0';

/** Waits ms, or until signal aborts; leaves no listener on signal either way. */
export const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal?.aborted) { resolve(); return; }
  const done = () => {
    clearTimeout(t);
    signal?.removeEventListener('abort', done);
    resolve();
  };
  const t = setTimeout(done, ms);
  signal?.addEventListener('abort', done, { once: true });
});

/** How long a starting worker tries to reach a server that does not answer (firstHeartbeat). */
export const STARTUP_PATIENCE_MS = 30_000;

function jitter(ms) { return ms * (0.8 + Math.random() * 0.4); }

/** Errors of a call whose answer may have been lost: sent again. */
function retriable(err) {
  if (!(err instanceof ConnectError)) return true;
  const reason = reasonOf(err);
  if (reason === 'RATE_LIMITED' || reason === 'CLOSED' || reason === 'UNAVAILABLE') return true;
  if (reason) return false;
  return [Code.Unavailable, Code.Unknown, Code.DeadlineExceeded, Code.Internal, Code.Aborted, Code.Canceled].includes(err.code);
}

function apiErrorOf(err) {
  if (err instanceof ConnectError) {
    return new ApiError(err.rawMessage || err.message, { reason: reasonOf(err), code: Code[err.code] ?? '' });
  }
  return err;
}

/**
 * A worker of a Trellis server. Register workflows and jobs, then run() until
 * stop() or SIGTERM.
 */
export class Worker {
  /**
   * @param {object} o
   * @param {string} o.server the server's URL
   * @param {string} [o.token] a bearer token with role worker
   */
  constructor(o = {}) {
    if (!o.server || typeof o.server !== 'string') throw new TypeError('Worker: server (the server URL) is required');
    let url;
    try { url = new URL(o.server); } catch { throw new TypeError(`Worker: server ${JSON.stringify(o.server)} is not a URL`); }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`Worker: server ${JSON.stringify(o.server)}: want http:// or https://`);
    this.server = o.server.replace(/\/+$/, '');
    this.namespace = o.namespace ?? 'default';
    this.queues = o.queues ?? (o.queue ? [o.queue] : ['default']);
    this.name = o.name ?? `${os.hostname()}-${process.pid}-${crypto.randomUUID().slice(0, 8)}`;
    this.concurrency = o.concurrency ?? 100;
    if (!(this.concurrency >= 1 && this.concurrency <= 1000)) throw new TypeError('Worker: concurrency is 1 to 1000');
    this.leaseMs = o.leaseMs ?? 10_000;
    this.heartbeatMs = o.heartbeatMs ?? Math.floor(this.leaseMs / 3);
    this.shutdownGraceMs = o.shutdownGraceMs ?? 10_000;
    this.maxInlineBackoffMs = o.maxInlineBackoffMs ?? 2000;
    this.maxPayloadBytes = o.maxPayloadBytes ?? 2 << 20;
    this.claimWaitMs = o.claimWaitMs ?? 30_000;
    this.maxCheckpointCalls = o.maxCheckpointCalls ?? 2;
    this.handleSignals = o.handleSignals ?? true;
    this.logger = o.logger ?? ((level, msg) => { if (level !== 'debug') console.error(`trellis worker ${this.name}: ${level}: ${msg}`); });
    // every unary call is bounded (a half-open connection must not wedge the worker)
    this.callTimeoutMs = o.callTimeoutMs ?? this.leaseMs;
    this.client = workerClient(this.server, o.token, {
      httpVersion: o.httpVersion ?? '2', pingIntervalMs: o.pingIntervalMs ?? 10_000, pingTimeoutMs: o.pingTimeoutMs ?? 10_000,
    });
    this.defs = new Map();
    this.active = new Map();
    this.ckQueue = [];
    this.ckCalls = 0;
    this.stopping = false;
    this.stopped = null;
    this.slotWaiters = [];
    this.stats = process.env.TRELLIS_SDK_STATS ? { calls: 0, items: 0, ms: 0, claims: 0, msgs: 0, claimed: 0 } : null;
    if (this.stats) setInterval(() => console.error(JSON.stringify({ ...this.stats, active: this.active.size, queued: this.ckQueue.length })), 1000).unref();
  }

  log(level, msg) { this.logger(level, msg); }

  /** The options of a unary protocol call: its timeout. */
  callOpts() { return { timeoutMs: this.callTimeoutMs }; }

  /** Registers workflows and jobs (defineWorkflow, defineJob). */
  register(...defs) {
    for (const d of defs.flat()) {
      if (!d || typeof d.name !== 'string' || typeof d.fn !== 'function' || !['workflow', 'job'].includes(d.kind)) {
        throw new TypeError('Worker.register: pass definitions made by defineWorkflow or defineJob');
      }
      if (this.defs.has(d.name) && this.defs.get(d.name) !== d) throw new TypeError(`Worker.register: ${d.name} is registered twice`);
      this.defs.set(d.name, d);
    }
    return this;
  }

  /** Runs the worker until stop() (or SIGTERM / SIGINT when handleSignals). */
  async run() {
    if (this.defs.size === 0) throw new TypeError('Worker.run: register at least one workflow or job first');
    this.runAbort = new AbortController();
    const onSignal = () => { this.stop().catch((e) => this.log('warn', `stopping: ${e.message}`)); };
    if (this.handleSignals) { process.once('SIGTERM', onSignal); process.once('SIGINT', onSignal); }
    let started = false;
    try {
      started = await this.firstHeartbeat();
    } finally {
      // failed, or stopped before the server could be reached
      if (!started && this.handleSignals) { process.off('SIGTERM', onSignal); process.off('SIGINT', onSignal); }
    }
    if (!started) return;
    try {
      await this.client.resumeBlocked({ namespace: this.namespace, workflows: [...this.defs.keys()], queues: this.queues }, this.callOpts());
    } catch (err) {
      this.log('warn', `resuming blocked runs: ${err.message}`);
    }
    const hb = setInterval(() => {
      this.heartbeat(false).catch((e) => this.log('warn', `heartbeat: ${e.message}`));
      this.extendLeases().catch((e) => this.log('warn', `extending leases: ${e.message}`));
    }, this.heartbeatMs);
    const sub = this.subscribeCancel();
    this.started?.();
    try {
      await this.claimLoop();
      await this.stopped;
    } finally {
      clearInterval(hb);
      this.runAbort.abort();
      await sub.catch(() => {});
      if (this.handleSignals) { process.off('SIGTERM', onSignal); process.off('SIGINT', onSignal); }
    }
  }

  /** Resolves once the worker's record is written (run() started). */
  ready() {
    if (!this.readyP) this.readyP = new Promise((res) => { this.started = res; });
    return this.readyP;
  }

  /**
   * Stops gracefully: no more claims, active runs get shutdownGraceMs to finish,
   * the rest are handed back; then the worker's record is removed.
   */
  stop() {
    if (this.stopped) return this.stopped;
    this.stopping = true;
    this.claimAbort?.abort();
    for (const w of this.slotWaiters.splice(0)) w();
    this.stopped = (async () => {
      const deadline = Date.now() + this.shutdownGraceMs;
      while (this.active.size > 0 && Date.now() < deadline) await sleep(20);
      if (this.active.size > 0) {
        this.log('info', `handing back ${this.active.size} run(s)`);
        for (const r of this.active.values()) r.abort('shutdown');
        const until = Date.now() + this.leaseMs;
        while (this.active.size > 0 && Date.now() < until) await sleep(20);
      }
      try {
        await this.client.removeWorker({ namespace: this.namespace, name: this.name }, this.callOpts());
      } catch (err) {
        this.log('warn', `removing the worker's record: ${err.message}`);
      }
    })();
    return this.stopped;
  }

  /** Stops at once without handing anything back (tests of crashes). */
  kill() {
    this.stopping = true;
    this.claimAbort?.abort();
    for (const r of this.active.values()) r.abort('lease_lost');
    this.stopped = this.stopped ?? Promise.resolve();
  }

  /** The versions of each registered definition the worker serves (servedVersions). */
  versions() {
    return [...this.defs.values()].map((d) => ({ workflow: d.name, versions: servedVersions(d).map(BigInt) }));
  }

  /**
   * The worker's first Heartbeat, which writes its record. A server that cannot
   * be reached (not up yet, restarting) is tried again with backoff for
   * STARTUP_PATIENCE_MS, as the Go worker's registration is; any other error (a
   * refused token, a bad namespace) fails at once. False: stop() came first.
   */
  async firstHeartbeat() {
    const giveUp = Date.now() + STARTUP_PATIENCE_MS;
    let backoff = 50;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.heartbeat(true);
        if (attempt > 1) this.log('info', `reached the server at ${this.server} after ${attempt} attempts`);
        return true;
      } catch (err) {
        if (!(err instanceof ConnectError) || !retriable(err) || Date.now() + backoff > giveUp) throw err;
        if (attempt === 1) this.log('warn', `cannot reach the server at ${this.server} (${err.message}): trying again for up to ${STARTUP_PATIENCE_MS / 1000} s`);
      }
      await sleep(jitter(backoff), this.runAbort.signal);
      if (this.stopping) { await this.stopped; return false; }
      backoff = Math.min(backoff * 2, 1000);
    }
  }

  async heartbeat(start) {
    await this.client.heartbeat({
      namespace: this.namespace, name: this.name, workflows: [...this.defs.keys()], queues: this.queues,
      versions: this.versions(), version: SDK_VERSION, ttl: duration(this.leaseMs), start,
    }, this.callOpts());
  }

  async extendLeases() {
    const runs = [...this.active.values()].filter((r) => !r.ending);
    if (runs.length === 0) return;
    for (let i = 0; i < runs.length; i += 1000) {
      const part = runs.slice(i, i + 1000);
      const sentAt = Date.now();
      const res = await this.client.extendLeases({
        leases: part.map((r) => r.lease), duration: duration(this.leaseMs),
        steps: part.map((r) => r.currentStep ? stepPB(r.currentStep) : {}),
      }, this.callOpts());
      // the executions whose leases were sent (not a newer claim of the same run)
      const sent = new Map(part.map((r) => [r.lease.runId, r]));
      for (const r of part) r.leaseExpiresMs = Math.max(r.leaseExpiresMs ?? 0, sentAt + this.leaseMs);
      for (const id of res.lost) {
        const r = sent.get(id);
        if (r) { this.log('warn', `lease of run ${id} lost: stopping it`); r.abort('lease_lost'); }
      }
      for (const id of res.cancelRequested) sent.get(id)?.requestCancel();
    }
  }

  async subscribeCancel() {
    let backoff = 50;
    while (!this.runAbort.signal.aborted) {
      try {
        for await (const m of this.client.subscribe({ namespace: this.namespace, topic: 'cancel' }, { signal: this.runAbort.signal })) {
          backoff = 50;
          if (m.reconnect) break;
          // a signal (or the acknowledgement, after which changes may have been missed)
          this.extendLeases().catch((e) => this.log('warn', `extending leases: ${e.message}`));
        }
      } catch (err) {
        if (this.runAbort.signal.aborted) return;
        await sleep(jitter(backoff), this.runAbort.signal);
        backoff = Math.min(backoff * 2, 5000);
      }
    }
  }

  freeSlots() { return this.concurrency - this.active.size; }

  waitSlots(n, maxMs) {
    return new Promise((resolve) => {
      if (this.freeSlots() >= n || this.stopping) { resolve(); return; }
      let t;
      const check = () => {
        if (this.freeSlots() >= n || this.stopping) { clearTimeout(t); resolve(); return true; }
        return false;
      };
      const waiter = () => { if (!check()) this.slotWaiters.push(waiter); };
      this.slotWaiters.push(waiter);
      t = setTimeout(() => { const i = this.slotWaiters.indexOf(waiter); if (i >= 0) this.slotWaiters.splice(i, 1); resolve(); }, maxMs);
    });
  }

  slotFreed() {
    const ws = this.slotWaiters.splice(0);
    for (const w of ws) w();
  }

  async claimLoop() {
    let backoff = 50;
    const refill = Math.max(1, Math.min(64, Math.ceil(this.concurrency / 4)));
    while (!this.stopping) {
      const credit = this.freeSlots();
      if (credit <= 0) { await this.waitSlots(1, 1000); continue; }
      this.claimAbort = new AbortController();
      let got = 0;
      try {
        const stream = this.client.claim({
          namespace: this.namespace, queues: this.queues, workflows: [...this.defs.keys()], worker: this.name,
          versions: this.versions(), credit: BigInt(credit), leaseDuration: duration(this.leaseMs), wait: duration(this.claimWaitMs),
        }, { signal: this.claimAbort.signal });
        if (this.stats) this.stats.claims++;
        for await (const res of stream) {
          if (this.stats) { this.stats.msgs++; this.stats.claimed += res.runs.length; }
          for (const cr of res.runs) { got++; this.startRun(cr); }
          if (res.reconnect) break;
        }
        backoff = 50;
      } catch (err) {
        if (this.stopping) break;
        this.log('debug', `claim stream: ${err.message}`);
        await sleep(jitter(backoff));
        backoff = Math.min(backoff * 2, 5000);
        continue;
      }
      if (got >= credit) await this.waitSlots(Math.min(refill, this.concurrency), 1000);
    }
  }

  startRun(cr) {
    const def = this.defs.get(cr.run.workflow);
    const lease = { namespace: cr.run.namespace, runId: cr.run.id, token: cr.leaseToken, queue: cr.run.queue, secret: cr.leaseSecret };
    if (!def || this.stopping) {
      this.client.releaseLease({ lease, seq: 1n }, this.callOpts()).catch((e) => this.log('warn', `releasing run ${cr.run.id}: ${e.message}`));
      return;
    }
    const exec = def.kind === 'job' ? new JobExec(this, cr, def) : new RunExec(this, cr, def);
    // Claimed again while an execution of it is still here (its lease expired
    // before this worker saw it lost): that one's lease is gone, stop it so it
    // writes nothing more, and let the new execution own the entry.
    const old = this.active.get(cr.run.id);
    if (old) {
      this.log('warn', `run ${cr.run.id} claimed again: stopping its previous execution (lease lost)`);
      old.abort('lease_lost');
    }
    this.active.set(cr.run.id, exec);
    exec.leaseExpiresMs = cr.leaseExpiresAt ? date(cr.leaseExpiresAt).getTime() : 0;
    const go = async () => {
      const held = this.leaseHeld(exec);
      if (held !== true && !(await held)) return;
      await exec.execute();
    };
    go()
      .catch((err) => this.log('error', `executing run ${cr.run.id}: ${err.stack ?? err}`))
      .finally(() => {
        if (this.active.get(cr.run.id) === exec) this.active.delete(cr.run.id);
        this.slotFreed();
      });
  }

  /**
   * Whether the lease of a run may still be held, as it starts and before each
   * step attempt: true (not a promise) while its known expiry (the claim's,
   * then each extension's send time plus the lease) is ahead. Past it (the
   * process was frozen, or cut off, for a lease; a claim waited in the
   * connection meanwhile) the run may already be another worker's: the server
   * is asked (one ExtendLeases), and a lost lease stops the run, so that a
   * claim is dropped before it starts and no step starts on a lost lease.
   * Clocks differ, so a lease the server still holds goes on.
   */
  leaseHeld(r) {
    if (!r.leaseExpiresMs || Date.now() < r.leaseExpiresMs) return true;
    return (async () => {
      const sentAt = Date.now();
      let why = 'lost';
      try {
        const res = await this.client.extendLeases({ leases: [r.lease], duration: duration(this.leaseMs),
          steps: [r.currentStep ? stepPB(r.currentStep) : {}] }, this.callOpts());
        if (!res.lost.includes(r.lease.runId)) {
          r.leaseExpiresMs = Math.max(r.leaseExpiresMs, sentAt + this.leaseMs);
          return true;
        }
      } catch (err) {
        why = err.message;
      }
      this.log('warn', `lease of run ${r.lease.runId} expired (${why}): stopping it; a claim is dropped before it starts`);
      r.abort('lease_lost');
      return false;
    })();
  }

  // ---- the protocol calls the engine makes ----

  /** Sends a checkpoint item in the next batch; resolves with its result, rejects with its error. */
  checkpoint(item) {
    return new Promise((resolve, reject) => {
      this.ckQueue.push({ item, resolve, reject });
      this.pumpCheckpoints();
    });
  }

  pumpCheckpoints() {
    while (this.ckCalls < this.maxCheckpointCalls && this.ckQueue.length > 0) {
      const batch = this.ckQueue.splice(0, 1000);
      this.ckCalls++;
      this.sendCheckpoints(batch).finally(() => {
        this.ckCalls--;
        this.pumpCheckpoints();
      });
    }
  }

  async sendCheckpoints(batch) {
    const t0 = Date.now();
    let backoff = 50;
    for (;;) {
      try {
        const tc = performance.now();
        // an attempt is bounded by what is left of the lease; a retry sends the same seq numbers
        const left = this.leaseMs - (Date.now() - t0);
        const res = await this.client.checkpoint({ checkpoints: batch.map((b) => b.item) }, { timeoutMs: Math.max(1, Math.min(left, this.callTimeoutMs)) });
        if (this.stats) { this.stats.calls++; this.stats.items += batch.length; this.stats.ms += performance.now() - tc; }
        res.results.forEach((r, i) => {
          if (r.error) batch[i].reject(new ApiError(`checkpoint refused: ${r.error.reason}: ${r.error.message}`, { reason: r.error.reason, code: r.error.code }));
          else batch[i].resolve(r);
        });
        return;
      } catch (err) {
        if (!retriable(err) || Date.now() - t0 > this.leaseMs) {
          const e = apiErrorOf(err);
          for (const b of batch) b.reject(e);
          return;
        }
        await sleep(jitter(backoff));
        backoff = Math.min(backoff * 2, 1000);
      }
    }
  }

  async listChildren(namespace, parent, position) {
    const res = await this.client.listChildren({ namespace, parent, position: BigInt(position) }, this.callOpts());
    return res.runs.map((r) => ({
      id: r.id, workflow: r.workflow, status: r.status, output: r.output,
      error: r.error ? { message: r.error.message, type: r.error.type, nonRetryable: r.error.nonRetryable } : undefined,
    }));
  }
}

/** A job's one attempt and its one checkpoint (internal/engine/job.go). */
class JobExec {
  constructor(host, cr, def) {
    this.host = host;
    this.def = def;
    this.cr = cr;
    const r = cr.run;
    this.run = { id: r.id, workflow: r.workflow, attempt: Number(r.attempts), deadline: date(r.deadline), input: r.input,
      workflowAttempts: r.workflowAttempts ?? [] };
    this.lease = { namespace: r.namespace, runId: r.id, token: cr.leaseToken, queue: r.queue, secret: cr.leaseSecret };
    this.payload = payloadLimit(host, cr);
    this.cancelRequested = r.cancelRequested;
    this.ac = new AbortController();
    this.stopReason = null;
    this.currentStep = null;
  }

  requestCancel() {
    if (this.cancelRequested) return;
    this.cancelRequested = true;
    this.ac.abort(new CancelledError());
  }

  abort(why) {
    if (this.stopReason) return;
    this.stopReason = why;
    this.ac.abort(why);
  }

  async save(p) {
    const item = { lease: this.lease, seq: 1n, ops: [], attempts: [], stream: [], ...p };
    try {
      const res = await this.host.checkpoint(item);
      if (res?.retryAt) return 'waiting'; // the store made the failure a workflow retry
      return p.status;
    } catch (err) {
      this.host.log('warn', `saving job ${this.run.id} (${p.status}): ${err.message}`);
      return '';
    }
  }

  outcome(prior, attempt, t0, out, err, cancelled) {
    const policy = this.def.policy(this.cr.queueRetry);
    if (err === undefined) {
      const p = { status: 'succeeded', output: out };
      if (prior) {
        p.ops = [{ position: 0n, kind: 'step', name: this.run.workflow, done: true, result: out, attempts: BigInt(attempt),
          startedAt: ts(prior.startedAt), finishedAt: ts(new Date()), attemptStartedAt: ts(t0) }];
      }
      return p;
    }
    const info = errorInfo(err);
    const end = new Date();
    const op = { position: 0n, kind: 'step', name: this.run.workflow, done: false, attempts: BigInt(attempt), startedAt: ts(prior ? prior.startedAt : t0) };
    const p = { ops: [op], attempts: [{ position: 0n, attempt: BigInt(attempt), error: info, startedAt: ts(t0), finishedAt: ts(end) }] };
    // attempts made in earlier attempts of the run (a workflow retry of a job started with a policy) do not count
    const before = Math.min(priorAttempts(this.run.workflowAttempts, 0), attempt - 1);
    const retry = !cancelled && attempt - before < policy.maxAttempts && !info.nonRetryable && !(err instanceof DeadlineExceededError) &&
      !policy.nonRetryableTypes.includes(info.type);
    if (retry) {
      let wake = new Date(end.getTime() + policy.delay(attempt));
      if (this.run.deadline && this.run.deadline < wake) wake = this.run.deadline;
      return { ...p, status: 'waiting', wakeAt: ts(wake), waitReason: 'retry backoff' };
    }
    op.done = true; op.error = info; op.finishedAt = ts(end);
    p.status = 'failed'; p.error = { ...info };
    if (cancelled) { p.status = 'cancelled'; p.error.type = 'cancelled'; }
    return p;
  }

  async execute() {
    let attempt = 1;
    let prior = null;
    let ended;
    for (const o of this.cr.history) {
      if (Number(o.position) === 0 && o.kind === 'step') {
        prior = { startedAt: date(o.startedAt) }; attempt = Number(o.attempts) + 1;
        ended = endedAttempt({ attempts: Number(o.attempts), attemptLog: o.attemptLog.map((a) => ({ ...a, attempt: Number(a.attempt) })) });
      }
    }
    const now = new Date();
    const policy = this.def.policy(this.cr.queueRetry);
    if (ended && (attempt > policy.maxAttempts || policy.nonRetryableTypes.includes(ended.type))) {
      // its last attempt was lost or timed out, and was the last allowed: the job fails with its error
      const info = { message: ended.message, type: ended.type };
      return this.save({ status: 'failed', error: info, ops: [{ position: 0n, kind: 'step', name: this.run.workflow, done: true,
        error: info, attempts: BigInt(attempt - 1), startedAt: ts(prior.startedAt), finishedAt: ts(new Date()) }] });
    }
    if (this.run.deadline && now >= this.run.deadline) return this.save(this.outcome(prior, attempt, now, undefined, new DeadlineExceededError(), false));
    if (this.cancelRequested) return this.save(this.outcome(prior, attempt, now, undefined, new CancelledError(), true));
    const timers = [];
    const timeout = this.def.opts.timeout ?? 0;
    if (timeout > 0) timers.push(longTimeout(() => this.ac.abort(new StepTimeoutError(`step attempt timed out after ${fmtDuration(timeout)}`)), timeout));
    if (this.run.deadline) timers.push(longTimeout(() => this.ac.abort(new DeadlineExceededError()), this.run.deadline - now));
    this.currentStep = { name: this.run.workflow, attempt, since: now, position: 0, timeout };
    let out; let err;
    try {
      const input = decode(this.run.input);
      const v = await this.def.fn(input, { runId: this.run.id, attempt, signal: this.ac.signal, idempotencyKey: `${this.run.id}/0` });
      out = encode(v);
      if (out.length > this.payload.limit) {
        err = new TrellisError(`payload too large: output is ${out.length} bytes (${this.payload.of}limit ${this.payload.limit})`, { type: 'payload_too_large', nonRetryable: true });
      }
    } catch (e) {
      err = e ?? new Error('job failed');
    } finally {
      for (const t of timers) clearLongTimeout(t);
      this.currentStep = null;
    }
    if (err !== undefined && this.stopReason) {
      if (this.stopReason === 'shutdown') {
        try {
          await this.host.client.releaseLease({ lease: this.lease, seq: 1n }, this.host.callOpts());
          return 'pending';
        } catch (e) {
          this.host.log('warn', `handing back job ${this.run.id}: ${e.message}`);
        }
      }
      return '';
    }
    let cancelled = false;
    if (err !== undefined && this.ac.signal.aborted) {
      const why = this.ac.signal.reason;
      if (why instanceof CancelledError || why instanceof DeadlineExceededError || why instanceof StepTimeoutError) err = why;
      cancelled = why instanceof CancelledError;
    }
    return this.save(this.outcome(prior, attempt, now, err === undefined ? out : undefined, err, cancelled));
  }
}
