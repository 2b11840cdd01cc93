"""A worker that meets failures of its own loops or a stalled connection goes
on: an unexpected exception in the claim, cancel or heartbeat loop is logged
and the loop carries on; a connection that stops answering (half-open: open,
silent) is given up after a bound and the call or stream is made again on a
new one. Workers run in this process (so the tests reach inside them) against
a real server."""

from __future__ import annotations

import asyncio
import datetime
import re
import socket
import threading
import time
import unittest
import urllib.parse

from _harness import Server, ServerCase, new_queue, ops_of, trellis, wait_status
from trellis import _engine as trellis_engine
from trellis import _wire as trellis_wire


class InProcessWorker:
    """A trellis.Worker run on a thread of the test."""

    def __init__(self, test, url, token, queue, workflows, **kw):
        self.w = trellis.Worker(url, token, queues=[queue], name="inproc-" + new_queue(), **kw)
        self.w.register(*workflows)
        self.thread = threading.Thread(target=self.w.run, daemon=True)
        test.addCleanup(self.close)

    def start(self, client):
        self.thread.start()
        end = time.time() + 15
        while time.time() < end:
            if any(x["name"] == self.w.name and x.get("live") for x in client.workers()):
                return self
            time.sleep(0.05)
        raise AssertionError("the in-process worker never showed up live")

    def close(self):
        self.w.stop()
        self.thread.join(20)


class Injected(RuntimeError):
    """A failure no loop of the worker expects (not a protocol or connection error)."""


def fail_first(obj, attr, method, times, opened=None):
    """Makes obj.attr(method, ...) raise Injected the first `times` calls of
    that method, then behave as before. Returns the list of failures raised;
    the times of the calls that succeeded go to `opened`."""
    orig = getattr(obj, attr)
    raised = []
    lock = threading.Lock()

    def wrapped(m, *a, **kw):
        if m == method:
            with lock:
                fail = len(raised) < times
                if fail:
                    raised.append(time.time())
            if fail:
                raise Injected(f"injected failure of {m}")
            res = orig(m, *a, **kw)
            if opened is not None:
                opened.append(time.time())
            return res
        return orig(m, *a, **kw)

    setattr(obj, attr, wrapped)
    return raised


class StallingProxy:
    """A TCP proxy in front of the server that can make the connections open
    at one instant stall, as a half-open connection does: they stay open and
    nothing more goes through either way (what was sent is dropped). Later
    connections go through. It notes which worker protocol method each
    request of each connection calls, and when."""

    _METHOD = re.compile(rb"POST /trellis\.worker\.v1\.WorkerService/(\w+)")

    def __init__(self, test, upstream: str):
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        self.lock = threading.Lock()
        self.conns = []  # [client socket, upstream socket, stalled]
        self.calls = []  # (time, connection number, method)
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()
        test.addCleanup(self.close)

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream)
            ent = [c, u, False]
            with self.lock:
                if self.closed:
                    c.close()
                    u.close()
                    return
                n = len(self.conns)
                self.conns.append(ent)
            threading.Thread(target=self._pump, args=(ent, c, u, n), daemon=True).start()
            threading.Thread(target=self._pump, args=(ent, u, c, None), daemon=True).start()

    def _pump(self, ent, src, dst, n):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if ent[2]:
                    continue  # stalled: swallowed
                if n is not None:
                    for m in self._METHOD.findall(data):
                        with self.lock:
                            self.calls.append((time.time(), n, m.decode()))
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def stall(self) -> int:
        """Stalls every connection open now; returns how many there were."""
        with self.lock:
            for ent in self.conns:
                ent[2] = True
            return len(self.conns)

    def calls_on_new(self, first: int, method: str) -> list:
        """The times of the calls of `method` on connections numbered from `first`."""
        with self.lock:
            return [t for t, n, m in self.calls if n >= first and m == method]

    def close(self):
        with self.lock:
            self.closed = True
            conns, self.conns = self.conns, []
        self.lsock.close()
        for c, u, _ in conns:
            for x in (c, u):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()


class LoopsSurvive(ServerCase):
    def test_lease_extensions_go_on_after_an_unexpected_failure(self):
        @trellis.workflow("resilience.long_step")
        async def long_step(ctx, _):
            async def slow():
                await asyncio.sleep(6)
                return "done"

            return await ctx.step.run("slow", slow)

        # a 4 s lease extended every 1.3 s; the step outlives it; the first
        # extension fails, the second must come
        w = InProcessWorker(self, self.srv.url, self.srv.token, self.queue, [long_step], lease_seconds=4)
        raised = fail_first(w.w._rpc, "unary", "ExtendLeases", 1)
        with self.assertLogs("trellis.worker", "WARNING") as logs:
            w.start(self.c)
            r = self.c.start("resilience.long_step", None, queue=self.queue)
            run = self.c.result(r["id"], timeout=30)
        self.assertEqual(len(raised), 1)
        self.assertTrue(any("injected failure of ExtendLeases" in ln for ln in logs.output), logs.output)
        self.assertEqual((run["status"], run["output"]), ("succeeded", "done"))
        # the lease held: one execution (a lost lease would have made a second)
        self.assertEqual(run["attempts"], 1)
        self.assertEqual([(o["name"], o["attempts"]) for o in ops_of(self.c, r["id"])], [("slow", 1)])

    def test_claim_and_cancel_streams_go_on_after_an_unexpected_failure(self):
        started = threading.Event()

        @trellis.workflow("resilience.waits")
        async def waits(ctx, _):
            def wait(info):
                started.set()
                if info.cancelled.wait(30):
                    raise RuntimeError("saw the cancellation")
                return "not cancelled"

            return await ctx.step.run("wait", wait)

        # a 30 s lease: extended (and cancellations learnt from it) every 10 s,
        # so a prompt cancellation comes through the Subscribe stream
        w = InProcessWorker(self, self.srv.url, self.srv.token, self.queue, [waits], lease_seconds=30)
        claims = fail_first(w.w._rpc, "stream", "Claim", 1)
        subscribed = []
        subs = fail_first(w.w._rpc, "stream", "Subscribe", 1, subscribed)
        with self.assertLogs("trellis.worker", "WARNING") as logs:
            w.start(self.c)
            r = self.c.start("resilience.waits", None, queue=self.queue)
            self.assertTrue(started.wait(15), "the run was never claimed")
            end = time.time() + 10
            while not subscribed and time.time() < end:  # the Subscribe stream open again
                time.sleep(0.01)
            t0 = time.time()
            self.c.cancel(r["id"])
            run = self.c.result(r["id"], timeout=30)
        self.assertLess(time.time() - t0, 5)
        self.assertEqual((len(claims), len(subs)), (1, 1))
        self.assertTrue(any("injected failure of Claim" in ln for ln in logs.output), logs.output)
        self.assertTrue(any("injected failure of Subscribe" in ln for ln in logs.output), logs.output)
        self.assertEqual(run["status"], "cancelled")
        wait_status(self.c, r["id"], "cancelled")



class Stalls(ServerCase):
    def test_stalled_connections_are_given_up_and_made_again(self):
        started = threading.Event()

        @trellis.workflow("resilience.stall_long")
        async def stall_long(ctx, _):
            async def slow():
                started.set()
                await asyncio.sleep(8)
                return "s"

            return await ctx.step.run("slow", slow)

        @trellis.workflow("resilience.stall_quick")
        async def stall_quick(ctx, _):
            return await ctx.step.run("quick", lambda: "q")

        proxy = StallingProxy(self, self.srv.url)
        # a 6 s lease: extended every 2 s, each call attempt bounded at 2 s
        w = InProcessWorker(self, proxy.url, self.srv.token, self.queue, [stall_long, stall_quick], lease_seconds=6)
        self.assertEqual(w.w.call_timeout, 2)
        # (short stream bounds for the test: a 1 s claim wait, streams silent
        # for 3 s given up; by default 30 s + 10 s and 5 min + 10 s)
        w.w._claim_wait = 1.0
        w.w._stream_read_timeouts = (3.0, 3.0)
        w.start(self.c)
        r = self.c.start("resilience.stall_long", None, queue=self.queue)
        self.assertTrue(started.wait(15))
        with self.assertLogs("trellis.worker", "DEBUG") as logs:
            t0 = time.time()
            n = proxy.stall()  # the Claim and Subscribe streams, the kept-alive unary connections
            quick = self.c.start("resilience.stall_quick", None, queue=self.queue)
            # a new Claim stream takes it (the stalled one is given up)
            self.assertEqual(self.c.result(quick["id"], timeout=20).get("output"), "q")
            run = self.c.result(r["id"], timeout=30)
        self.assertIn("WARNING:trellis.worker:claim stream: timed out", logs.output)
        self.assertEqual((run["status"], run["output"]), ("succeeded", "s"))
        # the lease held through the stall: one execution, the step run once
        self.assertEqual(run["attempts"], 1)
        self.assertEqual([(o["name"], o["attempts"]) for o in ops_of(self.c, r["id"])], [("slow", 1)])
        for method, within in (("Claim", 3 + 2), ("Subscribe", 3 + 2), ("ExtendLeases", 6)):
            again = proxy.calls_on_new(n, method)
            self.assertTrue(again, f"no {method} on a new connection")
            self.assertLess(again[0] - t0, within, method)


class StaleClaims(ServerCase):
    """A claim read after its lease expired (a frozen worker's connection held
    it) is dropped when another worker has the run since, and goes on when only
    the worker's clock says it expired (the server extends it)."""

    def test_stale_claim_dropped_or_extended(self):
        @trellis.workflow("resilience.stale")
        async def stale(ctx, _):
            return 1

        w = InProcessWorker(self, self.srv.url, self.srv.token, new_queue(), [stale], lease_seconds=30)
        w.start(self.c)
        rpc = w.w._rpc

        def claim(name, lease):
            s = rpc.stream("Claim", {"namespace": "default", "queues": [self.queue], "workflows": ["resilience.stale"],
                                     "worker": name, "credit": 1, "leaseDuration": lease})
            try:
                for msg in s:
                    if msg.get("runs"):
                        return msg["runs"][0]
            finally:
                s.close()
            return None

        class Exec:  # what lease_held reads of a run: its lease, its known expiry, stop
            def __init__(self, cr):
                r = cr["run"]
                self.run_id = r["id"]
                self.lease = {"namespace": "default", "runId": r["id"], "token": str(cr["lease_token"]),
                              "queue": r["queue"], "secret": cr["lease_secret"]}
                self.lease_expires = trellis_wire.utcnow() - datetime.timedelta(seconds=1)
                self.stopped = None

            def stop(self, why):
                self.stopped = why

        def held(ex):
            return asyncio.run_coroutine_threadsafe(w.w.lease_held(ex), w.w._loop).result(15)

        taken = self.c.start("resilience.stale", None, queue=self.queue)
        old = claim("frozen", "1s")
        self.assertEqual(old["run"]["id"], taken["id"])
        time.sleep(1.5)  # the lease lapses; another worker claims the run
        self.assertIsNotNone(claim("other", "60s"))
        ex = Exec(old)
        self.assertFalse(held(ex))
        self.assertEqual(ex.stopped, "lost")

        kept = self.c.start("resilience.stale", None, queue=self.queue)
        cr = claim("ahead", "60s")
        self.assertEqual(cr["run"]["id"], kept["id"])
        ex = Exec(cr)  # the worker's clock says expired; the server holds it
        self.assertTrue(held(ex))
        self.assertIsNone(ex.stopped)
        self.assertGreater(ex.lease_expires, trellis_wire.utcnow() + datetime.timedelta(seconds=20))


class FrozenWorker(ServerCase):
    """A worker that cannot heartbeat for a lease (stopped, as a SIGSTOPped
    process is) and wakes after another worker finished its run starts no
    step attempt of it (docs/worker-protocol.md, Losing a lease): neither one
    whose preceding checkpoint was answered just before the stop, nor one
    that waited in the step threads' queue through it."""

    def assert_let_go(self, w, run_id, ran, why):
        """Waits until worker w no longer holds run_id; ran (the attempts of
        the step another worker took over) must still be one."""
        end = time.time() + 10
        while run_id in w.w._active and time.time() < end:
            time.sleep(0.05)
        self.assertNotIn(run_id, w.w._active, "the worker still holds the run")
        self.assertEqual(len(ran), 1, why)

    def test_no_attempt_after_a_freeze_in_the_flush(self):
        """Frozen between the answer to the checkpoint that precedes b's
        attempt and the attempt: the loop held in that flush, its heartbeats
        with it, until the other worker has finished the run."""
        srv, c, queue = self.srv, self.c, self.queue
        a_ran, frozen, thaw = threading.Event(), threading.Event(), threading.Event()
        self.addCleanup(thaw.set)
        b_ran = []

        def a():
            a_ran.set()
            return 1

        def b():
            b_ran.append(time.time())
            return 2

        @trellis.workflow("resilience.frozenflush")
        async def wf(ctx, _):
            await ctx.step.run("a", a)
            return await ctx.step.run("b", b)

        w1 = InProcessWorker(self, srv.url, srv.token, queue, [wf], lease_seconds=1)
        orig = trellis_engine.RunState.flush

        async def flush(rs):
            res = await orig(rs)
            if rs.host is w1.w and a_ran.is_set() and not frozen.is_set():
                frozen.set()
                thaw.wait(30)  # the loop stops here, as in a stopped process
            return res
        trellis_engine.RunState.flush = flush
        self.addCleanup(setattr, trellis_engine.RunState, "flush", orig)

        w1.start(c)
        run = c.start("resilience.frozenflush", None, queue=queue)
        self.assertTrue(frozen.wait(15), "the flush before b never came")
        InProcessWorker(self, srv.url, srv.token, queue, [wf], lease_seconds=10).start(c)
        self.assertEqual(c.result(run["id"], timeout=30)["status"], "succeeded")
        self.assertEqual(len(b_ran), 1)
        with self.assertLogs("trellis", "WARNING") as logs:
            thaw.set()
            self.assert_let_go(w1, run["id"], b_ran, "the thawed worker ran b's attempt on a lease another worker had taken")
        # The run is abandoned, and the worker says so (as the Go and TypeScript workers do).
        self.assertTrue(any(f"abandoning run {run['id']}" in m for m in logs.output), logs.output)

    def test_no_queued_attempt_after_a_freeze(self):
        """An attempt queued for the step threads while its lease was known
        to last waits there (the only thread busy) while the worker cannot
        heartbeat; when the thread takes it, the worker asks the server, and
        the function does not start."""
        srv, c, queue = self.srv, self.c, self.queue
        plugged, unplug = threading.Event(), threading.Event()
        self.addCleanup(unplug.set)
        b_ran = []

        def plug():
            if not plugged.is_set():
                plugged.set()
                unplug.wait(30)  # the only step thread stays busy
            return 1

        def b():
            b_ran.append(time.time())
            return 2

        @trellis.workflow("resilience.plug")
        async def plug_wf(ctx, _):
            return await ctx.step.run("plug", plug)

        @trellis.workflow("resilience.queued")
        async def queued_wf(ctx, _):
            return await ctx.step.run("b", b)

        w1 = InProcessWorker(self, srv.url, srv.token, queue, [plug_wf, queued_wf], lease_seconds=1, step_threads=1,
                             concurrency=2)  # both slots held: it claims nothing more
        frozen = False
        extend = w1.w._extend

        async def no_heartbeats():
            if not frozen:
                await extend()
        w1.w._extend = no_heartbeats
        w1.start(c)
        c.start("resilience.plug", None, queue=queue)
        self.assertTrue(plugged.wait(15), "the plug never ran")
        run = c.start("resilience.queued", None, queue=queue)
        end = time.time() + 15
        while w1.w.step_pool._q.qsize() == 0 and time.time() < end:
            time.sleep(0.02)
        self.assertEqual(w1.w.step_pool._q.qsize(), 1, "b's attempt never queued behind the plug")
        frozen = True  # the lease lapses; another worker takes the run over
        InProcessWorker(self, srv.url, srv.token, queue, [plug_wf, queued_wf], lease_seconds=10).start(c)
        self.assertEqual(c.result(run["id"], timeout=30)["status"], "succeeded")
        self.assertEqual(len(b_ran), 1)
        unplug.set()
        self.assert_let_go(w1, run["id"], b_ran, "the queued attempt ran on a lease another worker had taken")


if __name__ == "__main__":
    unittest.main()


class ServerNotUpYet(unittest.TestCase):
    """A worker started while its server is down (not up yet, restarting) tries
    to reach it again, with backoff, for up to STARTUP_PATIENCE seconds, as the
    Go worker's registration does, then runs as usual; a token the server
    refuses fails at once, and stop() ends the waiting."""

    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.close)
        self.queue = new_queue()

    def test_worker_started_before_its_server_runs_once_it_is_up(self):
        @trellis.workflow("resilience.early")
        async def early(ctx, inp):
            return await ctx.step.run("echo", lambda: inp)

        hostport = self.srv.url.removeprefix("http://")
        url = self.srv.url
        self.srv.stop()
        w = InProcessWorker(self, url, self.srv.token, self.queue, [early])
        with self.assertLogs("trellis.worker", "INFO") as logs:
            w.thread.start()
            time.sleep(1.5)
            self.assertTrue(w.thread.is_alive(), "the worker gave up on a server down for 1.5 s")
            self.srv.start(hostport)
            c = self.srv.client()
            self.addCleanup(c.close)
            # its run ran: it claims only after it logged that it reached the server
            r = c.start("resilience.early", "hi", queue=self.queue)
            self.assertEqual(c.result(r["id"], timeout=30)["output"], "hi")
        self.assertTrue(any("cannot reach the server at " + url in ln for ln in logs.output), logs.output)
        self.assertTrue(any("reached the server at " + url in ln for ln in logs.output), logs.output)

    def test_refused_token_fails_at_once(self):
        w = trellis.Worker(self.srv.url, "not-a-token", queues=[self.queue])
        w.register(trellis.workflow("resilience.never")(_noop))
        t0 = time.monotonic()
        with self.assertRaises(trellis.ProtocolError) as cm:
            w.run()
        self.assertEqual(cm.exception.code, "unauthenticated")
        self.assertLess(time.monotonic() - t0, 5)

    def test_stop_ends_the_wait_for_a_server(self):
        url = self.srv.url
        self.srv.stop()
        w = trellis.Worker(url, self.srv.token, queues=[self.queue])
        w.register(trellis.workflow("resilience.never2")(_noop))
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        time.sleep(1)
        self.assertTrue(t.is_alive())
        w.stop()
        t.join(5)
        self.assertFalse(t.is_alive(), "stop() did not end a worker waiting for its server")


async def _noop(ctx, _):
    return None
