"""The worker: claims runs through a server and executes them.

Threads and asyncio: workflows run as asyncio tasks on one event loop (the
thread that calls Worker.run). Around it, each thread has one owner and ends
with the worker:

- the claim thread (Worker's) holds the Claim stream open and hands each pushed
  run to the loop; it waits for free slots before it opens the next stream;
- the cancel thread holds the Subscribe stream of topic "cancel" open and, on a
  signal, asks the loop to extend the leases at once (which reports the
  cancellations);
- the I/O pool (a few threads) makes the unary calls (Checkpoint, ExtendLeases,
  Heartbeat, ...), each thread on its own keep-alive connection;
- the step pool runs the synchronous step functions.

Checkpoints of all runs are batched: while one Checkpoint call is in flight,
those made meanwhile wait and go together in the next one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import http.client
import logging
import os
import queue
import random
import signal
import socket
import threading
import time

from . import _engine
from ._wire import ConnectClient, fmt_duration, fmt_time, utcnow
from .errors import ProtocolError
from .workflow import Workflow

log = logging.getLogger("trellis.worker")

_RETRY_CODES = ("unavailable", "resource_exhausted", "unknown")

# How long a starting worker tries to reach a server that does not answer
# (Worker._first_heartbeat), in seconds.
STARTUP_PATIENCE = 30

# How long the server may leave a stream silent: a Claim stream until its
# wait is over (it then ends with next_due), a Subscribe stream for
# server.Config.WorkerStreamIdleTimeout (5 minutes by default; it then ends
# with reconnect). A stream silent for that plus STREAM_SLACK is taken for a
# dead connection (half-open: no reset ever comes) and opened again.
CLAIM_WAIT = 30.0
SUBSCRIBE_IDLE = 300.0
STREAM_SLACK = 10.0


class _StepPool(concurrent.futures.Executor):
    """The threads of synchronous steps: daemon threads, started as needed up to
    `size`, so that a step that ignores its `cancelled` event past its grace
    cannot hold the process at exit (ThreadPoolExecutor's threads are joined
    then)."""

    def __init__(self, size: int):
        self._size, self._threads, self._idle = size, 0, 0
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn, /, *args, **kwargs):
        f = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the step pool is shut down")
            self._q.put((f, fn, args, kwargs))
            if self._idle == 0 and self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"trellis-step-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1
        return f

    def _work(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            f, fn, args, kwargs = item
            if f.set_running_or_notify_cancel():
                try:
                    f.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - handed to the waiting step
                    f.set_exception(e)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._lock:
            self._closed = True
            n = self._threads
        for _ in range(n):
            self._q.put(None)


class Worker:
    """Runs the registered workflows of `queues` in `namespace` through the
    server at `server` (URL), authenticated by `token` (role worker).

    `concurrency` runs at most execute at once (the claim credit);
    `lease_seconds` is the lease of each claimed run (heartbeats every third of
    it); on a graceful stop (stop(), SIGTERM) the worker stops claiming, lets
    active runs finish for `shutdown_grace` seconds, hands the rest back and
    removes its record."""

    def __init__(self, server: str, token: str | None = None, *, namespace: str = "default", queues=("default",),
                 name: str | None = None, concurrency: int = 100, lease_seconds: float = 10.0,
                 heartbeat_seconds: float | None = None, shutdown_grace: float = 10.0,
                 max_inline_backoff: float = 2.0, version: str = "", step_threads: int = 16,
                 max_payload_bytes: int = 2 << 20):
        if not 1 <= concurrency <= 1000:
            raise ValueError("concurrency must be 1 to 1000")
        self.server = server
        self.namespace = namespace
        self.queues = list(queues)
        self.name = name or f"py-{socket.gethostname()}-{os.getpid()}"
        self.concurrency = concurrency
        self.lease_seconds = float(lease_seconds)
        self.heartbeat_seconds = heartbeat_seconds or self.lease_seconds / 3
        self.shutdown_grace = shutdown_grace
        self.max_inline_backoff = max_inline_backoff
        self.max_payload_bytes = max_payload_bytes
        # The worker record's version (the Workers page): the deploy's, else the
        # SDK's, as the Go and TypeScript workers show theirs.
        self.version = version or f"trellis-py/{_sdk_version()}"
        # Each attempt of a unary call is bounded well within the lease: an
        # extension sent a third of a lease after the last one, stalled, is
        # given up and sent again on a new connection before the lease ends,
        # and a stalled Checkpoint (the batch every run's checkpoints wait
        # for) is tried again twice within the lease it may take.
        self.call_timeout = min(self.lease_seconds, max(1.0, self.lease_seconds / 3))
        self._rpc = ConnectClient(server, token, timeout=self.call_timeout)
        self._claim_wait = CLAIM_WAIT
        self._stream_read_timeouts = (CLAIM_WAIT + STREAM_SLACK, SUBSCRIBE_IDLE + STREAM_SLACK)
        self._workflows: dict[str, Workflow] = {}
        self.step_pool = _StepPool(step_threads)
        self._io = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="trellis-io")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active: dict[str, tuple] = {}
        self._cond = threading.Condition()
        self._busy = 0  # runs pushed to this worker and not yet ended (guarded by _cond)
        self._stopping = False
        self._stop_requested = False
        self._stop_evt: asyncio.Event | None = None
        self._extend_now: asyncio.Event | None = None
        self._streams: set = set()
        self._threads: list[threading.Thread] = []
        self._ck_queue: list = []
        self._ck_running = False
        self.stats = {"claimed": 0, "checkpoint_calls": 0, "checkpoints": 0}

    # --- registration ---

    def register(self, *workflows: Workflow) -> "Worker":
        for w in workflows:
            if not isinstance(w, Workflow):
                raise TypeError(f"register takes workflows declared with @trellis.workflow or @trellis.job, got {w!r}")
            if w.name in self._workflows and self._workflows[w.name] is not w:
                raise ValueError(f"workflow {w.name!r} registered twice")
            self._workflows[w.name] = w
        return self

    def workflow_retry(self, name: str) -> dict | None:
        """The retry policy of workflow `name` (``@trellis.workflow(retry=...)``)
        in the protocol's form, sent with the checkpoint that fails one of its
        runs; None when it has none."""
        w = self._workflows.get(name)
        if w is None or w.kind != "workflow":
            return None
        return _engine.retry_wire(w.retry)

    # --- running ---

    def run(self) -> None:
        """Runs until stop() or SIGTERM / SIGINT (then stops gracefully)."""
        asyncio.run(self.run_async(handle_signals=threading.current_thread() is threading.main_thread()))

    def stop(self) -> None:
        """Asks the worker to stop gracefully (from any thread; before it runs too)."""
        with self._cond:
            self._stop_requested = True
            loop, evt = self._loop, self._stop_evt
        if loop is not None and evt is not None:
            loop.call_soon_threadsafe(evt.set)

    async def run_async(self, handle_signals: bool = False) -> None:
        if not self._workflows:
            raise ValueError("register workflows before running the worker")
        with self._cond:
            self._loop = asyncio.get_running_loop()
            self._stop_evt = asyncio.Event()
            if self._stop_requested:
                self._stop_evt.set()
        self._extend_now = asyncio.Event()
        if handle_signals:
            for s in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(s, self._stop_evt.set)
        started = False
        try:
            started = await self._first_heartbeat()
        finally:
            if not started:  # failed, or stopped before the server could be reached
                self._close_pools()
                self._remove_signal_handlers(handle_signals)
        if not started:
            return
        try:
            await self._call("ResumeBlocked", {"namespace": self.namespace, "workflows": list(self._workflows),
                                               "queues": self.queues})
        except Exception as e:  # noqa: BLE001 - best effort: blocked runs wait for the next deploy
            log.warning("resuming blocked runs: %s", e)
        hb = asyncio.ensure_future(self._heartbeats())
        self._start_thread(self._claim_thread, "trellis-claim")
        self._start_thread(self._cancel_thread, "trellis-cancel")
        try:
            await self._stop_evt.wait()
        finally:
            await self._shutdown(hb)
            self._remove_signal_handlers(handle_signals)

    def _remove_signal_handlers(self, installed: bool):
        if installed:
            for s in (signal.SIGTERM, signal.SIGINT):
                self._loop.remove_signal_handler(s)

    def _start_thread(self, fn, name):
        t = threading.Thread(target=fn, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    async def _shutdown(self, hb):
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for s in list(self._streams):
            s.close()
        # Let active runs finish for the grace period, then hand the rest back.
        tasks = [t for _, t in self._active.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=self.shutdown_grace)
        for rs, _ in list(self._active.values()):
            rs.stop("shutdown")
        tasks = [t for _, t in self._active.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=max(self.lease_seconds, 2.0))
        hb.cancel()
        try:
            await self._call("RemoveWorker", {"namespace": self.namespace, "name": self.name})
        except Exception as e:  # noqa: BLE001 - the record expires with its ttl
            log.warning("removing the worker's record: %s", e)
        for t in self._threads:
            await asyncio.get_running_loop().run_in_executor(None, t.join, 5.0)
        self._close_pools()

    def _close_pools(self):
        self._io.shutdown(wait=False)
        self.step_pool.shutdown(wait=False)
        self._rpc.close()

    async def _first_heartbeat(self) -> bool:
        """The worker's first Heartbeat, which writes its record. A server that
        cannot be reached (not up yet, restarting) is tried again by _call for
        STARTUP_PATIENCE seconds, as the Go worker's registration is; any other
        error (a refused token, a bad namespace) fails at once. False: stop()
        came first."""
        failures = []

        def retrying(e):
            if not failures:
                log.warning("cannot reach the server at %s (%s): trying again for up to %d s", self.server, e,
                            STARTUP_PATIENCE)
            failures.append(e)

        call = asyncio.ensure_future(self._call("Heartbeat", self._heartbeat_msg(True), retry_for=STARTUP_PATIENCE,
                                                on_retry=retrying))
        stopped = asyncio.ensure_future(self._stop_evt.wait())
        await asyncio.wait((call, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not call.done():
            call.cancel()
            return False
        call.result()  # raises the call's error
        if failures:
            log.info("reached the server at %s after %d attempts", self.server, len(failures) + 1)
        return True

    # --- calls ---

    async def _call(self, method: str, msg: dict, retry_for: float = 0.0, on_retry=None) -> dict:
        """A unary call on the I/O pool; with retry_for, connection failures and
        unavailable answers are retried (50 ms doubling to 1 s) that long,
        on_retry(error) told before each wait."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + retry_for
        delay = 0.05
        while True:
            try:
                return await loop.run_in_executor(self._io, self._rpc.unary, method, msg)
            except (OSError, http.client.HTTPException, ProtocolError) as e:
                if isinstance(e, ProtocolError) and e.code not in _RETRY_CODES:
                    raise
                if time.monotonic() + delay > deadline:
                    raise
                if on_retry is not None:
                    on_retry(e)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)

    async def checkpoint(self, item: dict) -> dict:
        """Saves one checkpoint, batched with the others made meanwhile."""
        fut = self._loop.create_future()
        self._ck_queue.append((item, fut))
        if not self._ck_running:
            self._ck_running = True
            asyncio.ensure_future(self._ck_flush())
        return await fut

    async def _ck_flush(self):
        try:
            while self._ck_queue:
                batch, self._ck_queue = self._ck_queue[:1000], self._ck_queue[1000:]
                self.stats["checkpoint_calls"] += 1
                self.stats["checkpoints"] += len(batch)
                try:
                    res = await self._call("Checkpoint", {"checkpoints": [it for it, _ in batch]},
                                           retry_for=self.lease_seconds)
                except Exception as e:  # noqa: BLE001 - every waiting checkpoint learns it
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(e)
                    continue
                results = res.get("results") or []
                for i, (_, f) in enumerate(batch):
                    r = results[i] if i < len(results) else {"error": {"code": "internal", "message": "no result"}}
                    if f.done():
                        continue
                    if r.get("error"):
                        e = r["error"]
                        f.set_exception(ProtocolError(e.get("code", "unknown"), e.get("message", ""),
                                                      reason=e.get("reason", "")))
                    else:
                        f.set_result(r)
        finally:
            self._ck_running = False

    async def list_children(self, rs, pos: int) -> list:
        res = await self._call("ListChildren", {"namespace": rs.namespace, "parent": rs.run_id, "position": pos},
                               retry_for=self.lease_seconds)
        return res.get("runs") or []

    async def release(self, rs) -> None:
        try:
            await self._call("ReleaseLease", {"lease": rs.lease, "seq": rs.ck_seq + 1}, retry_for=self.lease_seconds)
        except Exception as e:  # noqa: BLE001 - the lease expires
            log.warning("releasing run %s: %s", rs.run_id, e)

    def log(self, msg: str):
        log.warning("%s", msg)

    # --- runs ---

    def _on_claimed(self, cr: dict):
        """On the loop: starts executing a pushed run."""
        run = cr.get("run") or {}
        defn = self._workflows.get(run.get("workflow", ""))
        rs = _engine.RunState(self, cr)
        self.stats["claimed"] += 1
        if defn is None or self._stopping:
            task = asyncio.ensure_future(self.release(rs))
        else:
            task = asyncio.ensure_future(self._execute(rs, defn))
        old = self._active.get(rs.run_id)
        if old is not None:
            # Claimed again (its lease had expired here): the old execution's
            # writes are refused from now on; it stops at its next op.
            old[0].stop("lost")
        self._active[rs.run_id] = (rs, task)
        task.add_done_callback(lambda _t, r=rs: self._ended(r))

    async def lease_held(self, rs) -> bool:
        """Whether the lease of a run may still be held, as it starts and
        before each step attempt: at once while its known expiry (the claim's,
        then each extension's send time plus the lease) is ahead. Past it (the
        process was frozen, or cut off, for a lease; a claim waited in the
        connection meanwhile) the run may already be another worker's: the
        server is asked (one ExtendLeases), and a lost lease stops the run, so
        that a claim is dropped before it starts and no step starts on a lost
        lease. Clocks differ, so a lease the server still holds goes on."""
        if rs.lease_expires is None or utcnow() < rs.lease_expires:
            return True
        sent = utcnow()
        why = "lost"
        try:
            cs = getattr(rs, "current_step", None)
            res = await self._call("ExtendLeases", {"leases": [rs.lease], "duration": fmt_duration(self.lease_seconds),
                                                    "steps": [{} if cs is None else _step_wire(cs)]})
            if rs.run_id not in (res.get("lost") or ()):
                rs.lease_expires = max(rs.lease_expires, sent + _dt.timedelta(seconds=self.lease_seconds))
                return True
        except Exception as e:  # noqa: BLE001 - taken as lost: the lease had expired
            why = str(e)
        log.warning("lease of run %s expired (%s): stopping it; a claim is dropped before it starts", rs.run_id, why)
        rs.stop("lost")
        return False

    async def _execute(self, rs, defn):
        try:
            if not await self.lease_held(rs):
                return ""
            return await _engine.execute(self, rs, defn)
        except Exception:  # noqa: BLE001 - a bug of the SDK must not kill the worker
            log.exception("executing run %s", rs.run_id)
            return ""

    def _ended(self, rs):
        if self._active.get(rs.run_id, (None,))[0] is rs:
            del self._active[rs.run_id]
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    # --- claiming (claim thread) ---

    def _wait_credit(self, refill: bool) -> int:
        """Blocks until the worker has free slots (after a stream that used its
        whole credit: a quarter of them, or a second); 0 when stopping."""
        want = max(1, min(64, self.concurrency // 4)) if refill else 1
        deadline = time.monotonic() + 1.0
        with self._cond:
            while not self._stopping:
                free = self.concurrency - self._busy
                if free >= want or (free >= 1 and time.monotonic() >= deadline):
                    return free
                self._cond.wait(timeout=max(0.01, deadline - time.monotonic()) if free >= 1 else 1.0)
            return 0

    def _claim_thread(self):
        delay, refill = 0.05, False
        while True:
            credit = self._wait_credit(refill)
            if credit <= 0:
                return
            got, refill = 0, False
            try:
                s = self._rpc.stream("Claim", {
                    "namespace": self.namespace, "queues": self.queues, "workflows": list(self._workflows),
                    "versions": self._versions(), "worker": self.name, "credit": credit, "leaseDuration": fmt_duration(self.lease_seconds),
                    "wait": fmt_duration(self._claim_wait)}, read_timeout=self._stream_read_timeouts[0])
                self._streams.add(s)
                if self._stopping:  # the stop closed the streams before this one was open
                    s.close()
                try:
                    for msg in s:
                        runs = msg.get("runs") or ()
                        if runs:
                            with self._cond:
                                self._busy += len(runs)
                            got += len(runs)
                            for cr in runs:
                                self._loop.call_soon_threadsafe(self._on_claimed, cr)
                        if msg.get("reconnect"):
                            raise ProtocolError("unavailable", "the server is shutting down")
                finally:
                    self._streams.discard(s)
                delay = 0.05
                refill = got >= credit
            except Exception as e:  # noqa: BLE001 - whatever the failure, the worker claims on
                if self._stopping:
                    return
                _log_failure("claim stream", e)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)

    # --- cancellations (cancel thread) and heartbeats (loop) ---

    def _cancel_thread(self):
        delay = 0.05
        first = True
        while not self._stopping:
            try:
                s = self._rpc.stream("Subscribe", {"namespace": self.namespace, "topic": "cancel"},
                                     read_timeout=self._stream_read_timeouts[1])
                self._streams.add(s)
                if self._stopping:
                    s.close()
                try:
                    for msg in s:
                        if msg.get("reconnect"):
                            break
                        if msg.get("subscribed") and first:
                            first = False
                            continue
                        # A signal, or a new subscription after a reconnection
                        # (changes may have been missed).
                        self._loop.call_soon_threadsafe(self._extend_now.set)
                finally:
                    self._streams.discard(s)
                delay = 0.05
            except Exception as e:  # noqa: BLE001 - whatever the failure, the subscription goes on
                if self._stopping:
                    return
                _log_failure("cancel subscription", e, quiet=True)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)

    def _versions(self) -> list[dict]:
        """The versions of each registered workflow the worker serves to runs
        pinned to a version (ClaimRequest.versions)."""
        return [{"workflow": w.name, "versions": w.served_versions()} for w in self._workflows.values()]

    def _heartbeat_msg(self, start: bool) -> dict:
        return {"namespace": self.namespace, "name": self.name, "workflows": list(self._workflows),
                "versions": self._versions(), "queues": self.queues, "version": self.version, "ttl": fmt_duration(self.lease_seconds),
                "start": start}

    async def _heartbeats(self):
        """The worker's heartbeats and its runs' lease extensions: a failure
        of one round is logged and the next goes on (this task ending would
        let every lease expire while the runs execute)."""
        next_beat = time.monotonic() + self.heartbeat_seconds
        delay = 0.05
        while True:
            try:
                try:
                    await asyncio.wait_for(self._extend_now.wait(), timeout=max(0.0, next_beat - time.monotonic()))
                except asyncio.TimeoutError:
                    pass
                self._extend_now.clear()
                beat = time.monotonic() >= next_beat
                if beat:
                    next_beat = time.monotonic() + self.heartbeat_seconds
                    # side by side: a stalled heartbeat does not delay the extensions
                    await asyncio.gather(self._heartbeat(), self._extend())
                else:
                    await self._extend()
                delay = 0.05
            except Exception:  # noqa: BLE001 - a bug of the SDK must not end the extensions
                log.exception("heartbeats and lease extensions")
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self.heartbeat_seconds)

    async def _heartbeat(self):
        try:
            await self._call("Heartbeat", self._heartbeat_msg(False))
        except Exception as e:  # noqa: BLE001 - the record lives until its ttl
            _log_failure("heartbeat", e)

    async def _extend(self):
        runs = [rs for rs, _ in self._active.values()]
        if not runs:
            return
        steps = []
        for rs in runs:
            cs = rs.current_step
            steps.append({} if cs is None else _step_wire(cs))
        sent = utcnow()
        try:
            # (sent again once after a stall, within the lease; see call_timeout)
            res = await self._call("ExtendLeases", {"leases": [rs.lease for rs in runs],
                                                    "duration": fmt_duration(self.lease_seconds), "steps": steps},
                                   retry_for=self.call_timeout * 1.5)
        except Exception as e:  # noqa: BLE001 - tried again at the next round
            _log_failure("extending leases", e)
            return
        until = sent + _dt.timedelta(seconds=self.lease_seconds)
        for rs in runs:
            if rs.lease_expires is None or rs.lease_expires < until:
                rs.lease_expires = until
        for rid in res.get("lost") or ():
            ent = self._active.get(rid)
            if ent is not None:
                ent[0].stop("lost")
        for rid in res.get("cancel_requested") or ():
            ent = self._active.get(rid)
            if ent is not None:
                ent[0].request_cancel()


def _log_failure(what: str, e: BaseException, quiet: bool = False) -> None:
    """Logs a failed protocol call: a server away (unavailable) is expected
    and logged quietly (with quiet, any protocol or connection failure),
    other protocol and connection failures as warnings, anything else (an SDK
    bug, a mangled answer) as a warning with its traceback."""
    if isinstance(e, ProtocolError) and e.code == "unavailable" or \
            quiet and isinstance(e, (ProtocolError, OSError, http.client.HTTPException)):
        log.debug("%s: %s", what, e)
    elif isinstance(e, (ProtocolError, OSError, http.client.HTTPException)):
        log.warning("%s: %s", what, e)
    else:
        log.warning("%s: %r", what, e, exc_info=e)


def _sdk_version() -> str:
    from . import __version__
    return __version__


def _step_wire(cs: tuple) -> dict:
    """The step attempt a heartbeat reports for a run (name, attempt, since,
    position, declared timeout in seconds): the server ends the lease of a step
    past its timeout plus its grace, and records the attempt lost if the worker
    goes away while it runs (docs/worker-protocol.md, "Leases")."""
    name, attempt, since, pos, timeout = cs
    d = {"name": name, "attempt": attempt, "since": fmt_time(since), "position": pos}
    if timeout:
        d["timeout"] = fmt_duration(timeout)
    return d
