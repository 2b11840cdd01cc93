"""A worker that meets failures of its own loops or a stalled connection goes
on: an unexpected exception in the claim, cancel or heartbeat loop is logged
and the loop carries on; a connection that stops answering (half-open: open,
silent) is given up after a bound and the call or stream is made again on a
new one. Workers run in this process (so the tests reach inside them) against
a real server."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest

from _harness import Server, new_queue, ops_of, trellis, wait_status


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


class LoopsSurvive(unittest.TestCase):
    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.close)
        self.c = self.srv.client()
        self.addCleanup(self.c.close)
        self.queue = new_queue()

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


if __name__ == "__main__":
    unittest.main()
