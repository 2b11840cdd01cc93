"""Replay: the execution of one claimed run, as the Go engine (internal/engine)
does it.

The workflow coroutine is called from the start; each op it asks for takes the
next history position and is matched against the history by kind and name (a
mismatch blocks the run: non_determinism). Ops the history holds are replayed
from it; new ones are executed and queued, and what is queued is checkpointed
before every side effect (a step attempt, a sleep in place) and with the run's
new status when it waits, blocks, is handed back or ends. Lifecycle stream
events are queued with the ops they go with, as the Go engine writes them.

A run stops early (a long wait releases it, non-determinism blocks it, a lost
lease abandons it) by raising _Unwind, a BaseException the workflow's
``except Exception`` does not catch; the executor then saves the state.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import json
import random as _random
import threading
import uuid as _uuid

from . import _wire
from ._wire import b64, dumps, fmt_time, parse_time, utcnow
from .errors import (
    ApprovalTimeout,
    Cancelled,
    ChildFailed,
    DeadlineExceeded,
    EventTimeout,
    Failure,
    MapFailed,
    NonDeterminismError,
    ProtocolError,
    StepError,
    StepTimeout,
)

# unwind kinds (the Go engine's unwindKind)
BLOCKED, SUSPEND, HANDBACK, ABANDON = "blocked", "suspend", "handback", "abandon"
FAIL = "fail"  # an at-most-once step's unknown outcome fails the run (on_unknown="fail_run")
STARTED_MESSAGE = "the attempt started; its outcome was not recorded"

STEP_ABANDON_GRACE = 0.2  # how long a step whose signal is set may take to return


class _Unwind(BaseException):
    """Stops the workflow coroutine; the executor saves the run's state."""


# --- retry policies -------------------------------------------------------------


class Retry:
    """A step's retry policy: at most `max_attempts` attempts (the first counts),
    waiting `initial` seconds before the second, times `factor` each time,
    capped at `max`, each delay varied by ±`jitter` (a fraction). Errors of the
    recorded types in `non_retryable_types` fail the step at once."""

    def __init__(self, max_attempts: int = 3, initial: float = 1.0, factor: float = 2.0, max: float = 60.0,  # noqa: A002
                 jitter: float = 0.1, non_retryable_types=()):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.max_attempts, self.initial, self.factor, self.max, self.jitter = max_attempts, initial, factor, max, jitter
        self.non_retryable_types = tuple(non_retryable_types)
        self._attempts_default = self._backoff_default = False

    def delay(self, n: int) -> float:
        d = self.initial * (max(self.factor, 1.0) ** max(n - 1, 0))
        if self.max and d > self.max:
            d = self.max
        if self.jitter:
            d += d * self.jitter * (2 * _random.random() - 1)
        return max(d, 0.0)

    def with_queue(self, q: dict | None) -> "Retry":
        """The policy with the queue's default retry policy in place of the
        SDK's defaults (ClaimedRun.queue_retry)."""
        if not q or not (self._attempts_default or self._backoff_default):
            return self
        r = Retry(self.max_attempts, self.initial, self.factor, self.max, self.jitter, self.non_retryable_types)
        if self._attempts_default and _wire.as_int(q.get("max_attempts")) > 0:
            r.max_attempts = _wire.as_int(q.get("max_attempts"))
        ib = _wire.parse_duration(q.get("initial_backoff"))
        if self._backoff_default and ib:
            r.initial, r.factor, r.jitter = ib, 2.0, 0.0
            r.max = _wire.parse_duration(q.get("max_backoff")) or 0.0
        return r


def prior_attempts(workflow_attempts, pos: int) -> int:
    """How many attempts of the step at `pos` earlier attempts of the run made
    (workflow retries, the protocol's Run.workflow_attempts): they do not count
    against the step's max_attempts in this one."""
    for a in reversed(workflow_attempts or ()):
        for st in a.get("steps") or ():
            if _wire.as_int(st.get("position")) == pos:
                return _wire.as_int(st.get("attempts"))
    return 0


def retry_wire(r: Retry | None) -> dict | None:
    """A workflow's retry policy as the protocol's RunRetry, sent with the
    checkpoint that fails a run: the store retries the run while the policy
    has attempts left. None for none."""
    if r is None:
        return None
    initial = r.initial if r.initial > 0 else 1.0
    return {"maxAttempts": str(r.max_attempts), "initialBackoff": f"{initial:.9f}s", "factor": max(r.factor, 1.0),
            "maxBackoff": f"{max(r.max or 365 * 86400.0, initial):.9f}s", "jitter": min(max(r.jitter, 0.0), 1.0),
            "nonRetryableTypes": list(r.non_retryable_types)}


def _default_retry() -> Retry:
    r = Retry()
    r._attempts_default = r._backoff_default = True
    return r


DEFAULT_RETRY = _default_retry()


def go_duration(seconds: float) -> str:
    """Formats a duration as Go's time.Duration.String does ("300ms", "1.5s", "2m0s")."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    if ns < 1000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return _trim(ns / 1e3) + "µs"
    if ns < 1_000_000_000:
        return _trim(ns / 1e6) + "ms"
    h, rem = divmod(ns, 3600 * 10**9)
    m, rem = divmod(rem, 60 * 10**9)
    s = _trim(rem / 1e9) + "s"
    if h:
        return f"{h}h{m}m{s}"
    if m:
        return f"{m}m{s}"
    return s


def _trim(x: float) -> str:
    return f"{x:.9f}".rstrip("0").rstrip(".")


def reason_time(t: _dt.datetime) -> str:
    t = t.astimezone(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{t.microsecond // 1000:03d}Z"


def _quote(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def describe(kind: str, name: str) -> str:
    return kind if not name else f"{kind} {_quote(name)}"


def error_info(e: BaseException) -> dict:
    """The recorded form of an exception: {message, type, non_retryable}."""
    if isinstance(e, Failure):
        return e.info()
    info = {"message": str(e) or type(e).__name__, "type": type(e).__name__}
    return info


def _info_wire(info: dict | None) -> dict | None:
    if info is None:
        return None
    d = {"message": info.get("message", "")}
    if info.get("type"):
        d["type"] = info["type"]
    if info.get("non_retryable"):
        d["nonRetryable"] = True
    return d


# --- ops ----------------------------------------------------------------------


class Op:
    """One history entry (store.Op)."""

    __slots__ = ("position", "kind", "name", "done", "result", "error", "attempts", "started_at", "finished_at",
                 "attempt_started_at", "ended", "last_attempt")

    def __init__(self, position, kind, name="", done=False, result=None, error=None, attempts=1, started_at=None,
                 finished_at=None, attempt_started_at=None):
        self.position, self.kind, self.name, self.done = position, kind, name, done
        self.result, self.error, self.attempts = result, error, attempts
        self.started_at, self.finished_at, self.attempt_started_at = started_at, finished_at, attempt_started_at
        # (message, type) of the last attempt when the server recorded it lost
        # or timed out (its worker never reported it): it counts against the
        # step's attempts, and the next is numbered after it.
        self.ended = None
        # (attempt, outcome, started_at) of the last attempt row read with the
        # op (its attempt log), or None: an at-most-once step's replay needs it.
        self.last_attempt = None

    @classmethod
    def from_wire(cls, d: dict) -> "Op":
        op = cls(_wire.as_int(d.get("position")), d.get("kind", ""), d.get("name", ""), bool(d.get("done")),
                 _wire.unb64(d.get("result")), d.get("error"), _wire.as_int(d.get("attempts"), 1),
                 parse_time(d.get("started_at")), parse_time(d.get("finished_at")))
        log = d.get("attempt_log") or d.get("attemptLog") or []
        if log:
            a = log[-1]
            if _wire.as_int(a.get("attempt")) == op.attempts and a.get("outcome") in ("lost", "timed_out"):
                e = a.get("error") or {}
                op.ended = (e.get("message") or f"attempt {a.get('outcome')}", e.get("type") or "")
            op.last_attempt = (_wire.as_int(a.get("attempt")), a.get("outcome") or "",
                               parse_time(a.get("started_at") or a.get("startedAt")))
        return op

    def unknown_attempt(self, at_most_once: bool):
        """The last attempt of this step op in progress when its outcome is
        unknown: it started and never recorded its end ("started"), or, for an
        at-most-once step, its lease expired while it ran ("lost") or the server
        ended it after its timeout ("timed_out"); None otherwise. Such a step is
        not run again (docs/worker-protocol.md, "At-most-once steps")."""
        a = self.last_attempt
        if self.done or a is None or a[0] != self.attempts:
            return None
        if a[1] == "started" or (at_most_once and a[1] in ("lost", "timed_out")):
            return a
        return None

    def outcome_unknown(self) -> bool:
        return self.kind == "step" and self.done and bool(self.error) and self.error.get("type") == "step_outcome_unknown"

    def wire(self) -> dict:
        d = {"position": self.position, "kind": self.kind, "attempts": self.attempts}
        if self.name:
            d["name"] = self.name
        if self.done:
            d["done"] = True
        if self.result is not None:
            d["result"] = b64(self.result)
        if self.error is not None:
            d["error"] = _info_wire(self.error)
        if self.started_at is not None:
            d["startedAt"] = fmt_time(self.started_at)
        if self.finished_at is not None:
            d["finishedAt"] = fmt_time(self.finished_at)
        if self.attempt_started_at is not None:
            d["attemptStartedAt"] = fmt_time(self.attempt_started_at)
        return d


def _lifecycle(name: str, v) -> dict:
    return {"name": name, "data": dumps(v)}


def final_event(status: str, output: bytes | None, err: dict | None) -> dict:
    """run.succeeded {"result"}, run.failed / run.cancelled {"error"} (store.FinalEvent)."""
    if status == "succeeded":
        return {"name": "run.succeeded", "data": b'{"result":' + (output if output is not None else b"null") + b"}"}
    name = "run.cancelled" if status == "cancelled" else "run.failed"
    return _lifecycle(name, {"error": err})


class _Queued:
    """Writes waiting for the run's next checkpoint."""

    __slots__ = ("ops", "atts", "kv", "consume", "no_events", "children", "approvals", "expire", "stream")

    def __init__(self):
        self.ops, self.atts, self.kv, self.consume, self.no_events = [], [], [], [], []
        self.children, self.approvals, self.expire, self.stream = [], [], [], []

    def empty(self) -> bool:
        return not (self.ops or self.atts or self.kv or self.consume or self.no_events or self.children
                    or self.approvals or self.expire or self.stream)


# --- the run ------------------------------------------------------------------


class StepInfo:
    """What a step function is given: the run, the step, its position and
    attempt (1-based), an idempotency key (``<run id>/<position>``) and
    `cancelled`, a threading.Event set when the attempt must stop (timeout,
    cancellation, lost lease). An async step is also cancelled (asyncio)."""

    __slots__ = ("run_id", "step", "position", "attempt", "idempotency_key", "cancelled")

    def __init__(self, run_id, step, position, attempt):
        self.run_id, self.step, self.position, self.attempt = run_id, step, position, attempt
        self.idempotency_key = f"{run_id}/{position}"
        self.cancelled = threading.Event()


class _Running:
    """A step attempt under way: its StepInfo, whether it is detached (deaf to
    the run's cancellation), and what wakes its watcher (_StepCall._watch)."""

    __slots__ = ("info", "detached", "wake")

    def __init__(self, info: StepInfo, detached: bool):
        self.info, self.detached, self.wake = info, detached, None

    def signal(self):
        self.info.cancelled.set()
        if self.wake is not None:
            self.wake()


def _arity(fn) -> int:
    """The positional parameters fn requires: one with a default (the loop
    idiom `lambda i=i: ...`) is left to it, as JavaScript's fn.length does."""
    code = getattr(fn, "__code__", None)
    if code is not None and not inspect.ismethod(fn):
        return code.co_argcount - len(getattr(fn, "__defaults__", None) or ())
    try:
        return len([p for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty])
    except (TypeError, ValueError):
        return 1


class RunState:
    """One claimed run being executed (the Go engine's RunState)."""

    def __init__(self, host, claimed: dict):
        self.host = host
        run = claimed["run"]
        self.run = run
        self.run_id = run["id"]
        self.namespace = run.get("namespace", "default")
        self.attempts = _wire.as_int(run.get("attempts"), 1)
        # Workflow retries: the run's attempt of its workflow function, and the
        # failed attempts a retry followed (their steps get a fresh budget).
        self.workflow_attempt = _wire.as_int(run.get("workflow_attempt"), 1) or 1
        self.workflow_attempts = run.get("workflow_attempts") or []
        self.deadline = parse_time(run.get("deadline"))
        self.lease = {"namespace": self.namespace, "runId": self.run_id, "token": str(claimed.get("lease_token", "0")),
                      "queue": run.get("queue", ""), "secret": claimed.get("lease_secret", "")}
        self.queue_retry = claimed.get("queue_retry")
        # The run's payload limit: the worker's, or its queue's when lower
        # (ClaimedRun.payload_limit, docs/payloads.md); limit_of says which.
        qlimit = _wire.as_int(claimed.get("payload_limit"), 0)
        own = host.max_payload_bytes if host is not None else 2 << 20  # (no host: the unit tests')
        self.limit, self.limit_of = own, ""
        if 0 < qlimit < own:
            self.limit, self.limit_of = qlimit, f"queue {run.get('queue', '')!r} "
        # When the lease expires at the earliest, as the worker knows it: the
        # claim's expiry, then each extension's send time plus the lease.
        self.lease_expires = parse_time(claimed.get("lease_expires_at"))
        hist = claimed.get("history") or ()
        self.history: dict[int, Op] = {}
        self.last_pos = -1
        for d in hist:
            op = Op.from_wire(d)
            self.history[op.position] = op
            self.last_pos = max(self.last_pos, op.position)
        self.replayed = len(hist)
        self.inbox = [(_wire.as_int(e.get("seq")), e.get("name", ""), _wire.unb64(e.get("payload")))
                      for e in claimed.get("inbox") or ()]
        self.consumed: set[int] = set()
        self.next_pos = 0
        self.pending = _Queued()
        self.open_approvals: set[str] = set()
        self.kv: dict[str, bytes] = {}
        self.cancel_seen = self.deadline_hit = False
        self.start_pending = True
        self.unwind = None
        self.unwind_err: BaseException | None = None
        self.wake_at: _dt.datetime | None = None
        self.wait_events: list[str] = []
        self.wait_reason = ""
        self.ck_seq = 0
        self.ck_lock = asyncio.Lock()
        # Tasks of the workflow's own (asyncio.gather of steps) executing an op:
        # the run's state is saved once they are over, as Go waits for async steps.
        self.main_task: asyncio.Task | None = None
        self.inflight: set = set()
        # Signals from the worker: stop (lease lost: "lost"; worker stopping:
        # "shutdown") and the run's cancellation.
        self.stopped: str | None = None
        self.stop_evt = asyncio.Event()
        self.cancel_evt = asyncio.Event()
        self.current_step: tuple | None = None  # (name, attempt, since) for heartbeats
        # The step attempts under way (several with asyncio.gather): each is
        # told of a cancellation (unless detached) and of a stop.
        self.attempts_running: set[_Running] = set()
        if run.get("cancel_requested"):
            self.cancel_evt.set()

    # -- signals from the worker --

    def request_cancel(self):
        if not self.cancel_evt.is_set():
            self.cancel_evt.set()
            for a in list(self.attempts_running):
                if not a.detached:
                    a.signal()

    def stop(self, why: str):
        """The lease is lost ("lost") or the worker stops ("shutdown")."""
        if self.stopped != "lost":
            self.stopped = why
        self.stop_evt.set()
        for a in list(self.attempts_running):
            a.signal()

    # -- positions --

    def next(self, kind: str, name: str):
        pos = self.next_pos
        self.next_pos += 1
        rec = self.history.get(pos)
        if rec is not None and (rec.kind != kind or rec.name != name):
            self.block(NonDeterminismError(pos, describe(rec.kind, rec.name), describe(kind, name)))
        return pos, rec

    def block(self, err: BaseException):
        self.request_unwind(BLOCKED, err)
        raise _Unwind()

    def request_unwind(self, kind, err=None, wake_at=None, reason=""):
        if self.unwind is None or (kind == ABANDON and self.unwind != ABANDON) or \
                (kind == FAIL and self.unwind in (SUSPEND, HANDBACK)):  # saved with the failure instead
            self.unwind, self.unwind_err, self.wake_at, self.wait_reason = kind, err, wake_at, reason
        elif kind == SUSPEND and self.unwind == SUSPEND:
            if wake_at is not None and (self.wake_at is None or wake_at < self.wake_at):
                self.wake_at, self.wait_reason = wake_at, reason

    def check_stopped(self):
        if self.stopped:
            self.request_unwind(ABANDON if self.stopped == "lost" else HANDBACK)
            raise _Unwind()

    def check_unwind(self):
        if self.stopped:
            self.request_unwind(ABANDON if self.stopped == "lost" else HANDBACK)
        if self.unwind is not None:
            raise _Unwind()

    def interrupted(self, detached: bool) -> BaseException | None:
        if self.deadline is not None and utcnow() >= self.deadline:
            self.deadline_hit = True
            return DeadlineExceeded()
        if not detached and self.cancel_evt.is_set():
            self.cancel_seen = True
            return Cancelled()
        return None

    # -- queueing and checkpoints --

    def record(self, op: Op, kv: dict | None = None):
        self.pending.ops.append(op)
        if kv is not None:
            self.pending.kv.append(kv)

    def record_wait(self, pos, kind, name, done, result, err=None) -> Op:
        at = utcnow()
        op = Op(pos, kind, name, done, result, None if err is None else error_info(err), 1, at, at if done else None)
        self.record(op)
        return op

    def record_internal(self, pos, kind, name, b: bytes):
        at = utcnow()
        self.record(Op(pos, kind, name, True, b, None, 1, at, at))

    def only_derivable(self, pending_timers: bool) -> bool:
        q = self.pending
        if q.atts or q.kv or q.no_events or q.children or q.approvals or q.expire or q.stream:
            return False
        for op in q.ops:
            if op.kind == "timer" and (op.done or pending_timers):
                continue
            if op.kind == "event" and op.done and op.error is None:
                continue
            return False
        return True

    async def flush(self):
        if self.only_derivable(False):
            return
        await self._flush_or_unwind()

    async def _flush_or_unwind(self):
        try:
            await self.checkpoint({"status": "running"}, force=False)
        except (ProtocolError, OSError, asyncio.TimeoutError) as e:
            self.request_unwind(HANDBACK if getattr(e, "reason", "") == "CONFLICT" else ABANDON, e)
            raise _Unwind() from None

    def _add_started(self, q: _Queued, status: str):
        if not self.start_pending or (status == "pending" and not q.ops):
            return
        self.start_pending = False
        if self.replayed == 0:
            ev = _lifecycle("run.started", {"attempt": self.attempts, "workflow": self.run.get("workflow", "")})
        else:
            ev = _lifecycle("run.resumed", {"attempt": self.attempts, "replayed": self.replayed})
        q.stream.insert(0, ev)

    async def checkpoint(self, p: dict, force: bool) -> dict:
        """Saves the queued writes with the state p (wire fields: status,
        output, error, waitReason...). Raises ProtocolError when refused."""
        # One checkpoint at a time per run, in seq order (steps running in
        # parallel, asyncio.gather, each flush): the next waits for the answer.
        async with self.ck_lock:
            return await self._checkpoint(p, force)

    async def _checkpoint(self, p: dict, force: bool) -> dict:
        q, self.pending = self.pending, _Queued()
        if not force and q.empty():
            return {}
        self.ck_seq += 1
        self._add_started(q, p["status"])
        item = {"lease": self.lease, "seq": self.ck_seq}
        if q.ops:
            # A position queued twice (a wait created and settled, a step's failed
            # attempt and its end) is written once, as it was last queued.
            last = {}
            for op in q.ops:
                last[op.position] = op
            ops = q.ops if len(last) == len(q.ops) else [op for op in q.ops if last[op.position] is op]
            item["ops"] = [op.wire() for op in ops]
        if q.atts:
            item["attempts"] = q.atts
        if q.kv:
            item["kv"] = q.kv
        if q.consume:
            item["consume"] = q.consume
        if q.no_events:
            item["noEvents"] = q.no_events
        if q.children:
            item["children"] = q.children
        if q.approvals:
            item["approvals"] = q.approvals
        if q.expire or p.get("expireApprovals"):
            item["expireApprovals"] = q.expire + p.pop("expireApprovals", [])
        stream = q.stream + p.pop("stream", [])
        if stream:
            item["stream"] = [{"name": s["name"], "data": b64(s["data"])} for s in stream]
        item.update(p)
        try:
            res = await self.host.checkpoint(item)
        except ProtocolError as e:
            # Fenced: another worker has the run. Its step attempts under way
            # are told and none starts, as when a heartbeat reports it lost.
            if e.reason == "LEASE_LOST":
                self.stop("lost")
            raise
        if res.get("cancel_requested"):
            self.request_cancel()
        return res

    # -- events --

    def take_event(self, name: str) -> tuple | None:
        """Consumes the next event `name` of the inbox: (seq, name, payload),
        the payload None when the event has none; None when there is no such
        event."""
        for e in self.inbox:
            if e[1] == name and e[0] not in self.consumed:
                self.consumed.add(e[0])
                self.pending.consume.append(e[0])
                return e
        return None

    # -- waiting --

    def suspend(self, wake_at, events, reason):
        if self.unwind is None or self.unwind == SUSPEND:
            self.wait_events.extend(events)
        self.request_unwind(SUSPEND, None, wake_at, reason)
        raise _Unwind()

    async def sleep(self, seconds: float, detached: bool, unwind: bool = True):
        """Waits in place, or until the run is cancelled (unless detached) or
        stopped; then stops the caller if the run unwinds (with unwind=False, a
        step's backoff, only if it is stopped)."""
        if seconds > 0:
            evs = [self.stop_evt] if detached else [self.stop_evt, self.cancel_evt]
            await _wait_events(evs, seconds)
        if unwind:
            self.check_unwind()
        else:
            self.check_stopped()

    async def await_any(self, ws, detached: bool) -> int:
        for i, w in enumerate(ws):
            if w.settled():
                return i
        while True:
            err = self.interrupted(detached)
            if err is not None:
                raise err
            for i, w in enumerate(ws):
                if await w.try_():
                    return i
            wake_at, events, reasons = None, [], []
            for w in ws:
                at, evs, r = w.needs()
                if at is not None and (wake_at is None or at < wake_at):
                    wake_at = at
                events.extend(evs)
                if r:
                    reasons.append(r)
            reason = reasons[0] if len(reasons) == 1 else "first of " + json.dumps(reasons, ensure_ascii=False,
                                                                                  separators=(",", ":"))
            if not await self._wait_in_place(wake_at, events, detached):
                self.suspend(wake_at, events, reason)

    async def _wait_in_place(self, wake_at, events, detached) -> bool:
        if wake_at is None or events:
            return False
        if (wake_at - utcnow()).total_seconds() > self.host.max_inline_backoff:
            return False
        if not self.only_derivable(True):
            await self._flush_or_unwind()
        await self.sleep((wake_at - utcnow()).total_seconds(), detached)
        return True

    # -- saving the run's state --

    async def save_unwind(self) -> str:
        kind, uerr = self.unwind, self.unwind_err
        p: dict = {}
        if kind == BLOCKED:
            info = {"message": str(uerr), "type": "non_determinism"}
            p = {"status": "blocked", "error": _info_wire(info), "stream": [_lifecycle("run.blocked", {"error": info})]}
            self.host.log(f"run {self.run_id} blocked: {uerr}")
        elif kind == SUSPEND:
            wake_at = self.wake_at
            if self.deadline is not None and (wake_at is None or self.deadline < wake_at):
                wake_at = self.deadline
            events = sorted(set(self.wait_events))
            ev = {"reason": self.wait_reason}
            p = {"status": "waiting", "waitReason": self.wait_reason}
            if wake_at is not None:
                ev["wake_at"] = fmt_time(wake_at)
                p["wakeAt"] = fmt_time(wake_at)
            if events:
                ev["events"] = events
                p["waitEvents"] = events
            p["stream"] = [_lifecycle("run.waiting", ev)]
        elif kind == HANDBACK:
            p = {"status": "pending"}
        else:
            # Abandoned: nothing is saved; the lease lapses and a claim resumes the run.
            self.host.log(f"abandoning run {self.run_id}: {uerr if uerr is not None else self.stopped or 'lease lost'}")
            return ""
        try:
            await self.checkpoint(p, force=True)
        except ProtocolError as e:
            if e.reason == "CONFLICT":
                return "pending" if await self._hand_back() else ""
            self.host.log(f"run {self.run_id}: saving status {p['status']}: {e}")
            return ""
        except (OSError, asyncio.TimeoutError) as e:
            self.host.log(f"run {self.run_id}: saving status {p['status']}: {e}")
            return ""
        return p["status"]

    async def _hand_back(self) -> bool:
        try:
            await self.checkpoint({"status": "pending"}, force=True)
            return True
        except (ProtocolError, OSError, asyncio.TimeoutError) as e:
            self.host.log(f"run {self.run_id}: handing back: {e}")
            return False

    async def finish(self, out: bytes | None, err: BaseException | None) -> str:
        p: dict = {"status": "succeeded"}
        info = None
        if self.deadline_hit:
            info = error_info(DeadlineExceeded())
            p["status"] = "failed"
            out = None
        elif err is not None and self.cancel_evt.is_set() and (self.cancel_seen or isinstance(err, Cancelled)):
            # (cancelled only when the run's cancellation was requested: the
            # server refuses it otherwise, and the run fails with the error)
            info = error_info(err)
            info["type"] = "cancelled"
            p["status"] = "cancelled"
        elif err is not None:
            info = error_info(err)
            p["status"] = "failed"
        elif len(out) > self.limit:
            info = {"message": f"payload too large: output is {len(out)} bytes ({self.limit_of}limit {self.limit})",
                    "type": "payload_too_large", "non_retryable": True}
            p["status"], out = "failed", None
        if p["status"] == "succeeded":
            p["output"] = b64(out)
        else:
            p["error"] = _info_wire(info)
            out = None
        if self.open_approvals:
            p["expireApprovals"] = sorted(self.open_approvals)
        p["stream"] = [final_event(p["status"], out, info)]
        status = p["status"]
        if status == "failed" and getattr(self.host, "workflow_retry", None) is not None:
            wr = self.host.workflow_retry(self.run.get("workflow", ""))
            if wr is not None:
                p["retry"] = wr
        try:
            res = await self.checkpoint(p, force=True)
            if res.get("retry_at"):
                return "waiting"  # the store made the failure a workflow retry
        except ProtocolError as e:
            if e.reason == "CONFLICT":
                await self._hand_back()
                return ""
            self.host.log(f"run {self.run_id}: saving outcome {status}: {e}")
            return ""
        except (OSError, asyncio.TimeoutError) as e:
            self.host.log(f"run {self.run_id}: saving outcome {status}: {e}")
            return ""
        return status


async def _wait_events(events, timeout=None):
    """Waits until one of the asyncio events is set, or timeout seconds."""
    for e in events:
        if e.is_set():
            return
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


# --- steps --------------------------------------------------------------------


class _StepCall:
    """Executes one step's attempts (the Go engine's stepCall)."""

    def __init__(self, rs: RunState, name, pos, rec, fn, retry: Retry, timeout, detached,
                 at_most_once=False, on_unknown="error"):
        self.rs, self.name, self.pos, self.fn, self.timeout, self.detached = rs, name, pos, fn, timeout, detached
        self.retry = retry.with_queue(rs.queue_retry)
        self.attempt = rec.attempts if rec is not None else 0
        # attempts made in earlier attempts of the run (workflow retries) do not count
        self.prior = (min(prior_attempts(rs.workflow_attempts, pos), rec.attempts)
                      if rec is not None and not rec.done else 0)
        self.started = rec.started_at if rec is not None and rec.started_at else utcnow()
        self.ended = rec.ended if rec is not None else None
        self.attempt_start = None
        self.fail_reported = False
        self.at_most_once, self.on_unknown = at_most_once, on_unknown
        self.unknown = rec.unknown_attempt(at_most_once) if rec is not None else None

    def op(self) -> Op:
        # (0 attempts for a step that ends before its first one, as Go's)
        return Op(self.pos, "step", self.name, False, None, None, self.attempt, self.started)

    def _duration_ms(self, end) -> float:
        if self.attempt_start is None:
            return 0
        return round((end - self.attempt_start).total_seconds() * 1000, 3)

    def _event(self, name, end, err=None, final=False):
        d = {"name": self.name, "attempt": self.attempt, "duration_ms": self._duration_ms(end)}
        if err is not None:
            d["error"] = err
        if final:
            d["final"] = True
        return _lifecycle(name, d)

    async def execute(self) -> Op:
        rs = self.rs
        if self.unknown is not None:
            return self.outcome_unknown()
        if self.ended is not None and (self.attempt >= self.retry.max_attempts
                                       or self.ended[1] in self.retry.non_retryable_types):
            # its last attempt was lost or timed out and may not be retried: the
            # step fails with its error (the Go engine's endedFinal)
            return self.finish(None, StepError(self.ended[0], self.ended[1]))
        while True:
            # Only the lease and the worker stop a step under way: another op's
            # unwind (a sibling's wait) lets it finish and record its outcome.
            rs.check_stopped()
            err = rs.interrupted(self.detached)
            if err is not None:
                return self.finish(None, err)
            # A lease that expired while the worker could not heartbeat may be
            # another worker's by now: no attempt starts on it. Checked last,
            # after the flush (a process frozen while its checkpoint was
            # answered wakes with the lease expired); an at-most-once
            # attempt's start is itself a checkpoint the server fences.
            if self.at_most_once:
                await self._abandon_unless_held(rs)
                op = await self.begin()
                if op is not None:
                    return op
            else:
                await rs.flush()
                err = rs.interrupted(self.detached)
                if err is not None:
                    return self.finish(None, err)
                await self._abandon_unless_held(rs)
                self.attempt += 1
                self.attempt_start = utcnow()
            t0 = self.attempt_start
            rs.current_step = (self.name, self.attempt, t0, self.pos, self.timeout)
            try:
                ok, v = await self._attempt_once()
            finally:
                rs.current_step = None
            rs.check_stopped()
            if ok:
                try:
                    res = dumps(v)
                except (TypeError, ValueError) as e:
                    ok, v = False, StepError(f"encoding the result of step {self.name!r}: {e}", "encoding")
                else:
                    if len(res) > rs.limit:
                        ok, v = False, StepError(
                            f"payload too large: {len(res)} bytes ({rs.limit_of}limit {rs.limit})",
                            "payload_too_large", non_retryable=True)
                    else:
                        return self.finish(res, None)
            op = await self.failed(v, t0)
            if op is not None:
                return op

    @staticmethod
    async def _abandon_unless_held(rs):
        """Unwinds the run (abandoned) when its lease may be another
        worker's: the worker's lease_held (a clock read while the lease is
        known to last, else one ExtendLeases)."""
        held = getattr(rs.host, "lease_held", None)
        if held is not None and not await held(rs):
            rs.request_unwind(ABANDON)
            raise _Unwind()

    async def begin(self):
        """Starts the next attempt of an at-most-once step: a checkpoint (with
        what the run queued) of the op in progress at the new attempt and its
        attempt row of outcome "started", before the function runs. The
        attempt's end replaces the row. Returns the op, done, when the step ends
        without the attempt (a cancellation learnt from the checkpoint)."""
        rs = self.rs
        self.attempt += 1
        t0 = utcnow()
        self.attempt_start = t0
        att = {"position": self.pos, "attempt": self.attempt, "outcome": "started",
               "error": {"message": STARTED_MESSAGE}, "startedAt": fmt_time(t0), "finishedAt": fmt_time(t0)}
        rs.pending.ops.append(self.op())
        rs.pending.atts.append(att)
        await rs._flush_or_unwind()
        err = rs.interrupted(self.detached)
        if err is None:
            return None
        end = utcnow()
        info = error_info(err)
        rs.pending.ops.append(self.op())
        rs.pending.atts.append({**att, "outcome": "failed", "error": _info_wire(info), "finishedAt": fmt_time(end)})
        rs.pending.stream.append(self._event("step.failed", end, info, True))
        self.fail_reported = True
        return self.finish(None, err)

    def outcome_unknown(self) -> Op:
        """Ends a step whose last attempt's outcome is unknown without running
        it again: done with an error of type step_outcome_unknown (made of what
        history holds, so a replay that redoes it records the same), and, with
        on_unknown="fail_run", the run failed with it."""
        n, outcome, started = self.unknown
        why = {"lost": "its lease expired while it ran", "timed_out": "it was ended after its timeout"}.get(
            outcome, "its worker stopped before recording how it ended")
        at = fmt_time(started) if started is not None else "an unknown time"
        err = StepError(f"step outcome unknown: attempt {n} of at-most-once step {_quote(self.name)} started at {at} "
                        f"and {why}; it is not run again", "step_outcome_unknown", non_retryable=True)
        op = self.finish(None, err)
        if self.at_most_once and self.on_unknown == "fail_run":
            self.rs.request_unwind(FAIL, err)
            raise _Unwind()
        return op

    async def _attempt_once(self):
        """Runs one attempt: (True, value) or (False, exception)."""
        rs = self.rs
        info = StepInfo(rs.run_id, self.name, self.pos, self.attempt)
        running = _Running(info, self.detached)
        rs.attempts_running.add(running)
        fn = self.fn
        try:
            args = (info,) if _arity(fn) >= 1 else ()
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
                fut = asyncio.ensure_future(fn(*args))
            else:
                loop = asyncio.get_running_loop()
                fut = loop.run_in_executor(rs.host.step_pool, _call_sync, rs, loop, fn, args)
            return await self._watch(fut, running)
        finally:
            rs.attempts_running.discard(running)

    async def _watch(self, fut, running: _Running):
        """Waits for the attempt's outcome, or for what must stop it: its
        timeout, the run's deadline, cancellation (unless detached), the
        worker's stop. One future and a timer, woken by callbacks: no task per
        signal."""
        rs = self.rs
        timeout = self.timeout
        if rs.deadline is not None:
            left = (rs.deadline - utcnow()).total_seconds()
            if timeout is None or left < timeout:
                timeout = max(left, 0)
        cause = None
        if rs.stop_evt.is_set() or (not self.detached and rs.cancel_evt.is_set()):
            cause = self._cause()
        elif not fut.done():
            loop = asyncio.get_running_loop()
            woken = loop.create_future()

            def wake(*_):
                if not woken.done():
                    woken.set_result(None)

            fut.add_done_callback(wake)
            timer = loop.call_later(timeout, wake) if timeout is not None else None
            running.wake = wake
            try:
                await woken
            finally:
                running.wake = None
                if timer is not None:
                    timer.cancel()
            if not fut.done():
                cause = self._cause()
        if cause is not None:
            running.info.cancelled.set()
            if isinstance(fut, asyncio.Task):
                fut.cancel()
            await asyncio.wait([fut], timeout=STEP_ABANDON_GRACE)
            if not fut.done():
                return False, cause
        try:
            return True, fut.result()
        except asyncio.CancelledError:
            return False, cause or Cancelled()
        except Exception as e:  # noqa: BLE001 - the step's failure, recorded
            return False, cause if cause is not None else e

    def _cause(self):
        rs = self.rs
        if rs.stop_evt.is_set():
            return Cancelled("the worker stopped the step")
        if not self.detached and rs.cancel_evt.is_set():
            return Cancelled()
        if rs.deadline is not None and utcnow() >= rs.deadline:
            return DeadlineExceeded()
        return StepTimeout(f"step attempt timed out after {go_duration(self.timeout or 0)}")

    def _retryable(self, e: BaseException) -> bool:
        if self.attempt - self.prior >= self.retry.max_attempts:
            return False
        if isinstance(e, (Cancelled, DeadlineExceeded)) or getattr(e, "non_retryable", False):
            return False
        return error_info(e).get("type", "") not in self.retry.non_retryable_types

    async def failed(self, e: BaseException, t0):
        rs = self.rs
        end = utcnow()
        info = error_info(e)
        retry = self._retryable(e)
        rs.pending.ops.append(self.op())
        rs.pending.atts.append({"position": self.pos, "attempt": self.attempt, "error": _info_wire(info),
                                "startedAt": fmt_time(t0), "finishedAt": fmt_time(end)})
        rs.pending.stream.append(self._event("step.failed", end, info, not retry))
        if not retry:
            self.fail_reported = True
            return self.finish(None, e)
        delay = self.retry.delay(self.attempt)
        if delay > rs.host.max_inline_backoff:
            wake = utcnow() + _dt.timedelta(seconds=delay)
            rs.request_unwind(SUSPEND, None, wake,
                              f"retry backoff: step {_quote(self.name)} attempt {self.attempt + 1} at {reason_time(wake)}")
            raise _Unwind()
        await rs.sleep(delay, self.detached, unwind=False)
        return None

    def finish(self, result: bytes | None, err: BaseException | None) -> Op:
        rs = self.rs
        at = utcnow()
        op = self.op()
        op.done, op.result, op.finished_at = True, result, at
        ev = None
        if err is not None:
            op.error = error_info(err)
            if not self.fail_reported:
                ev = self._event("step.failed", at, op.error, True)
        else:
            ev = self._event("step.completed", at)
            # an at-most-once step's succeeded row replaces its started row from its first attempt on
            if self.attempt >= (1 if self.at_most_once else 2) and self.attempt_start is not None:
                op.attempt_started_at = self.attempt_start
        rs.pending.ops.append(op)
        if ev is not None:
            rs.pending.stream.append(ev)
        return op


# _NOT_STARTED is what _call_sync returns for an attempt it did not start.
_NOT_STARTED = object()

# _QUEUED_LEASE_TIMEOUT bounds a step thread's wait for the server's answer
# about a lease (see _call_sync).
_QUEUED_LEASE_TIMEOUT = 60.0


def _call_sync(rs, loop, fn, args):
    """Runs a step function on a step thread. The lease was checked when the
    attempt was queued; an attempt that waited in the step threads' queue past
    the lease's known expiry (the process was stopped meanwhile, or the
    threads were busy for a lease) asks the server first, as the loop does
    (the worker's lease_held): a lease that may be another worker's stops the
    run, and the function does not start."""
    held = getattr(rs.host, "lease_held", None)
    exp = rs.lease_expires
    if held is not None and exp is not None and utcnow() >= exp:
        try:
            # lease_held stops the run itself when the lease is lost
            if not asyncio.run_coroutine_threadsafe(held(rs), loop).result(_QUEUED_LEASE_TIMEOUT):
                return _NOT_STARTED
        except Exception:  # noqa: BLE001 - no answer: taken as lost, as lease_held does
            loop.call_soon_threadsafe(rs.stop, "lost")  # before this result reaches the loop
            return _NOT_STARTED
    return fn(*args)


def raise_op_error(op: Op):
    """Raises the exception a failed op's recorded error stands for."""
    e = op.error or {}
    msg, typ, nr = e.get("message", ""), e.get("type", ""), bool(e.get("non_retryable"))
    if typ == "cancelled":
        raise Cancelled(msg)
    if typ == "deadline_exceeded":
        raise DeadlineExceeded(msg)
    if typ == "step_timeout":
        raise StepTimeout(msg, typ, nr)
    raise StepError(msg, typ, nr)


def decode(b: bytes | None):
    return None if b is None else json.loads(b)


# --- waiters --------------------------------------------------------------------


class Waitable:
    """Something a workflow can wait for without holding a worker: await it,
    or pass it to Context.select."""

    _rs: RunState
    _detached = False

    def __await__(self):
        return self._wait().__await__()

    async def _wait(self):
        await self._rs.await_any([self], self._detached)
        return self.value()

    def settled(self) -> bool:
        raise NotImplementedError

    async def try_(self) -> bool:
        raise NotImplementedError

    def needs(self):
        raise NotImplementedError

    def value(self):
        raise NotImplementedError


class Timer(Waitable):
    """A durable timer, due at a time recorded when it was created."""

    def __init__(self, rs: RunState, detached: bool, seconds: float | None = None, at: _dt.datetime | None = None):
        rs.check_unwind()
        self._rs, self._detached = rs, detached
        pos, rec = rs.next("timer", "")
        self._pos = pos
        if rec is not None:
            try:
                self.at = parse_time(json.loads(rec.result))
            except (TypeError, ValueError):
                rs.block(NonDeterminismError(pos, "timer without a due time", "timer"))
            self._done = rec.done
            return
        if at is None:
            at = utcnow() + _dt.timedelta(seconds=seconds or 0)
        self.at = at.astimezone(_dt.timezone.utc)
        self._done = False
        rs.record_wait(pos, "timer", "", False, dumps(fmt_time(self.at)))

    def settled(self):
        return self._done

    async def try_(self):
        if utcnow() < self.at:
            return False
        self._rs.record_wait(self._pos, "timer", "", True, dumps(fmt_time(self.at)))
        self._done = True
        return True

    def needs(self):
        return self.at, [], "sleeping until " + reason_time(self.at)

    def value(self):
        return None


class EventWait(Waitable):
    """A wait for the next event of one name sent to the run; its value is the
    event's payload. A timeout above zero ends it with EventTimeout."""

    def __init__(self, rs: RunState, detached: bool, name: str, timeout: float | None):
        rs.check_unwind()
        self._rs, self._detached, self.name = rs, detached, name
        pos, rec = rs.next("event", name)
        self._pos, self.op, self.deadline = pos, None, None
        if rec is not None and rec.done:
            self.op = rec
        elif rec is not None:
            try:
                st = json.loads(rec.result or b"{}")
                self.deadline = parse_time(st.get("deadline"))
            except (ValueError, AttributeError):
                rs.block(NonDeterminismError(pos, describe(rec.kind, rec.name) + " with unreadable state",
                                             describe("event", name)))
        else:
            st = {}
            if timeout:
                self.deadline = utcnow() + _dt.timedelta(seconds=timeout)
                st["deadline"] = fmt_time(self.deadline)
            rs.record_wait(pos, "event", name, False, dumps(st))

    def settled(self):
        return self.op is not None

    async def try_(self):
        rs = self._rs
        e = rs.take_event(self.name)
        if e is not None:
            # An event without a payload is recorded without a result, as Go does.
            self.op = rs.record_wait(self._pos, "event", self.name, True, e[2])
            return True
        if self.deadline is not None and utcnow() >= self.deadline:
            rs.pending.no_events.append(self.name)
            self.op = rs.record_wait(self._pos, "event", self.name, True, None,
                                     EventTimeout(f"timed out waiting for event {_quote(self.name)}"))
            return True
        return False

    def needs(self):
        reason = f"waiting for event {_quote(self.name)}"
        if self.deadline is not None:
            reason += " until " + reason_time(self.deadline)
        return self.deadline, [self.name], reason

    def value(self):
        if self.op.error:
            raise EventTimeout(self.op.error.get("message", ""), self.op.error.get("type") or "event_timeout")
        return decode(self.op.result)


def approval_id(run_id: str, pos: int) -> str:
    return f"{run_id}.approval.{pos}"


class ApprovalWait(Waitable):
    """An approval request of the run; its value is the decision:
    {"approved", "principal", "comment", "decided_at"}."""

    def __init__(self, rs: RunState, detached: bool, name: str, approvers=(), subject="", details=None,
                 timeout: float | None = None):
        rs.check_unwind()
        self._rs, self._detached, self.name = rs, detached, name
        pos, rec = rs.next("approval", name)
        self._pos, self.op, self.expires_at = pos, None, None
        if rec is not None:
            self.id = approval_id(rs.run_id, pos)
            try:
                st = json.loads(rec.result or b"null")
                if isinstance(st, dict) and st.get("id"):
                    self.id = st["id"]
                    self.expires_at = parse_time(st.get("expires_at"))
            except ValueError:
                pass
            if rec.done:
                self.op = rec
            else:
                rs.open_approvals.add(self.id)
            return
        self.id = approval_id(rs.run_id, pos)
        req = {"id": self.id, "position": pos, "name": name}
        if approvers:
            req["approvers"] = list(approvers)
        if subject:
            req["subject"] = subject
        if details is not None:
            req["details"] = b64(dumps(details))
        st = {"id": self.id}
        if timeout:
            self.expires_at = utcnow() + _dt.timedelta(seconds=timeout)
            req["expiresAt"] = st["expires_at"] = fmt_time(self.expires_at)
        rs.pending.approvals.append(req)
        rs.open_approvals.add(self.id)
        rs.record_wait(pos, "approval", name, False, dumps(st))

    def settled(self):
        return self.op is not None

    async def try_(self):
        rs = self._rs
        event = "trellis.approval." + self.id
        e = rs.take_event(event)
        if e is not None:
            try:
                a = json.loads(e[2] or b"{}")
            except ValueError:
                a = None
            if not isinstance(a, dict):
                a = {}
            d = {"approved": a.get("status") == "approved", "principal": a.get("principal", "")}
            if a.get("comment"):
                d["comment"] = a["comment"]
            d["decided_at"] = a.get("decided_at") or "0001-01-01T00:00:00Z"
            self.op = rs.record_wait(self._pos, "approval", self.name, True, dumps(d))
            rs.open_approvals.discard(self.id)
            return True
        if self.expires_at is not None and utcnow() >= self.expires_at:
            rs.pending.no_events.append(event)
            rs.pending.expire.append(self.id)
            self.op = rs.record_wait(self._pos, "approval", self.name, True, None,
                                     ApprovalTimeout(f"approval timed out: {self.name}"))
            rs.open_approvals.discard(self.id)
            return True
        return False

    def needs(self):
        reason = f"waiting for approval {_quote(self.name)} ({self.id})"
        if self.expires_at is not None:
            reason += " until " + reason_time(self.expires_at)
        return self.expires_at, ["trellis.approval." + self.id], reason

    def value(self):
        if self.op.error:
            raise ApprovalTimeout(self.op.error.get("message", ""))
        return decode(self.op.result)


def child_run_id(parent: str, pos: int, index: int = -1) -> str:
    """A child's run ID, derived from its parent's as Go's childRunID does:
    "<parent>.<position>", "<parent>.<position>.<index>" for a map's items."""
    return f"{parent}.{pos}" if index < 0 else f"{parent}.{pos}.{index}"


def _child_run(run_id, workflow, queue, input_b, workflow_id=None, priority=0):
    d = {"id": run_id, "workflowId": workflow_id or run_id, "workflow": workflow, "queue": queue,
         "input": b64(input_b)}
    if priority:
        d["priority"] = priority
    return d


class ChildWait(Waitable):
    """A child run; its value is the child's output (ChildFailed when it did not
    succeed), or its run ID for a detached child."""

    def __init__(self, rs: RunState, detached: bool, workflow: str, input, queue: str, workflow_id=None,  # noqa: A002
                 priority=0, child_detached=False):
        rs.check_unwind()
        self._rs, self._detached = rs, detached
        pos, rec = rs.next("child", workflow)
        self._pos, self.workflow = pos, workflow
        self.run_id = child_run_id(rs.run_id, pos)
        self.child_detached, self.op, self.err = child_detached, None, None
        if rec is not None:
            if rec.done and not child_detached:
                self.op = rec
            return
        err = rs.interrupted(detached)
        if err is not None:
            self.err = err
            return
        b = dumps(input)
        rs.pending.children.append({"position": pos, "detached": child_detached,
                                    "runs": [_child_run(self.run_id, workflow, queue, b, workflow_id, priority)]})
        rs.record_wait(pos, "child", workflow, child_detached, dumps({"run_id": self.run_id}))

    def settled(self):
        return self.op is not None or self.err is not None or self.child_detached

    async def try_(self):
        rs = self._rs
        if rs.take_event(f"trellis.group.{self._pos}") is None:
            return False
        runs = await rs.host.list_children(rs, self._pos)
        if len(runs) != 1:
            rs.request_unwind(ABANDON, RuntimeError(f"child run {self.run_id}: {len(runs)} children at {self._pos}"))
            raise _Unwind()
        c = runs[0]
        if c.get("status") == "succeeded":
            self.op = rs.record_wait(self._pos, "child", c.get("workflow", self.workflow), True,
                                     _wire.unb64(c.get("output")))
            return True
        e = c.get("error") or {}
        ce = {"RunID": c.get("id", ""), "Status": c.get("status", ""), "Message": e.get("message", ""),
              "Type": e.get("type", "")}
        msg = f"child run {ce['RunID']} {ce['Status']}: {ce['Message']}"
        self.op = rs.record_wait(self._pos, "child", c.get("workflow", self.workflow), True, dumps(ce),
                                 Failure(msg, "child_" + ce["Status"]))
        return True

    def needs(self):
        return None, [f"trellis.group.{self._pos}"], "waiting for child run " + self.run_id

    def value(self):
        if self.err is not None:
            raise self.err
        if self.child_detached:
            return self.run_id
        if self.op.error:
            st = {}
            try:
                st = json.loads(self.op.result or b"{}")
            except ValueError:
                pass
            raise ChildFailed(self.op.error.get("message", ""), self.op.error.get("type", ""),
                              run_id=st.get("RunID", self.run_id), status=st.get("Status", ""))
        return decode(self.op.result)


class MapWait(Waitable):
    """A map: one child run per item, in one group, at most `concurrency`
    running at once. Its value is the outputs in item order; with fail-fast
    (the default) a failure raises MapFailed; with collect_errors the failed
    items are ChildFailed instances in the list."""

    def __init__(self, rs: RunState, detached: bool, workflow: str, items: list, queue: str, concurrency: int = 0,
                 collect_errors: bool = False):
        rs.check_unwind()
        self._rs, self._detached = rs, detached
        pos, rec = rs.next("child", workflow)
        self._pos, self.workflow, self.items, self.collect = pos, workflow, len(items), collect_errors
        self.err, self.done = None, False
        if rec is None:
            err = rs.interrupted(detached)
            if err is not None:
                self.err = err
                return
            runs = [_child_run(child_run_id(rs.run_id, pos, i), workflow, queue, dumps(x)) for i, x in enumerate(items)]
            if runs:
                g = {"position": pos, "failFast": not collect_errors, "runs": runs}
                if concurrency:
                    g["maxConcurrency"] = concurrency
                rs.pending.children.append(g)
            self.state = {"items": len(items)}
            rs.record_wait(pos, "child", workflow, not items, dumps(self.state))
            self.done = not items
            return
        try:
            self.state = json.loads(rec.result)
        except (TypeError, ValueError):
            rs.block(NonDeterminismError(pos, describe(rec.kind, rec.name) + " with unreadable state", "map of " + workflow))
        self.done = rec.done
        if self.state.get("items") != len(items):
            rs.block(NonDeterminismError(pos, f"map of {self.state.get('items')} items", f"map of {len(items)} items"))

    def settled(self):
        return self.done or self.err is not None

    async def try_(self):
        rs = self._rs
        e = rs.take_event(f"trellis.group.{self._pos}")
        if e is None:
            return False
        try:
            outcome = json.loads(e[2] or b"{}")
        except ValueError:
            outcome = None
        if not isinstance(outcome, dict):
            outcome = {}
        self.state["outcome"] = outcome
        runs = await rs.host.list_children(rs, self._pos)
        total, ok = outcome.get("total", 0), outcome.get("succeeded", 0)
        if ok < total:
            failed = []
            for i, r in enumerate(runs):
                st = r.get("status", "")
                if st in ("failed", "cancelled"):
                    e = r.get("error") or {}
                    ie = {"index": i, "run_id": r.get("id", ""), "status": st, "message": e.get("message", "")}
                    if e.get("type"):
                        ie["type"] = e["type"]
                    failed.append(ie)
            if failed:
                self.state["failed"] = failed
        if ok == total or self.collect:
            res = []
            for r in runs:
                x = {"status": r.get("status", "")}
                if r.get("output") is not None:
                    x["output"] = r["output"]  # base64, as Go's []byte encodes
                if r.get("error"):
                    e = r["error"]
                    x["error"] = {k: v for k, v in (("message", e.get("message", "")), ("type", e.get("type")),
                                                    ("non_retryable", e.get("non_retryable"))) if v or k == "message"}
                res.append(x)
            self.state["results"] = res
        rs.record_wait(self._pos, "child", self.workflow, True, dumps(self.state))
        self.done = True
        return True

    def needs(self):
        return None, [f"trellis.group.{self._pos}"], f"waiting for {self.items} child runs of {self.workflow}"

    def value(self):
        if self.err is not None:
            raise self.err
        if not self.collect and self.state.get("failed"):
            f = self.state["failed"]
            raise MapFailed(f"map of {self.workflow}: {len(f)} of {self.items} items failed: "
                            f"item {f[0]['index']} ({f[0]['run_id']}) {f[0]['status']}: {f[0]['message']}", f)
        if self.items == 0:
            return []
        results = self.state.get("results")
        if results is None or len(results) != self.items:
            raise Failure(f"map at position {self._pos}: no recorded results")
        out = []
        for i, r in enumerate(results):
            if r.get("status") == "succeeded":
                out.append(decode(_wire.unb64(r.get("output"))))
            else:
                e = r.get("error") or {}
                out.append(ChildFailed(e.get("message", ""), "child_" + r.get("status", ""),
                                       run_id=child_run_id(self._rs.run_id, self._pos, i), status=r.get("status", "")))
        return out


# --- the workflow's context -------------------------------------------------------


class _Steps:
    __slots__ = ("_ctx",)

    def __init__(self, ctx):
        self._ctx = ctx

    async def run(self, name: str, fn, *, retry: Retry | None = None, timeout: float | None = None,
                  at_most_once: bool = False, on_unknown: str = "error"):
        """Runs fn as the step `name` and returns its result (a JSON value):
        from history on replay, else by calling fn (sync: on a thread; async:
        awaited) with a StepInfo when it takes an argument. Failed attempts are
        retried per `retry` (default: 3 attempts, 1 s doubling); `timeout`
        bounds each attempt (seconds). A step that fails for good raises
        StepError (StepTimeout, Cancelled...).

        With at_most_once=True each attempt's start is checkpointed before fn
        runs, and an attempt that started and never recorded its end (its
        worker died, its lease expired, the server ended it after its timeout)
        is not run again: the step ends with a StepError of type
        "step_outcome_unknown" (on_unknown="error", the default), or the run
        fails with it (on_unknown="fail_run"). A failure fn reports is retried
        by `retry` as usual. One checkpoint more per attempt."""
        if not isinstance(at_most_once, bool):
            raise TypeError(f"step {name!r}: at_most_once must be a bool")
        if on_unknown not in ("error", "fail_run"):
            raise ValueError(f"step {name!r}: on_unknown must be 'error' or 'fail_run', not {on_unknown!r}")
        if on_unknown != "error" and not at_most_once:
            raise ValueError(f"step {name!r}: on_unknown applies to at-most-once steps only (set at_most_once)")
        ctx = self._ctx
        rs = ctx._rs
        rs.check_unwind()
        pos, rec = rs.next("step", name)
        if rec is not None and rec.done and at_most_once and on_unknown == "fail_run" and rec.outcome_unknown():
            rs.request_unwind(FAIL, StepError(rec.error.get("message", ""), "step_outcome_unknown", non_retryable=True))
            raise _Unwind()
        if rec is None or not rec.done:
            call = _StepCall(rs, name, pos, rec, fn, retry or DEFAULT_RETRY, timeout, ctx._detached,
                             at_most_once, on_unknown)
            task = asyncio.current_task()
            if task is rs.main_task:
                rec = await call.execute()
            else:  # a step in parallel with others (asyncio.gather, create_task)
                rs.inflight.add(task)
                try:
                    rec = await call.execute()
                finally:
                    rs.inflight.discard(task)
        if rec.error:
            raise_op_error(rec)
        return decode(rec.result)


class Context:
    """What a workflow function is given: its run's info and its ops. Every op
    is recorded in the run's history and replayed from it."""

    def __init__(self, rs: RunState, detached: bool = False, queue: str = ""):
        self._rs, self._detached, self._queue = rs, detached, queue
        self.step = _Steps(self)

    # run info
    @property
    def run_id(self) -> str:
        return self._rs.run_id

    @property
    def workflow_id(self) -> str:
        return self._rs.run.get("workflow_id", self._rs.run_id)

    @property
    def workflow(self) -> str:
        return self._rs.run.get("workflow", "")

    @property
    def namespace(self) -> str:
        return self._rs.namespace

    @property
    def attempt(self) -> int:
        """The run's execution number (its claims so far, this one included)."""
        return self._rs.attempts

    @property
    def workflow_attempt(self) -> int:
        """The run's attempt of its workflow function: 1, then one more after
        each failed attempt that a workflow retry followed (waits, crashes and
        hand-backs count in `attempt`, not here)."""
        return self._rs.workflow_attempt

    @property
    def queue(self) -> str:
        return self._rs.run.get("queue", "")

    @property
    def version(self) -> int:
        """The workflow version the run was started with (a start's pinned
        version, else the starter's)."""
        return int(self._rs.run.get("version", 0) or 0)

    @property
    def cancelled(self) -> bool:
        """Whether the run's cancellation is known."""
        return self._rs.cancel_evt.is_set()

    def detached(self) -> "Context":
        """A context whose ops the run's cancellation does not stop: for cleanup
        after catching Cancelled."""
        return Context(self._rs, True, self._queue)

    # recorded values
    def _internal(self, kind, gen):
        rs = self._rs
        rs.check_unwind()
        pos, rec = rs.next(kind, "")
        if rec is not None:
            b = rec.result
        else:
            b = dumps(gen())
            rs.record_internal(pos, kind, "", b)
        try:
            return json.loads(b)
        except (TypeError, ValueError):
            rs.block(NonDeterminismError(pos, "undecodable " + kind, kind))

    def now(self) -> _dt.datetime:
        """The current time (UTC), recorded: a replay returns the same."""
        v = self._internal("now", lambda: fmt_time(utcnow()))
        try:
            return parse_time(v)
        except (TypeError, ValueError):
            self._rs.block(NonDeterminismError(self._rs.next_pos - 1, "undecodable now", "now"))

    def uuid(self) -> str:
        """A random UUID (version 4), recorded."""
        return self._internal("uuid", lambda: str(_uuid.uuid4()))

    def random(self) -> int:
        """A random integer in [0, 2**64), recorded."""
        return self._internal("random", lambda: _random.getrandbits(64))

    def patched(self, patch_id: str) -> bool:
        """True when the run takes the new branch of code change `patch_id` (it
        reached this check first, recorded); False when its history predates it."""
        rs = self._rs
        rs.check_unwind()
        pos = rs.next_pos
        rec = rs.history.get(pos)
        if rec is not None and rec.kind == "patch" and rec.name == patch_id:
            rs.next_pos += 1
            return True
        if rec is not None or pos <= rs.last_pos:
            return False
        rs.next_pos += 1
        rs.record_internal(pos, "patch", patch_id, b"true")
        return True

    # the run's store
    def set(self, key: str, value) -> None:  # noqa: A003
        """Stores a JSON value under key in the run's store (saved with the next
        checkpoint; readable through the API)."""
        rs = self._rs
        rs.check_unwind()
        b = dumps(value)
        if len(b) > rs.limit:
            raise ValueError(f"payload too large: {len(b)} bytes ({rs.limit_of}limit {rs.limit})")
        pos, rec = rs.next("set", key)
        if rec is not None:
            b = rec.result
        else:
            at = utcnow()
            rs.record(Op(pos, "set", key, True, b, None, 1, at, at), {"key": key, "value": b64(b)})
        rs.kv[key] = b

    def delete(self, key: str) -> None:
        rs = self._rs
        rs.check_unwind()
        pos, rec = rs.next("delete", key)
        if rec is None:
            at = utcnow()
            rs.record(Op(pos, "delete", key, True, None, None, 1, at, at), {"key": key, "delete": True})
        rs.kv.pop(key, None)

    def get(self, key: str, default=None):
        """The value under key, as this run's replayed ops left it."""
        b = self._rs.kv.get(key)
        return default if b is None else json.loads(b)

    # stream
    def emit(self, name: str, data=None) -> None:
        """Appends an event of the workflow's own to the run's stream (recorded,
        so a replay does not emit it twice). Names starting with "run." or
        "step." are reserved."""
        if not name or name.startswith(("run.", "step.")):
            raise ValueError(f"emit: the event name {name!r} is empty or reserved (run.*, step.*)")
        rs = self._rs
        rs.check_unwind()
        b = dumps(data)
        if len(b) > rs.limit:
            raise ValueError(f"emit {name!r}: payload too large: {len(b)} bytes ({rs.limit_of}limit {rs.limit})")
        pos, rec = rs.next("emit", name)
        if rec is not None:
            return
        at = utcnow()
        rs.pending.ops.append(Op(pos, "emit", name, True, None, None, 1, at, at))
        rs.pending.stream.append({"name": name, "data": b})

    # waits
    def timer(self, seconds: float | None = None, *, at: _dt.datetime | None = None) -> Timer:
        """A durable timer, due `seconds` from now (as recorded) or `at`."""
        return Timer(self._rs, self._detached, seconds, at)

    async def sleep(self, seconds: float) -> None:
        """Sleeps durably: a run waiting longer than the worker's inline limit
        (2 s) is released and resumed by any worker when due."""
        await self.timer(seconds)

    def event(self, name: str, timeout: float | None = None) -> EventWait:
        """A wait for the next event `name` (await it, or select on it)."""
        return EventWait(self._rs, self._detached, name, timeout)

    async def wait_for_event(self, name: str, timeout: float | None = None):
        """Waits for the next event `name` and returns its payload; EventTimeout
        after `timeout` seconds when given."""
        return await self.event(name, timeout)

    def approval_request(self, name: str, *, approvers=(), subject: str = "", details=None,
                         timeout: float | None = None) -> ApprovalWait:
        return ApprovalWait(self._rs, self._detached, name, approvers, subject, details, timeout)

    async def approval(self, name: str, *, approvers=(), subject: str = "", details=None,
                       timeout: float | None = None) -> dict:
        """Requests an approval and waits for its decision: a dict with
        "approved" (bool), "principal", "comment", "decided_at"."""
        return await self.approval_request(name, approvers=approvers, subject=subject, details=details,
                                           timeout=timeout)

    def start_child(self, workflow, input=None, *, id: str | None = None, queue: str | None = None,  # noqa: A002
                    priority: int = 0, detached: bool = False) -> ChildWait:
        """Starts a child run (created with the parent's next checkpoint, its
        run ID derived from the parent's); await the result for its output."""
        name, q = _workflow_ref(workflow)
        return ChildWait(self._rs, self._detached, name, input, queue or q or self.queue, id, priority, detached)

    async def child(self, workflow, input=None, **kw):  # noqa: A002
        """Runs a child workflow and returns its output (ChildFailed if it did
        not succeed). `workflow` is a name or a decorated workflow; the child's
        queue defaults to the workflow's, else this run's."""
        return await self.start_child(workflow, input, **kw)

    async def map(self, workflow, items, *, concurrency: int = 0, queue: str | None = None,
                  collect_errors: bool = False) -> list:
        """Runs `workflow` once per item as child runs, at most `concurrency` at
        once (0: no limit), and returns their outputs in item order."""
        name, q = _workflow_ref(workflow)
        return await MapWait(self._rs, self._detached, name, list(items), queue or q or self.queue, concurrency,
                             collect_errors)

    async def select(self, *cases: Waitable) -> int:
        """Waits for the first of the cases (timers, event waits, approvals,
        children) and returns its index; when several are ready the first wins.
        The choice is recorded. Await the winner for its value."""
        rs = self._rs
        rs.check_unwind()
        pos, rec = rs.next("select", "")
        if rec is not None and rec.done:
            try:
                i = json.loads(rec.result)
                if not isinstance(i, int) or not 0 <= i < len(cases):
                    raise ValueError
            except (TypeError, ValueError):
                rs.block(NonDeterminismError(pos, f"select of case {rec.result!r}", f"select of {len(cases)} cases"))
            return i
        i = await rs.await_any(list(cases), self._detached)
        rs.record_wait(pos, "select", "", True, dumps(i))
        return i


def _workflow_ref(w):
    if isinstance(w, str):
        return w, None
    return w.name, getattr(w, "queue", None)


# --- executing a claimed run --------------------------------------------------------


async def execute(host, rs: RunState, defn) -> str:
    """Replays and carries on a claimed run; returns the status it saved ("" when none)."""
    if defn.kind == "job":
        return await execute_job(host, rs, defn)
    ctx = Context(rs, False, defn.queue or "")
    if rs.deadline is not None and utcnow() >= rs.deadline:
        rs.deadline_hit = True
        return await rs.finish(None, DeadlineExceeded())
    rs.main_task = asyncio.current_task()
    out = err = None
    unwound = False
    try:
        inp = decode(_wire.unb64(rs.run.get("input")))
        out = await defn.fn(ctx, inp)
    except _Unwind:
        unwound = True
    except Exception as e:  # noqa: BLE001 - the workflow's failure, recorded
        err = e
    if rs.inflight:  # steps still running in parallel: their outcomes go with the save
        await asyncio.wait(list(rs.inflight))
    if rs.unwind == FAIL:  # an at-most-once step's unknown outcome (on_unknown="fail_run")
        return await rs.finish(None, rs.unwind_err)
    if unwound or rs.unwind is not None:  # (an op may raise after an unwind was requested)
        return await rs.save_unwind()
    if err is not None:
        return await rs.finish(None, err)
    try:
        b = dumps(out)
    except (TypeError, ValueError) as e:
        return await rs.finish(None, Failure(f"encoding the output: {e}", "encoding"))
    return await rs.finish(b, None)


async def execute_job(host, rs: RunState, defn) -> str:
    """One attempt of a job, recorded in one checkpoint (internal/engine/job.go)."""
    retry = (defn.retry or DEFAULT_RETRY).with_queue(rs.queue_retry)
    attempt, prior = 1, None
    rec = rs.history.get(0)
    if rec is not None and rec.kind == "step":
        prior, attempt = rec, rec.attempts + 1
    t0 = utcnow()
    name = rs.run.get("workflow", "")
    if prior is not None and prior.ended is not None and (
            prior.attempts >= retry.max_attempts or prior.ended[1] in retry.non_retryable_types):
        # its last attempt was lost or timed out, and was the last allowed: the
        # job fails with its error
        info = {"message": prior.ended[0], "type": prior.ended[1]}
        op = Op(0, "step", name, True, None, info, prior.attempts, prior.started_at, t0)
        return await _job_save(rs, {"status": "failed", "error": _info_wire(info), "ops": [op.wire()]})
    out, err, cancelled = None, None, False
    if rs.deadline is not None and t0 >= rs.deadline:
        err = DeadlineExceeded()
    elif rs.cancel_evt.is_set():
        err, cancelled = Cancelled(), True
    else:
        call = _StepCall(rs, name, 0, None, None, retry, defn.timeout, False)
        call.attempt = attempt
        inp = decode(_wire.unb64(rs.run.get("input")))
        fn = defn.fn
        call.fn = (lambda info: fn(inp, info)) if _arity(fn) >= 2 else (lambda info: fn(inp))
        if inspect.iscoroutinefunction(fn):
            call.fn = _async_job(fn, inp)
        rs.current_step = (name, attempt, t0, 0, defn.timeout)
        ok, v = await call._attempt_once()
        rs.current_step = None
        if rs.stopped:
            if rs.stopped == "shutdown":
                await host.release(rs)
                return "pending"
            return ""
        if ok:
            try:
                out = dumps(v)
            except (TypeError, ValueError) as e:
                err = Failure(f"encoding the output: {e}", "encoding")
            else:
                if len(out) > rs.limit:
                    err = Failure(f"payload too large: output is {len(out)} bytes ({rs.limit_of}limit {rs.limit})",
                                  "payload_too_large", non_retryable=True)
        else:
            err = v
            cancelled = isinstance(v, Cancelled)
    end = utcnow()
    if err is None:
        p = {"status": "succeeded", "output": b64(out)}
        if prior is not None:
            p["ops"] = [Op(0, "step", name, True, out, None, attempt, prior.started_at, end, t0).wire()]
        return await _job_save(rs, p)
    info = error_info(err)
    op = Op(0, "step", name, False, None, None, attempt, prior.started_at if prior is not None else t0)
    p = {"attempts": [{"position": 0, "attempt": attempt, "error": _info_wire(info), "startedAt": fmt_time(t0),
                       "finishedAt": fmt_time(end)}]}
    # attempts made in earlier attempts of the run (a workflow retry of a job
    # started with a policy) do not count
    before = min(prior_attempts(rs.workflow_attempts, 0), attempt - 1)
    retry_ok = (not cancelled and attempt - before < retry.max_attempts and not info.get("non_retryable")
                and not isinstance(err, (DeadlineExceeded, Cancelled)) and info.get("type", "") not in retry.non_retryable_types)
    if retry_ok:
        wake = end + _dt.timedelta(seconds=retry.delay(attempt))
        if rs.deadline is not None and rs.deadline < wake:
            wake = rs.deadline
        p.update(status="waiting", wakeAt=fmt_time(wake), waitReason="retry backoff")
    else:
        op.done, op.error, op.finished_at = True, info, end
        if cancelled:
            info = dict(info, type="cancelled")
            op.error = info
        p.update(status="cancelled" if cancelled else "failed", error=_info_wire(info))
    p["ops"] = [op.wire()]
    return await _job_save(rs, p)


def _async_job(fn, inp):
    if _arity(fn) >= 2:
        async def call(info):
            return await fn(inp, info)
    else:
        async def call(info):
            return await fn(inp)
    return call


async def _job_save(rs: RunState, p: dict) -> str:
    item = {"lease": rs.lease, "seq": 1}
    item.update(p)
    try:
        res = await rs.host.checkpoint(item)
    except (ProtocolError, OSError, asyncio.TimeoutError) as e:
        rs.host.log(f"run {rs.run_id}: saving job outcome: {e}")
        return ""
    if res and res.get("retry_at"):
        return "waiting"  # the store made the failure a workflow retry
    return p["status"]

