// capture.mjs drives a real `trellis server` as a worker written in another
// language would (Node 20, fetch, the Connect protocol with JSON), and writes
// what it sent and what it got back to docs/protocol/*.json: the transcripts
// that docs/worker-protocol.md links and server/protocoldoc_test.go replays.
//
//   node docs/protocol/capture.mjs --server http://127.0.0.1:7070 --token T [--out docs/protocol]
//
// The token needs worker, producer and reader on namespace default. The
// checkpoints below are written by hand, as the Go engine (internal/engine)
// writes them for the workflow each transcript names; nothing here is
// generated from Go.

import { writeFileSync } from "node:fs";
import { join } from "node:path";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const SERVER = args.server ?? "http://127.0.0.1:7070";
const TOKEN = args.token ?? process.env.TRELLIS_TOKEN;
const OUT = args.out ?? "docs/protocol";
const NS = "default";
const QUEUE = "protocol-doc";
const WORKER = "doc-worker";
const SVC = "/trellis.worker.v1.WorkerService/";

// The JSON fields of the protocol that are `bytes`: base64 on the wire.
const BYTES = new Set(["input", "output", "result", "payload", "data", "value", "details"]);

const b64 = (v) => Buffer.from(JSON.stringify(v)).toString("base64");
const unb64 = (s) => JSON.parse(Buffer.from(s, "base64").toString());
const now = () => new Date().toISOString();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// payloads lists the decoded value of every bytes field of msg, by path, so that
// a reader of a transcript need not decode base64 (the replay ignores it).
function payloads(msg, path = "", out = {}) {
  if (Array.isArray(msg)) msg.forEach((v, i) => payloads(v, `${path}[${i}]`, out));
  else if (msg && typeof msg === "object") {
    for (const [k, v] of Object.entries(msg)) {
      const p = path ? `${path}.${k}` : k;
      if (BYTES.has(k) && typeof v === "string" && !p.includes("events[")) {
        try { out[p] = unb64(v); } catch { out[p] = `(not JSON) ${v}`; }
      } else payloads(v, p, out);
    }
  }
  return out;
}

class Transcript {
  constructor(name, title, description) {
    Object.assign(this, { name, title, description, exchanges: [] });
  }
  add(ex) {
    ex.at = now();
    this.exchanges.push(ex);
    return ex;
  }
  write() {
    const doc = {
      title: this.title,
      description: this.description,
      captured: { at: now(), server: "trellis server --store sqlite:… (one process), driven by docs/protocol/capture.mjs" },
      exchanges: this.exchanges,
    };
    writeFileSync(join(OUT, `${this.name}.json`), JSON.stringify(doc, null, 2) + "\n");
  }
}

const auth = { Authorization: `Bearer ${TOKEN}` };

// unary makes a Connect unary call with JSON.
async function unary(t, proc, request, note) {
  const res = await fetch(SERVER + SVC + proc, {
    method: "POST",
    headers: { ...auth, "Content-Type": "application/json", "Connect-Protocol-Version": "1" },
    body: JSON.stringify(request),
  });
  const response = await res.json();
  const ex = { note, kind: "unary", procedure: proc, request, status: res.status, response };
  const rp = payloads(request), sp = payloads(response);
  if (Object.keys(rp).length) ex.request_payloads = rp;
  if (Object.keys(sp).length) ex.response_payloads = sp;
  t.add(ex);
  if (res.status !== 200) throw new Error(`${proc}: ${res.status} ${JSON.stringify(response)}`);
  for (const r of response.results ?? []) if (r.error) throw new Error(`${proc}: ${JSON.stringify(r.error)}`);
  return response;
}

function envelope(flags, json) {
  const body = Buffer.from(JSON.stringify(json));
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

// serverStream makes a Connect server-streaming call with JSON: one request
// envelope; the answer is envelopes, the last one (flag 2) the end of stream.
async function serverStream(t, proc, request, note) {
  const res = await fetch(SERVER + SVC + proc, {
    method: "POST",
    headers: { ...auth, "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1" },
    body: envelope(0, request),
  });
  let buf = Buffer.from(await res.arrayBuffer());
  const messages = [];
  let end = null;
  while (buf.length >= 5) {
    const flags = buf.readUInt8(0), n = buf.readUInt32BE(1);
    const msg = JSON.parse(buf.subarray(5, 5 + n).toString());
    buf = buf.subarray(5 + n);
    if (flags & 2) end = msg;
    else messages.push(msg);
  }
  const ex = { note, kind: "server_stream", procedure: proc, request, status: res.status, messages, end };
  const sp = payloads(messages);
  if (Object.keys(sp).length) ex.response_payloads = sp;
  t.add(ex);
  if (end?.error) throw new Error(`${proc}: ${JSON.stringify(end.error)}`);
  return messages;
}

// http makes a call of the HTTP API (what a client or the runner does).
async function http(t, method, path, body, note) {
  const res = await fetch(SERVER + path, {
    method,
    headers: { ...auth, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const ex = { note, kind: "http", method, path, status: res.status };
  if (body !== undefined) ex.request = body;
  if (text) ex.response = JSON.parse(text);
  t.add(ex);
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return ex.response;
}

// stream reads a finished run's stream (server-sent events) to its end.
async function runStream(t, runID, note) {
  const path = `/v1/namespaces/${NS}/runs/${runID}/stream`;
  const res = await fetch(SERVER + path, { headers: { ...auth, Accept: "text/event-stream" } });
  const text = await res.text();
  const events = [];
  for (const block of text.split("\n\n")) {
    const ev = {};
    for (const line of block.split("\n")) {
      const [k, ...rest] = line.split(": ");
      if (k === "id") ev.id = rest.join(": ");
      if (k === "event") ev.event = rest.join(": ");
      if (k === "data") ev.data = JSON.parse(rest.join(": "));
    }
    if (ev.event) events.push(ev);
  }
  t.add({ note, kind: "sse", method: "GET", path, status: res.status, events });
  return events;
}

const start = (t, workflow, input) =>
  http(t, "POST", `/v1/namespaces/${NS}/runs`, { workflow, queue: QUEUE, input }, `a client starts a run of ${workflow}`);

const claim = async (t, workflows, note) => {
  const msgs = await serverStream(t, "Claim", {
    namespace: NS, queues: [QUEUE], workflows, worker: WORKER, credit: 1, leaseDuration: "30s", wait: "10s",
  }, note);
  const runs = msgs.flatMap((m) => m.runs ?? []);
  if (runs.length !== 1) throw new Error(`claim: ${runs.length} runs`);
  return runs[0];
};

const leaseOf = (cr) => ({ namespace: NS, runId: cr.run.id, token: cr.leaseToken, queue: cr.run.queue, secret: cr.leaseSecret });

const checkpoint = (t, item, note) => unary(t, "Checkpoint", { checkpoints: [item] }, note);

// A helper for the lifecycle events' data (internal/engine/stream.go).
const ev = (name, data) => ({ name, data: b64(data) });
const ms = (a, b) => Math.round((Date.parse(b) - Date.parse(a)) * 1000) / 1000; // duration_ms of two ISO times

// stepOp is a step done at its first attempt.
const stepOp = (position, name, result, startedAt, finishedAt) =>
  ({ position, kind: "step", name, done: true, result: b64(result), attempts: 1, startedAt, finishedAt });

// runStep "executes" a step: here, computing its result takes a few ms.
async function runStep(fn) {
  const startedAt = now();
  await sleep(5);
  const result = fn();
  return { startedAt, finishedAt: now(), result };
}

async function threeSteps() {
  const t = new Transcript("three-steps", "A run of three steps: claim, checkpoints, succeeded",
    "Workflow proto.three_steps, input {\"x\":2}: step add (x+1), step mul (×10), step format (\"result=\" + that). " +
    "The worker records itself, claims the run, checkpoints each step's result before the next step starts (the " +
    "first checkpoint carries run.started), extends its lease once with the step under way, ends the run with the " +
    "last step's checkpoint, and removes its record. The run's stream is read at the end.");
  const wfs = ["proto.three_steps"];
  await unary(t, "Heartbeat", { namespace: NS, name: WORKER, workflows: wfs, queues: [QUEUE], version: "doc-1", ttl: "30s", start: true },
    "the worker records itself (and repeats this every heartbeat interval, without start)");
  const run = await start(t, "proto.three_steps", { x: 2 });
  const cr = await claim(t, wfs, "the worker claims: credit 1, wait up to 10 s; the stream ends once the credit is used");
  const lease = leaseOf(cr);
  const x = unb64(cr.run.input).x;
  const add = await runStep(() => x + 1);
  const mul = await runStep(() => add.result * 10);
  await checkpoint(t, {
    lease, seq: "1", status: "running",
    ops: [stepOp(0, "add", add.result, add.startedAt, add.finishedAt)],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.three_steps" }),
      ev("step.completed", { name: "add", attempt: 1, duration_ms: ms(add.startedAt, add.finishedAt) })],
  }, "before step mul starts, the result of add is made durable (with run.started first: the run's first execution)");
  await unary(t, "ExtendLeases", { leases: [lease], duration: "30s", steps: [{ name: "mul", attempt: "1", since: mul.startedAt }] },
    "a heartbeat: every held lease, and the step each run is executing");
  const fmt = await runStep(() => "result=" + mul.result);
  await checkpoint(t, {
    lease, seq: "2", status: "running",
    ops: [stepOp(1, "mul", mul.result, mul.startedAt, mul.finishedAt)],
    stream: [ev("step.completed", { name: "mul", attempt: 1, duration_ms: ms(mul.startedAt, mul.finishedAt) })],
  }, "before step format starts, mul's result");
  await checkpoint(t, {
    lease, seq: "3", status: "succeeded", output: b64(fmt.result),
    ops: [stepOp(2, "format", fmt.result, fmt.startedAt, fmt.finishedAt)],
    stream: [ev("step.completed", { name: "format", attempt: 1, duration_ms: ms(fmt.startedAt, fmt.finishedAt) }),
      ev("run.succeeded", { result: fmt.result })],
  }, "the workflow returned: the last step and the outcome in one checkpoint, which ends the lease");
  await unary(t, "RemoveWorker", { namespace: NS, name: WORKER }, "graceful stop: the worker removes its record");
  await runStream(t, run.id, "the run's stream: the lifecycle events the checkpoints carried, numbered by the server");
  t.write();
}

async function retries() {
  const t = new Transcript("retry", "A failed attempt and a retry",
    "Workflow proto.retries: step flaky fails its first attempt (\"flaky failure 1\") and succeeds at the second " +
    "after a 200 ms backoff waited in place. The failed attempt, the step in progress (done false, attempts 1) and " +
    "step.failed go in the checkpoint made before the second attempt starts; the step's completion names the " +
    "attempt that succeeded (attempt_started_at). ListHistory reads the op back with its attempt_log.");
  const wfs = ["proto.retries"];
  const run = await start(t, "proto.retries", { fail_times: 1 });
  const cr = await claim(t, wfs, "claim");
  const lease = leaseOf(cr);
  const first = now();
  await sleep(5);
  const failedAt = now();
  await sleep(200); // the backoff, in place
  const a2 = now();
  await checkpoint(t, {
    lease, seq: "1", status: "running",
    ops: [{ position: 0, kind: "step", name: "flaky", done: false, attempts: 1, startedAt: first }],
    attempts: [{ position: 0, attempt: 1, error: { message: "flaky failure 1" }, startedAt: first, finishedAt: failedAt }],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.retries" }),
      ev("step.failed", { name: "flaky", attempt: 1, duration_ms: ms(first, failedAt), error: { message: "flaky failure 1" } })],
  }, "attempt 1 failed; before attempt 2 starts: the failed attempt, the step in progress and step.failed (not final: a retry follows)");
  await sleep(5);
  const done = now();
  await checkpoint(t, {
    lease, seq: "2", status: "succeeded", output: b64("ok after 2"),
    ops: [{ position: 0, kind: "step", name: "flaky", done: true, result: b64("ok after 2"), attempts: 2,
      startedAt: first, finishedAt: done, attemptStartedAt: a2 }],
    stream: [ev("step.completed", { name: "flaky", attempt: 2, duration_ms: ms(a2, done) }),
      ev("run.succeeded", { result: "ok after 2" })],
  }, "attempt 2 succeeded: the op done, attempts 2, with when attempt 2 began; and the outcome");
  await unary(t, "ListHistory", { namespace: NS, ref: run.id }, "the history as a replay reads it: attempt_log holds the failed attempt");
  await runStream(t, run.id, "the stream");
  t.write();
}

async function durableSleep() {
  const t = new Transcript("sleep", "A durable sleep: waiting, claimed again, resumed",
    "Workflow proto.sleep, input {\"seconds\":2}: a timer of 2 s (longer than what a worker sleeps in place), then " +
    "step after. The first execution records the timer in progress (its due time as result) and hands the run back " +
    "as waiting with wake_at; the server makes it due then, and the next claim (attempt 2) replays: the timer has " +
    "fired, which needs no checkpoint of its own (it is derivable), so it goes with the step's.");
  const wfs = ["proto.sleep"];
  const run = await start(t, "proto.sleep", { seconds: 2 });
  const cr = await claim(t, wfs, "claim (attempt 1)");
  const t0 = now();
  const due = new Date(Date.parse(t0) + 2000).toISOString();
  const reason = `sleeping until ${due}`;
  await checkpoint(t, {
    lease: leaseOf(cr), seq: "1", status: "waiting", wakeAt: due, waitReason: reason,
    ops: [{ position: 0, kind: "timer", done: false, result: b64(due), attempts: 1, startedAt: t0 }],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.sleep" }), ev("run.waiting", { reason, wake_at: due })],
  }, "the timer is recorded (done false, result = due time) and the run waits: the lease ends");
  const cr2 = await claim(t, wfs, "the claim stream pushes the run when it is due (attempt 2, its history holds the timer)");
  const fired = now();
  const st = await runStep(() => "slept");
  await checkpoint(t, {
    lease: leaseOf(cr2), seq: "1", status: "succeeded", output: b64("slept"),
    ops: [{ position: 0, kind: "timer", done: true, result: b64(due), attempts: 1, startedAt: fired, finishedAt: fired },
      stepOp(1, "after", st.result, st.startedAt, st.finishedAt)],
    stream: [ev("run.resumed", { attempt: 2, replayed: 1 }),
      ev("step.completed", { name: "after", attempt: 1, duration_ms: ms(st.startedAt, st.finishedAt) }),
      ev("run.succeeded", { result: "slept" })],
  }, "replayed: the timer fired (done now), step after ran; seq starts again at 1 under the new lease");
  await runStream(t, run.id, "the stream");
  t.write();
}

async function eventWait() {
  const t = new Transcript("event-wait", "Waiting for events: one that comes, one that times out",
    "Workflow proto.event_wait: wait for event go (no timeout), then for event never with a 1 s timeout. The run " +
    "waits with wait_events; a client sends go; the next claim's inbox holds it, and the checkpoint that records it " +
    "consumes it. The wait for never times out: the checkpoint that records the timeout (error type event_timeout) " +
    "is guarded by no_events, so that an event that came meanwhile refuses it (CONFLICT) instead of being lost.");
  const wfs = ["proto.event_wait"];
  const run = await start(t, "proto.event_wait", {});
  const cr = await claim(t, wfs, "claim (attempt 1)");
  const t0 = now();
  const reason1 = 'waiting for event "go"';
  await checkpoint(t, {
    lease: leaseOf(cr), seq: "1", status: "waiting", waitReason: reason1, waitEvents: ["go"],
    ops: [{ position: 0, kind: "event", name: "go", done: false, result: b64({}), attempts: 1, startedAt: t0 }],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.event_wait" }), ev("run.waiting", { reason: reason1, events: ["go"] })],
  }, "the wait is recorded (done false; its state {} holds no deadline) and the run waits for event go");
  await http(t, "POST", `/v1/namespaces/${NS}/runs/${run.id}/events`, { name: "go", payload: { color: "green" } },
    "a client sends event go: the run becomes pending");
  const cr2 = await claim(t, wfs, "claim (attempt 2): the inbox holds the event");
  const got = cr2.inbox[0];
  const t1 = now();
  const deadline = new Date(Date.parse(t1) + 1000).toISOString();
  const reason2 = `waiting for event "never" until ${deadline.replace(/(\.\d{3})\d*Z$/, "$1Z")}`;
  await checkpoint(t, {
    lease: leaseOf(cr2), seq: "1", status: "waiting", wakeAt: deadline, waitReason: reason2, waitEvents: ["never"],
    consume: [got.seq],
    ops: [{ position: 0, kind: "event", name: "go", done: true, result: got.payload, attempts: 1, startedAt: t1, finishedAt: t1 },
      { position: 1, kind: "event", name: "never", done: false, result: b64({ deadline }), attempts: 1, startedAt: t1 }],
    stream: [ev("run.resumed", { attempt: 2, replayed: 1 }), ev("run.waiting", { reason: reason2, wake_at: deadline, events: ["never"] })],
  }, "go is recorded (result = its payload) and consumed; the wait for never is recorded with its deadline; the run waits for the event or the deadline");
  const cr3 = await claim(t, wfs, "claim (attempt 3) at the deadline");
  const t2 = now();
  const out = { go: unb64(cr3.history[0].result), never: "timeout" };
  await checkpoint(t, {
    lease: leaseOf(cr3), seq: "1", status: "succeeded", output: b64(out), noEvents: ["never"],
    ops: [{ position: 1, kind: "event", name: "never", done: true, attempts: 1, startedAt: t2, finishedAt: t2,
      error: { message: 'timed out waiting for event "never"', type: "event_timeout" } }],
    stream: [ev("run.resumed", { attempt: 3, replayed: 2 }), ev("run.succeeded", { result: out })],
  }, "the wait for never timed out (error type event_timeout), guarded by no_events; the workflow caught it and returned");
  await runStream(t, run.id, "the stream");
  t.write();
}

async function child() {
  const t = new Transcript("child", "A child run",
    "Workflow proto.child, input {\"n\":21}, starts a child run of proto.double with {\"n\":21} and waits for it. " +
    "The child op is recorded with the child's run ID (the parent's ID + \".\" + the op's position) and the child " +
    "group in the same checkpoint, which creates the child. The parent waits for the group's event " +
    "(trellis.group.<position>); when the child ends, the server puts it in the parent's inbox and makes the parent " +
    "pending; the parent reads the child's outcome with ListChildren and consumes the event.");
  const run = await start(t, "proto.child", { n: 21 });
  const cr = await claim(t, ["proto.child"], "claim the parent (attempt 1)");
  const childID = `${run.id}.0`;
  const t0 = now();
  const reason = `waiting for child run ${childID}`;
  await checkpoint(t, {
    lease: leaseOf(cr), seq: "1", status: "waiting", waitReason: reason, waitEvents: ["trellis.group.0"],
    ops: [{ position: 0, kind: "child", name: "proto.double", done: false, result: b64({ run_id: childID }), attempts: 1, startedAt: t0 }],
    children: [{ position: 0, runs: [{ id: childID, workflowId: childID, workflow: "proto.double", queue: QUEUE, input: b64({ n: 21 }) }] }],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.child" }), ev("run.waiting", { reason, events: ["trellis.group.0"] })],
  }, "the child op (done false, result {run_id}) and its group: the child run is created with this checkpoint");
  const cc = await claim(t, ["proto.double"], "claim the child");
  const n = unb64(cc.run.input).n;
  const d = await runStep(() => n * 2);
  await checkpoint(t, {
    lease: leaseOf(cc), seq: "1", status: "succeeded", output: b64(d.result),
    ops: [stepOp(0, "double", d.result, d.startedAt, d.finishedAt)],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.double" }),
      ev("step.completed", { name: "double", attempt: 1, duration_ms: ms(d.startedAt, d.finishedAt) }),
      ev("run.succeeded", { result: d.result })],
  }, "the child succeeds: the server ends its group and wakes the parent");
  const cr2 = await claim(t, ["proto.child"], "claim the parent (attempt 2): its inbox holds trellis.group.0 with the group's counts");
  const kids = await unary(t, "ListChildren", { namespace: NS, parent: run.id, position: "0" }, "the parent reads the children of position 0");
  const t1 = now();
  const result = kids.runs[0].output;
  await checkpoint(t, {
    lease: leaseOf(cr2), seq: "1", status: "succeeded", output: result, consume: [cr2.inbox[0].seq],
    ops: [{ position: 0, kind: "child", name: "proto.double", done: true, result, attempts: 1, startedAt: t1, finishedAt: t1 }],
    stream: [ev("run.resumed", { attempt: 2, replayed: 1 }), ev("run.succeeded", { result: unb64(result) })],
  }, "the child op is done with the child's output; the group event is consumed");
  await runStream(t, run.id, "the parent's stream");
  t.write();
}

async function blocked() {
  const t = new Transcript("blocked", "A run that ends blocked (non-determinism)",
    "Workflow proto.nondeterminism: on its first execution step before, else step after, at the same position; " +
    "then a wait for event next. After the event, the replay asks for step \"after\" where history has step " +
    "\"before\": the worker writes nothing of the replay and ends the run blocked, with an error of type " +
    "non_determinism that names the position. A deploy that fixes the code resumes it (ResumeBlocked).");
  const wfs = ["proto.nondeterminism"];
  const run = await start(t, "proto.nondeterminism", {});
  const cr = await claim(t, wfs, "claim (attempt 1)");
  const s = await runStep(() => "b");
  const t0 = now();
  const reason = 'waiting for event "next"';
  await checkpoint(t, {
    lease: leaseOf(cr), seq: "1", status: "waiting", waitReason: reason, waitEvents: ["next"],
    ops: [stepOp(0, "before", s.result, s.startedAt, s.finishedAt),
      { position: 1, kind: "event", name: "next", done: false, result: b64({}), attempts: 1, startedAt: t0 }],
    stream: [ev("run.started", { attempt: 1, workflow: "proto.nondeterminism" }),
      ev("step.completed", { name: "before", attempt: 1, duration_ms: ms(s.startedAt, s.finishedAt) }),
      ev("run.waiting", { reason, events: ["next"] })],
  }, "step before, then the wait for next: one checkpoint (a wait needs no flush before it)");
  await http(t, "POST", `/v1/namespaces/${NS}/runs/${run.id}/events`, { name: "next" }, "a client sends next");
  const cr2 = await claim(t, wfs, "claim (attempt 2): the replay asks for step after at position 0");
  const error = { message: 'non-determinism at position 0: history has step "before", code asked for step "after"', type: "non_determinism" };
  await checkpoint(t, {
    lease: leaseOf(cr2), seq: "1", status: "blocked", error,
    stream: [ev("run.resumed", { attempt: 2, replayed: 2 }), ev("run.blocked", { error })],
  }, "blocked: no op, no consume; the error names the position, what history has and what the code asked for");
  await http(t, "GET", `/v1/namespaces/${NS}/runs/${run.id}`, undefined, "the run, blocked");
  t.write();
}

for (const f of [threeSteps, retries, durableSleep, eventWait, child, blocked]) {
  await f();
  console.log("captured", f.name);
}
