// A client of a Trellis server's HTTP API (docs/http-api.md), over fetch: start
// runs, wait for results, cancel, send events, decide approvals, list runs, read
// histories, and follow a run's stream (server-sent events) as an async iterator.

import { ApiError, RunFailedError } from './errors.js';

const FINAL = new Set(['run.succeeded', 'run.failed', 'run.cancelled']);
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

function seg(what, v) {
  if (typeof v !== 'string' || v.length === 0) throw new TypeError(`${what} must be a non-empty string, got ${JSON.stringify(v)}`);
  if (v.includes('/')) throw new TypeError(`${what} must not contain "/": ${JSON.stringify(v)}`);
  return encodeURIComponent(v);
}

function idemKey() { return crypto.randomUUID(); }

/** A client of the HTTP API of the server at o.server, with bearer token o.token. */
export class Client {
  constructor(o = {}) {
    if (!o.server || typeof o.server !== 'string') throw new TypeError('Client: server (the server URL) is required');
    let url;
    try { url = new URL(o.server); } catch { throw new TypeError(`Client: server ${JSON.stringify(o.server)} is not a URL`); }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`Client: server ${JSON.stringify(o.server)}: want http:// or https://`);
    this.server = o.server.replace(/\/+$/, '');
    this.token = o.token;
    this.namespace = o.namespace ?? 'default';
    this.retries = o.retries ?? 3;
  }

  ns() { return `/v1/namespaces/${seg('namespace', this.namespace)}`; }

  headers(extra = {}) {
    const h = { Accept: 'application/json', ...extra };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    return h;
  }

  /** One call; mutating calls carry an Idempotency-Key, the same on each retry. */
  async call(method, path, { body, query, key, ok = [200, 201, 204], signal } = {}) {
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
    const headers = this.headers(body !== undefined ? { 'Content-Type': 'application/json' } : {});
    if (method !== 'GET') headers['Idempotency-Key'] = key ?? idemKey();
    const init = { method, headers, body: body !== undefined ? JSON.stringify(body) : undefined, signal };
    let lastErr;
    for (let i = 0; i <= this.retries; i++) {
      let res;
      try {
        res = await fetch(url, init);
      } catch (err) {
        if (signal?.aborted) throw err;
        lastErr = new ApiError(`${method} ${path}: ${err.cause?.message ?? err.message}`, { code: 'unavailable' });
        await new Promise((r) => setTimeout(r, 100 * 2 ** i));
        continue;
      }
      if (ok.includes(res.status)) {
        if (res.status === 204) return { status: 204, body: undefined };
        const text = await res.text();
        return { status: res.status, body: text ? JSON.parse(text) : undefined };
      }
      const text = await res.text();
      let p = {};
      try { p = JSON.parse(text); } catch { p = { detail: text }; }
      const err = new ApiError(`${method} ${path}: ${res.status} ${p.code ?? ''}: ${p.detail ?? p.title ?? text}`, {
        status: res.status, code: p.code ?? '', requestId: p.request_id ?? res.headers.get('x-request-id') ?? '',
      });
      if ((res.status === 429 || res.status === 503) && i < this.retries) {
        lastErr = err;
        const after = Number(res.headers.get('retry-after') ?? '0');
        await new Promise((r) => setTimeout(r, after > 0 ? after * 1000 : 100 * 2 ** i));
        continue;
      }
      throw err;
    }
    throw lastErr;
  }

  /**
   * Starts a run of workflow (a definition or its name) with input.
   * opts: id (workflow ID), queue, priority, deadline (Date), startAt (Date),
   * reuse, idempotencyKey, version (pins the run to that workflow version:
   * only a worker that serves it runs it; absent or 0: not pinned).
   */
  async start(workflow, input, opts = {}) {
    const name = typeof workflow === 'string' ? workflow : workflow?.name;
    if (typeof name !== 'string' || !name) throw new TypeError('Client.start: a workflow (a definition or its name) is required');
    const body = { workflow: name, input: input === undefined ? null : input };
    if (opts.id) body.id = opts.id;
    if (opts.queue) body.queue = opts.queue;
    if (opts.priority) body.priority = opts.priority;
    if (opts.deadline) body.deadline = new Date(opts.deadline).toISOString();
    if (opts.startAt) body.available_at = new Date(opts.startAt).toISOString();
    if (opts.reuse) body.reuse = opts.reuse;
    if (opts.version) body.version = opts.version;
    if (opts.retry) body.retry = retryJSON(opts.retry);
    const { body: run } = await this.call('POST', `${this.ns()}/runs`, { body, key: opts.idempotencyKey });
    return run;
  }

  /** The run (by run ID or workflow ID). */
  async getRun(id) {
    return (await this.call('GET', `${this.ns()}/runs/${seg('run id', id)}`)).body;
  }

  /**
   * Waits for the run to end and returns its output; throws RunFailedError when
   * it failed or was cancelled. opts.timeout (ms) bounds the wait (ApiError
   * with code "timeout" after it).
   */
  async result(id, opts = {}) {
    const run = await this.waitRun(id, opts);
    if (run.status !== 'succeeded') throw new RunFailedError(run);
    return run.output;
  }

  /** Waits for the run to end (long polls of GET …/result?wait=) and returns it. */
  async waitRun(id, opts = {}) {
    const until = opts.timeout ? Date.now() + opts.timeout : Infinity;
    for (;;) {
      const left = until - Date.now();
      if (left <= 0) throw new ApiError(`run ${id} did not end within ${opts.timeout} ms`, { code: 'timeout' });
      const wait = Math.max(1, Math.min(30, Math.ceil(left / 1000)));
      const { status, body } = await this.call('GET', `${this.ns()}/runs/${seg('run id', id)}/result`, { query: { wait: `${wait}s` }, ok: [200, 202], signal: opts.signal });
      if (status === 200 && TERMINAL.has(body.status)) return body;
    }
  }

  /** Requests the run's cancellation. */
  async cancel(id, opts = {}) {
    return (await this.call('POST', `${this.ns()}/runs/${seg('run id', id)}/cancel`, { key: opts.idempotencyKey })).body;
  }

  /** Sends event `name` with payload to the run. */
  async sendEvent(id, name, payload, opts = {}) {
    if (typeof name !== 'string' || !name) throw new TypeError('Client.sendEvent: an event name is required');
    await this.call('POST', `${this.ns()}/runs/${seg('run id', id)}/events`, { body: { name, payload: payload === undefined ? null : payload }, key: opts.idempotencyKey });
  }

  /** Approval requests: filter {run, status}. */
  async approvals(filter = {}) {
    const { body } = await this.call('GET', `${this.ns()}/approvals`, { query: { run: filter.run, status: filter.status, limit: filter.limit } });
    return body.approvals;
  }

  async approve(id, opts = {}) {
    const body = opts.comment ? { comment: opts.comment } : {};
    return (await this.call('POST', `${this.ns()}/approvals/${seg('approval id', id)}/approve`, { body, key: opts.idempotencyKey })).body;
  }

  async reject(id, opts = {}) {
    const body = opts.comment ? { comment: opts.comment } : {};
    return (await this.call('POST', `${this.ns()}/approvals/${seg('approval id', id)}/reject`, { body, key: opts.idempotencyKey })).body;
  }

  /** One page of runs, newest first: filter {status, workflow, workflowId, queue, limit, pageToken}. */
  async listRuns(filter = {}) {
    const status = Array.isArray(filter.status) ? filter.status.join(',') : filter.status;
    const { body } = await this.call('GET', `${this.ns()}/runs`, {
      query: { status, workflow: filter.workflow, workflow_id: filter.workflowId, queue: filter.queue, limit: filter.limit, page_token: filter.pageToken },
    });
    return { runs: body.runs, nextPageToken: body.next_page_token };
  }

  /** The run's history ({format, run, ops}, docs/history-format.md). */
  async history(id) {
    return (await this.call('GET', `${this.ns()}/runs/${seg('run id', id)}/history`)).body;
  }

  /** A value of the run's store (undefined when the run has no such key; an unknown run is an ApiError run_not_found). */
  async value(id, key) {
    try {
      return (await this.call('GET', `${this.ns()}/runs/${seg('run id', id)}/values/${seg('key', key)}`)).body.value;
    } catch (err) {
      if (err.status === 404 && err.code === 'key_not_found') return undefined;
      throw err;
    }
  }

  /** The child runs the child op at position started. */
  async children(id, position) {
    return (await this.call('GET', `${this.ns()}/runs/${seg('run id', id)}/children`, { query: { position } })).body.runs;
  }

  /**
   * The run's stream as an async iterator of {sequence, name, data}, from after
   * opts.after (a sequence, or "now"), to its final event. It reconnects from the
   * last event it delivered when the connection drops (or from the last position
   * the server gave with an `id:` line of no data: a stream opened at "now" resumes
   * there; without one, a reconnection before the first event asks for "now"
   * again). An event whose data is not JSON is an ApiError (code
   * "invalid_response"), not a dropped connection.
   */
  async *stream(id, opts = {}) {
    let after = opts.after;
    let failures = 0;
    for (;;) {
      const url = new URL(`${this.server}${this.ns()}/runs/${seg('run id', id)}/stream`);
      const headers = this.headers({ Accept: 'text/event-stream' });
      if (typeof after === 'number') headers['Last-Event-ID'] = String(after);
      else if (after === 'now') url.searchParams.set('after', 'now');
      let res;
      try {
        res = await fetch(url, { headers, signal: opts.signal });
      } catch (err) {
        if (opts.signal?.aborted || ++failures > 10) throw err;
        await new Promise((r) => setTimeout(r, 200 * failures));
        continue;
      }
      if (res.status !== 200) {
        const text = await res.text();
        let p = {};
        try { p = JSON.parse(text); } catch { p = { detail: text }; }
        throw new ApiError(`GET stream of ${id}: ${res.status} ${p.code ?? ''}: ${p.detail ?? text}`, { status: res.status, code: p.code ?? '' });
      }
      const dec = new TextDecoder();
      let buf = '';
      let ev = { id: undefined, name: 'message', data: [] };
      try {
        for await (const chunk of res.body) {
          buf += dec.decode(chunk, { stream: true });
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            let line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            if (line.endsWith('\r')) line = line.slice(0, -1);
            if (line === '') {
              // an id moves the position a reconnection resumes from, with or
              // without data; an event without one leaves it where it was
              if (ev.id !== undefined) after = ev.id;
              if (ev.data.length > 0) {
                let data;
                try {
                  data = JSON.parse(ev.data.join('\n'));
                } catch (err) {
                  throw new ApiError(`stream of run ${id}: event ${ev.id ?? '(no id)'} ${JSON.stringify(ev.name)}: data is not JSON: ${err.message}`, { code: 'invalid_response' });
                }
                const out = { sequence: ev.id, name: ev.name, data };
                failures = 0;
                yield out;
                if (FINAL.has(out.name)) return;
              }
              ev = { id: undefined, name: 'message', data: [] };
              continue;
            }
            if (line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const field = i < 0 ? line : line.slice(0, i);
            let value = i < 0 ? '' : line.slice(i + 1);
            if (value.startsWith(' ')) value = value.slice(1);
            if (field === 'id') {
              // a sequence; anything else is no position to resume from
              if (/^(0|[1-9][0-9]*)$/.test(value) && Number.isSafeInteger(Number(value))) ev.id = Number(value);
            }
            else if (field === 'event') ev.name = value;
            else if (field === 'data') ev.data.push(value);
          }
        }
      } catch (err) {
        if (opts.signal?.aborted || err instanceof ApiError) throw err;
      }
      // the connection ended before the final event: resume after the last one
      if (++failures > 10) throw new ApiError(`stream of run ${id} ended before its final event`, { code: 'unavailable' });
      await new Promise((r) => setTimeout(r, 100 * failures));
    }
  }
}

/**
 * A start's workflow retry policy (a step's RetryPolicy shape: maxAttempts,
 * initialInterval and maxInterval in ms, backoffCoefficient,
 * nonRetryableTypes) as the API's retry object; the server checks it.
 */
function retryJSON(r) {
  const out = { max_attempts: r.maxAttempts ?? 3 };
  if (r.initialInterval !== undefined) out.initial_backoff = `${r.initialInterval}ms`;
  if (r.maxInterval !== undefined) out.max_backoff = `${r.maxInterval}ms`;
  if (r.backoffCoefficient !== undefined) out.factor = r.backoffCoefficient;
  if (r.nonRetryableTypes !== undefined) out.non_retryable_types = r.nonRetryableTypes;
  return out;
}
