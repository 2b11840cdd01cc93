"""Crashes, restarts and stops with real processes: a SIGKILLed worker's run
taken over, replay after a worker and a server restart, a graceful stop that
finishes or hands back its runs; and bad input to the worker and the client."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

from _harness import SDK, Server, ServerCase, WorkerProcess, new_queue, ops_of, trellis, trellis_bin, wait_marker, wait_status


class Crashes(ServerCase):
    def setUp(self):
        super().setUp()
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.close()

    def worker(self, **kw) -> WorkerProcess:
        w = WorkerProcess(self.srv, self.queue, **kw).wait_live()
        self.workers.append(w)
        return w

    def assert_server_alive(self):
        if self.srv.proc.poll() is not None:
            with open(os.path.join(self.srv.dir, "server.log"), errors="replace") as f:
                lines = f.read().splitlines()
            crash = [ln for ln in lines if ln.startswith(("fatal error", "panic"))] + \
                [ln.strip() for ln in lines if "/server/" in ln][:3]
            self.fail(f"the server died (exit {self.srv.proc.returncode}): {crash}")

    def wait_step(self, run_id, name, timeout=15):
        """Waits until step `name` of the run has started (its own marker)."""
        return wait_marker(self.srv, run_id, name, "started", timeout)

    def test_sigkilled_worker_run_taken_over(self):
        w1 = self.worker()
        r = self.c.start("conformance.takeover", {}, queue=self.queue)
        self.wait_step(r["id"], "slow")
        # once a heartbeat reported step slow: the server records its attempt lost
        deadline = time.time() + 15
        while (self.c.get(r["id"]).get("current_step") or {}).get("name") != "slow":
            self.assertLess(time.time(), deadline, "step slow never reported")
            time.sleep(0.05)
        w1.kill()
        killed = time.time()
        self.worker()
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual((run["status"], run["output"]), ("succeeded", "survived"))
        self.assertLess(time.time() - killed, 5 + 4 + 4)
        ops = ops_of(self.c, r["id"])
        self.assertEqual([(o["name"], o["result"], o["attempts"]) for o in ops],
                         [("before", "b", 1), ("slow", "s", 2), ("after", "a", 1)])
        self.assertEqual([(a["attempt"], a["outcome"], a["error"]["type"]) for a in ops[1]["attempt_log"]],
                         [(1, "lost", "attempt_lost")])
        self.assertEqual(run["attempts"], 2)
        evs = [e["event"] for e in self.c.stream(r["id"], timeout=10)]
        self.assertEqual(evs, ["run.started", "step.completed", "run.resumed", "step.completed", "step.completed",
                               "run.succeeded"])

    def test_cancel_stops_a_running_step_at_once(self):
        # The Subscribe stream signals the cancellation: no wait for a
        # heartbeat. With a 30 s lease the worker extends its leases (and so
        # learns of cancellations that way) every 10 s; its first extension
        # comes after the 4 s step 'slow' would have ended by itself. So slow
        # recorded as cancelled proves the signal came through Subscribe; the
        # bound on when the step saw it is only loose (a loaded machine).
        self.worker(lease_seconds=30)
        r = self.c.start("conformance.takeover", {}, queue=self.queue)
        self.wait_step(r["id"], "slow")
        t0 = time.time()
        self.c.cancel(r["id"])
        seen = wait_marker(self.srv, r["id"], "slow", "cancelled", timeout=10)
        self.assertLess(seen - t0, 3)
        run = self.c.result(r["id"], timeout=10)
        self.assertEqual((run["status"], run["error"]["type"]), ("cancelled", "cancelled"))
        ops = ops_of(self.c, r["id"])
        self.assertEqual([(o["name"], o["done"], (o.get("error") or {}).get("type")) for o in ops],
                         [("before", True, None), ("slow", True, "cancelled")])
        evs = [(e["event"], e["data"].get("final")) for e in self.c.stream(r["id"], timeout=10)]
        self.assertEqual(evs[-2:], [("step.failed", True), ("run.cancelled", None)])

    def test_paused_worker_loses_its_lease_and_writes_nothing(self):
        w1 = self.worker()
        r = self.c.start("conformance.takeover", {}, queue=self.queue)
        self.wait_step(r["id"], "slow")
        os.killpg(w1.proc.pid, signal.SIGSTOP)
        try:
            self.worker()  # takes the run over once the 5 s lease expires
            time.sleep(6.5)
        finally:
            os.killpg(w1.proc.pid, signal.SIGCONT)
        time.sleep(1)  # the first worker's late checkpoint reaches the server
        self.assert_server_alive()
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual((run["status"], run["output"]), ("succeeded", "survived"))
        ops = ops_of(self.c, r["id"])
        # slow's frozen attempt is in the history as lost when a heartbeat had
        # reported it before the SIGSTOP; the next attempt is numbered after it
        lost = [a["attempt"] for a in ops[1].get("attempt_log") or () if a.get("outcome") == "lost"]
        self.assertEqual(lost, list(range(1, len(lost) + 1)))
        self.assertEqual([(o["name"], o["attempts"]) for o in ops],
                         [("before", 1), ("slow", 1 + len(lost)), ("after", 1)])
        time.sleep(0.5)
        self.assertIsNone(w1.proc.poll())  # the first worker lives on, its writes refused
        completed = [e["data"]["name"] for e in self.c.stream(r["id"], timeout=10) if e["event"] == "step.completed"]
        self.assertEqual(completed, ["before", "slow", "after"])

    def test_replay_after_worker_and_server_restart(self):
        w1 = self.worker()
        r = self.c.start("conformance.sleep", {"seconds": 4}, queue=self.queue)
        wait_status(self.c, r["id"], "waiting")
        w1.kill()
        self.srv.restart()
        self.worker()
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual(run["output"], "slept")
        ops = ops_of(self.c, r["id"])
        self.assertEqual([(o["kind"], o["done"]) for o in ops], [("timer", True), ("step", True)])

    def test_stream_iterator_survives_a_server_restart(self):
        self.worker()
        r = self.c.start("conformance.event_wait", {}, queue=self.queue)
        wait_status(self.c, r["id"], "waiting")
        got = []
        it = self.c.stream(r["id"], timeout=30)
        got.append(next(it))  # run.started
        got.append(next(it))  # run.waiting
        self.srv.restart()
        self.c.close()
        self.c.send_event(r["id"], "go", 1)
        got.extend(it)
        self.assertEqual([e["event"] for e in got],
                         ["run.started", "run.waiting", "run.resumed", "run.waiting", "run.resumed", "run.succeeded"])
        ids = [int(e["id"]) for e in got]
        self.assertEqual(ids, sorted(set(ids)))

    def test_worker_reconnects_after_server_restart(self):
        self.worker()
        r = self.c.start("conformance.event_wait", {}, queue=self.queue)
        wait_status(self.c, r["id"], "waiting")
        self.srv.restart()
        self.c.close()
        self.c.send_event(r["id"], "go", 7)
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual(run["output"], {"go": 7, "never": "timeout"})

    def test_graceful_stop_finishes_active_runs(self):
        w = self.worker()
        r = self.c.start("conformance.takeover", {}, queue=self.queue)
        self.wait_step(r["id"], "slow")
        t0 = time.time()
        self.assertEqual(w.terminate(), 0)
        self.assertLess(time.time() - t0, 10)
        run = self.c.get(r["id"])
        self.assertEqual((run["status"], run["output"]), ("succeeded", "survived"))
        self.assertFalse(any(x["name"] == w.name for x in self.c.workers()))

    def test_graceful_stop_hands_back_after_grace(self):
        w = self.worker(extra_env={"TRELLIS_SHUTDOWN_GRACE": "0.3"})
        r = self.c.start("conformance.takeover", {}, queue=self.queue)
        self.wait_step(r["id"], "slow")
        self.assertEqual(w.terminate(), 0)
        run = self.c.get(r["id"])
        self.assertEqual(run["status"], "pending")
        self.assertEqual([o["name"] for o in ops_of(self.c, r["id"]) if o["done"]], ["before"])
        self.worker()
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual(run["output"], "survived")
        self.assertEqual([(o["name"], o["attempts"]) for o in ops_of(self.c, r["id"])],
                         [("before", 1), ("slow", 1), ("after", 1)])


    def test_stop_does_not_wait_for_a_stubborn_step(self):
        w = WorkerProcess(self.srv, self.queue, script=os.path.join(os.path.dirname(__file__), "extra_worker.py"),
                          extra_env={"TRELLIS_SHUTDOWN_GRACE": "0.3"}).wait_live()
        self.workers.append(w)
        r = self.c.start("extra.stubborn", None, queue=self.queue)
        wait_marker(self.srv, r["id"], "stubborn")
        t0 = time.time()
        self.assertEqual(w.terminate(timeout=10), 0)
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(self.c.get(r["id"])["status"], "pending")  # handed back


class BadInput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.c = cls.srv.client()

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.srv.close()

    def test_worker_with_a_bad_token(self):
        w = trellis.Worker(self.srv.url, "trl_not-a-token", name="bad")

        @trellis.workflow("x")
        async def x(ctx, inp):
            return 1

        w.register(x)
        with self.assertRaises(trellis.ProtocolError) as e:
            w.run()
        self.assertEqual(e.exception.code, "unauthenticated")

    def test_quick_start_example(self):
        env = dict(os.environ, TRELLIS_SERVER=self.srv.url, TRELLIS_TOKEN=self.srv.token)
        out = subprocess.run([sys.executable, os.path.join(SDK, "examples", "greet.py")], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "HELLO ADA"), out.stderr)

    def test_stop_before_run(self):
        w = trellis.Worker(self.srv.url, self.srv.token, name="early-stop-" + new_queue())

        @trellis.workflow("y")
        async def y(ctx, inp):
            return 1

        w.register(y)
        w.stop()
        t = threading.Thread(target=w.run)
        t.start()
        t.join(15)
        self.assertFalse(t.is_alive())

    def test_registration_errors(self):
        with self.assertRaises(TypeError):
            trellis.workflow("sync")(lambda ctx, inp: 1)
        w = trellis.Worker(self.srv.url, self.srv.token)
        with self.assertRaises(TypeError):
            w.register(lambda: 1)
        with self.assertRaises(ValueError):
            trellis.Worker(self.srv.url, self.srv.token, concurrency=0)
        with self.assertRaises(ValueError):
            trellis.Worker("ftp://x", self.srv.token)
        with self.assertRaises(ValueError):
            trellis.Retry(max_attempts=0)

    def test_client_errors(self):
        with self.assertRaises(trellis.APIError) as e:
            self.c.get("no-such-run")
        self.assertEqual((e.exception.status, e.exception.code), (404, "run_not_found"))
        with self.assertRaises(trellis.APIError) as e:
            self.c.value("no-such-run", "k")
        self.assertEqual((e.exception.status, e.exception.code), (404, "run_not_found"))
        with self.assertRaises(trellis.APIError) as e:
            self.c.start("", {})
        self.assertEqual(e.exception.status, 400)
        with self.assertRaises(ValueError):
            self.c.start("wf", float("nan"))
        bad = trellis.Client(self.srv.url, "trl_nope")
        with self.assertRaises(trellis.APIError) as e:
            bad.list_runs()
        self.assertEqual(e.exception.status, 401)
        bad.close()

    def test_body_over_the_servers_limit(self):
        # The server answers 413 before it has read a body far over its limit
        # and closes; the client reports that answer, not a broken pipe.
        q = new_queue()
        with self.assertRaises(trellis.APIError) as e:
            self.c.start("conformance.three_steps", {"blob": "x" * (24 << 20)}, queue=q)
        self.assertEqual((e.exception.status, e.exception.code), (413, "payload_too_large"))
        self.assertEqual(list(self.c.iter_runs(queue=q)), [])

    def test_client_start_idempotency_and_lists(self):
        q = new_queue()
        a = self.c.start("conformance.three_steps", {"x": 1}, queue=q, idempotency_key="k-" + q)
        b = self.c.start("conformance.three_steps", {"x": 1}, queue=q, idempotency_key="k-" + q)
        self.assertEqual(a["id"], b["id"])
        c = self.c.start("conformance.three_steps", {"x": 2}, queue=q, id="wf-" + q)
        self.assertEqual(c["workflow_id"], "wf-" + q)
        with self.assertRaises(trellis.APIError) as e:
            self.c.start("conformance.three_steps", {"x": 3}, queue=q, id="wf-" + q)
        self.assertEqual(e.exception.code, "run_exists")
        ids = {r["id"] for r in self.c.iter_runs(queue=q, limit=1)}
        self.assertEqual(ids, {a["id"], c["id"]})
        self.assertEqual(self.c.get("wf-" + q)["id"], c["id"])
        pending = self.c.result(a["id"], timeout=1, poll=1)
        self.assertEqual(pending["status"], "pending")
        cancelled = self.c.cancel(a["id"])
        self.assertEqual(cancelled["status"], "cancelled")  # a pending run ends at once


class QueuePayloadLimit(unittest.TestCase):
    """A queue's payload limit reaches the worker with the claimed run
    (ClaimedRun.payload_limit) and holds every payload its runs write."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.c = cls.srv.client()
        cls.queue = new_queue()
        subprocess.run([trellis_bin(), "queues", "create", cls.queue, "--payload-limit", "1000", "--store", cls.srv.store],
                       check=True, capture_output=True)
        cls.w = WorkerProcess(cls.srv, cls.queue, script=os.path.join(os.path.dirname(__file__), "extra_worker.py"))
        cls.w.wait_live()

    @classmethod
    def tearDownClass(cls):
        cls.w.close()
        cls.c.close()
        cls.srv.close()

    def test_every_payload_is_held_to_the_queue_limit(self):
        for what in ("step", "value", "emit", "output"):
            r = self.c.start("extra.big", what, queue=self.queue)
            run = self.c.result(r["id"], timeout=30)
            self.assertEqual(run["status"], "failed", what)
            self.assertIn(f"limit 1000", run["error"]["message"], what)
            self.assertIn(repr(self.queue), run["error"]["message"], what)
        r = self.c.start("extra.big", "step", queue=self.queue)
        self.c.result(r["id"], timeout=30)
        (op,) = ops_of(self.c, r["id"])
        self.assertEqual((op["attempts"], op["error"]["type"]), (1, "payload_too_large"))  # not retried
        job = self.c.start("extra.big_job", None, queue=self.queue)
        run = self.c.result(job["id"], timeout=30)
        self.assertEqual((run["status"], run["error"]["type"]), ("failed", "payload_too_large"))
        ok = self.c.start("extra.big", "fine", queue=self.queue)
        self.assertEqual(self.c.result(ok["id"], timeout=30)["output"], "fine")


class StepErrors(unittest.TestCase):
    """Workflows of the tests' own (tests/extra_worker.py) in a worker process."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.c = cls.srv.client()
        cls.queue = new_queue()
        cls.w = WorkerProcess(cls.srv, cls.queue, script=os.path.join(os.path.dirname(__file__), "extra_worker.py"))
        cls.w.wait_live()

    @classmethod
    def tearDownClass(cls):
        cls.w.close()
        cls.c.close()
        cls.srv.close()

    def run_wf(self, wf, inp=None):
        r = self.c.start(wf, inp, queue=self.queue)
        return self.c.result(r["id"], timeout=30)

    def test_workflow_retries(self):
        """The workflow's policy travels with its failing checkpoint; the failed
        step runs again with a fresh budget, its attempts numbered on; a
        start's own policy is stored with the run."""
        run = self.run_wf("extra.wfretry", {"fail": 4})
        self.assertEqual((run["status"], run["output"]), ("succeeded", {"workflow_attempt": 3}))
        self.assertEqual(run["workflow_attempt"], 3)
        self.assertEqual([(a["attempt"], [(s["name"], s["attempts"]) for s in a["steps"]]) for a in run["workflow_attempts"]],
                         [(1, [("charge", 2)]), (2, [("charge", 4)])])
        lookup, charge = ops_of(self.c, run["id"])
        self.assertEqual((lookup["attempts"], charge["attempts"]), (1, 5))
        self.assertEqual([a["attempt"] for a in charge["attempt_log"]], [1, 2, 3, 4])

        plain = self.run_wf("extra.wfretry_plain")
        self.assertEqual((plain["status"], plain["workflow_attempt"]), ("failed", 1))
        r = self.c.start("extra.wfretry_plain", None, queue=self.queue, retry={"max_attempts": 2, "initial_backoff": "20ms"})
        self.assertEqual(r["retry"]["max_attempts"], 2)
        own = self.c.result(r["id"], timeout=30)
        self.assertEqual((own["status"], own["workflow_attempt"], len(own["workflow_attempts"])), ("failed", 2, 1))
        (s,) = ops_of(self.c, r["id"])
        self.assertEqual(s["attempts"], 2)  # one per run attempt: a fresh budget of 1
        with self.assertRaises(trellis.APIError) as cm:
            self.c.start("extra.wfretry_plain", None, queue=self.queue, retry={"max_attempts": 0})
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("retry.max_attempts", str(cm.exception))

    def test_unencodable_result_fails_the_step(self):
        run = self.run_wf("extra.unencodable")
        self.assertEqual(run["status"], "failed")
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["done"], op["attempts"], op["error"]["type"]), (True, 1, "encoding"))

    def test_non_retryable_and_typed_errors(self):
        run = self.run_wf("extra.non_retryable")
        self.assertEqual(run["status"], "failed")
        self.assertEqual(run["error"]["type"], "declined")
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual(op["attempts"], 1)

    def test_reserved_emit_name_fails_the_run(self):
        run = self.run_wf("extra.reserved_emit")
        self.assertEqual(run["status"], "failed")
        self.assertEqual(run["error"]["type"], "ValueError")

    def test_child_failure_is_caught(self):
        run = self.run_wf("extra.child_fails")
        self.assertEqual(run["output"]["type"], "child_failed")
        self.assertEqual(run["output"]["status"], "failed")

    def test_map_fail_fast(self):
        run = self.run_wf("extra.map_fails")
        self.assertEqual(run["status"], "succeeded")
        self.assertEqual(run["output"]["failed"], [1])

    def test_patched_and_long_backoff(self):
        run = self.run_wf("extra.patched_backoff")
        self.assertEqual(run["output"], {"patched": True, "value": "ok 2"})
        ops = ops_of(self.c, run["id"])
        self.assertEqual([o["kind"] for o in ops], ["patch", "step"])
        evs = [e["event"] for e in self.c.stream(run["id"], timeout=10)]
        self.assertIn("run.waiting", evs)  # a 2.5 s backoff releases the run

    def test_approval_rejected_and_timed_out(self):
        r = self.c.start("extra.approvals", None, queue=self.queue)
        wait_status(self.c, r["id"], "waiting")
        (a,) = self.c.approvals(run=r["id"])
        self.assertEqual((a["subject"], a["status"]), ("ship it?", "pending"))
        self.c.reject(a["id"], comment="not today")
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["output"], {"approved": False, "comment": "not today", "late": "approval_timeout"})
        ops = ops_of(self.c, r["id"])
        self.assertEqual(ops[1]["error"]["type"], "approval_timeout")
        self.assertEqual(self.c.approvals(run=r["id"], status="expired")[0]["name"], "late")

    def test_step_after_cancellation_is_not_run(self):
        r = self.c.start("extra.cancel_then_step", None, queue=self.queue)
        wait_status(self.c, r["id"], "waiting")
        self.c.cancel(r["id"])
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["status"], "cancelled")
        ops = ops_of(self.c, r["id"])
        self.assertEqual((ops[1]["name"], ops[1]["done"], ops[1]["attempts"], ops[1]["error"]["type"]),
                         ("not_run", True, 0, "cancelled"))

    def test_parallel_steps(self):
        run = self.run_wf("extra.parallel")
        self.assertEqual(run["output"], ["a", "b", "c"])
        ops = ops_of(self.c, run["id"])
        self.assertEqual([(o["position"], o["kind"], o["name"]) for o in ops],
                         [(0, "step", "a"), (1, "step", "b"), (2, "step", "c"), (3, "timer", "")])
        steps = [(trellis.parse_time(o["started_at"]), trellis.parse_time(o["finished_at"])) for o in ops[:3]]
        self.assertLess((max(e for _, e in steps) - min(s for s, _ in steps)).total_seconds(), 1.8)
        evs = [e["event"] for e in self.c.stream(run["id"], timeout=10)]
        self.assertEqual(evs, ["run.started", "step.completed", "step.completed", "step.completed", "run.waiting",
                               "run.resumed", "run.succeeded"])

    def test_parallel_step_released_for_its_backoff(self):
        run = self.run_wf("extra.parallel_backoff")
        self.assertEqual(run["output"], ["x2", "y"])
        ops = ops_of(self.c, run["id"])
        self.assertEqual([(o["name"], o["attempts"]) for o in ops], [("x", 2), ("y", 1)])
        evs = [(e["event"], e["data"].get("name")) for e in self.c.stream(run["id"], timeout=10)]
        # y ended before the run was released: its outcome went with the wait
        self.assertEqual(evs, [("run.started", None), ("step.failed", "x"), ("step.completed", "y"),
                               ("run.waiting", None), ("run.resumed", None), ("step.completed", "x"),
                               ("run.succeeded", None)])

    def test_cancel_reaches_every_parallel_step(self):
        r = self.c.start("extra.parallel_cancel", None, queue=self.queue)
        wait_marker(self.srv, r["id"], "a")
        wait_marker(self.srv, r["id"], "b")
        t0 = time.time()
        self.c.cancel(r["id"])
        # each step sees its cancelled event promptly (else it waits 30 s)
        for step in ("a", "b"):
            self.assertLess(wait_marker(self.srv, r["id"], step, "cancelled", timeout=10) - t0, 5, step)
        run = self.c.result(r["id"], timeout=10)
        self.assertEqual((run["status"], run["error"]["type"]), ("cancelled", "cancelled"))
        ops = ops_of(self.c, r["id"])
        self.assertEqual([(o["name"], o["done"], o["error"]["type"]) for o in ops],
                         [("a", True, "cancelled"), ("b", True, "cancelled")])

    def test_detached_child(self):
        run = self.run_wf("extra.detached_child")
        self.assertEqual(run["output"], run["id"] + ".0")
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["kind"], op["done"], op["result"]), ("child", True, {"run_id": run["id"] + ".0"}))
        child = self.c.result(run["output"], timeout=20)
        self.assertEqual((child["status"], child["output"]), ("succeeded", 5))

    def test_run_deadline(self):
        at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1.5)).isoformat().replace("+00:00", "Z")
        r = self.c.start("extra.deadline", None, queue=self.queue, deadline=at)
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual((run["status"], run["error"]["type"]), ("failed", "deadline_exceeded"))

    def test_job_retries_and_history(self):
        run = self.run_wf("extra.flaky_job", {"fail": 1})
        self.assertEqual(run["output"], "job ok 2")
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["position"], op["kind"], op["name"], op["attempts"], op["done"]),
                         (0, "step", "extra.flaky_job", 2, True))


if __name__ == "__main__":
    unittest.main()


