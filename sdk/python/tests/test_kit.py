"""The kit's workflows (conformance_worker.py) run by a worker process against a
real trellis server: outputs, histories, streams, and the waits the tests
drive through the client."""

from __future__ import annotations

import datetime as dt
import time
import unittest

from _harness import Server, WorkerProcess, new_queue, ops_of, trellis, wait_status

srv: Server | None = None
worker: WorkerProcess | None = None
QUEUE = new_queue()


def setUpModule():
    global srv, worker
    srv = Server()
    worker = WorkerProcess(srv, QUEUE).wait_live()


def tearDownModule():
    if worker:
        worker.close()
    if srv:
        srv.close()


def t(s):
    return trellis.parse_time(s)


class KitTest(unittest.TestCase):
    def setUp(self):
        self.c = srv.client()
        self.addCleanup(self.c.close)

    def run_wf(self, wf, inp, timeout=30):
        r = self.c.start(wf, inp, queue=QUEUE)
        return self.c.result(r["id"], timeout=timeout)

    def test_three_steps(self):
        run = self.run_wf("conformance.three_steps", {"x": 2})
        self.assertEqual(run["status"], "succeeded")
        self.assertEqual(run["output"], "result=30")
        ops = ops_of(self.c, run["id"])
        self.assertEqual([(o["kind"], o["name"], o["result"], o["done"], o["attempts"]) for o in ops],
                         [("step", "add", 3, True, 1), ("step", "mul", 30, True, 1),
                          ("step", "format", "result=30", True, 1)])
        evs = [(e["event"], e["data"]) for e in self.c.stream(run["id"], timeout=10)]
        self.assertEqual([e for e, _ in evs], ["run.started", "step.completed", "step.completed", "step.completed",
                                               "run.succeeded"])
        self.assertEqual(evs[0][1], {"attempt": 1, "workflow": "conformance.three_steps"})
        self.assertEqual(evs[1][1]["name"], "add")
        self.assertEqual(evs[1][1]["attempt"], 1)
        self.assertEqual(evs[-1][1], {"result": "result=30"})

    def test_retries_back_off(self):
        run = self.run_wf("conformance.retries", {"fail_times": 2})
        self.assertEqual(run["output"], "ok after 3")
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["name"], op["done"], op["attempts"]), ("flaky", True, 3))
        log = op["attempt_log"]
        self.assertEqual([a["error"]["message"] for a in log], ["flaky failure 1", "flaky failure 2"])
        self.assertEqual(log[0]["error"]["type"], "RuntimeError")
        gap1 = (t(log[1]["started_at"]) - t(log[0]["finished_at"])).total_seconds()
        gap2 = (t(op["attempt_started_at"]) - t(log[1]["finished_at"])).total_seconds()
        self.assertGreaterEqual(gap1, 0.2)
        self.assertGreaterEqual(gap2, 0.4)
        names = [(e["event"], e["data"].get("attempt"), e["data"].get("final")) for e in
                 self.c.stream(run["id"], timeout=10) if e["event"].startswith("step.")]
        self.assertEqual(names, [("step.failed", 1, None), ("step.failed", 2, None), ("step.completed", 3, None)])

    def test_step_timeout(self):
        t0 = time.monotonic()
        run = self.run_wf("conformance.step_timeout", {})
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(run["output"], {"error_type": "step_timeout"})
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["done"], op["attempts"], op["error"]["type"]), (True, 2, "step_timeout"))
        self.assertIn("step attempt timed out after 300ms", op["error"]["message"])

    def test_sleep_releases_the_run(self):
        r = self.c.start("conformance.sleep", {"seconds": 3}, queue=QUEUE)
        waiting = wait_status(self.c, r["id"], "waiting")
        self.assertIn("sleeping until", waiting["wait_reason"])
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["output"], "slept")
        ops = ops_of(self.c, run["id"])
        self.assertEqual([o["kind"] for o in ops], ["timer", "step"])
        self.assertTrue(ops[0]["done"])
        due = t(ops[0]["result"])
        self.assertGreaterEqual((t(run["finished_at"]) - t(run["started_at"])).total_seconds(), 3)
        self.assertGreaterEqual(t(ops[1]["started_at"]), due)
        evs = [e["event"] for e in self.c.stream(run["id"], timeout=10)]
        self.assertEqual(evs, ["run.started", "run.waiting", "run.resumed", "step.completed", "run.succeeded"])

    def test_short_sleep_in_place(self):
        run = self.run_wf("conformance.sleep", {"seconds": 1})
        self.assertEqual(run["output"], "slept")
        evs = [e["event"] for e in self.c.stream(run["id"], timeout=10)]
        self.assertNotIn("run.waiting", evs)

    def test_event_wait_and_timeout(self):
        r = self.c.start("conformance.event_wait", {}, queue=QUEUE)
        w = wait_status(self.c, r["id"], "waiting")
        self.assertIn('waiting for event "go"', w["wait_reason"])
        self.c.send_event(r["id"], "go", {"color": "green"})
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["output"], {"go": {"color": "green"}, "never": "timeout"})
        ops = ops_of(self.c, run["id"])
        self.assertEqual([(o["kind"], o["name"], o["done"]) for o in ops], [("event", "go", True), ("event", "never", True)])
        self.assertEqual(ops[0]["result"], {"color": "green"})
        self.assertEqual(ops[1]["error"]["type"], "event_timeout")

    def test_approval(self):
        r = self.c.start("conformance.approval", {}, queue=QUEUE)
        wait_status(self.c, r["id"], "waiting")
        (a,) = self.c.approvals(run=r["id"])
        self.assertEqual((a["name"], a["status"]), ("ship", "pending"))
        self.c.approve(a["id"], comment="lgtm")
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["output"], {"approved": True})
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["kind"], op["name"], op["done"]), ("approval", "ship", True))
        self.assertEqual(op["result"]["comment"], "lgtm")
        with self.assertRaises(trellis.APIError) as e:
            self.c.approve(a["id"])
        self.assertEqual(e.exception.code, "approval_decided")

    def test_child(self):
        run = self.run_wf("conformance.child", {"n": 21})
        self.assertEqual(run["output"], 42)
        (op,) = ops_of(self.c, run["id"])
        self.assertEqual((op["kind"], op["name"], op["done"], op["result"]), ("child", "conformance.double", True, 42))
        (child,) = self.c.children(run["id"], 0)
        self.assertEqual(child["id"], trellis.child_run_id(run["id"], 0))
        self.assertEqual(child["parent_id"], run["id"])
        self.assertEqual(child["queue"], QUEUE)

    def test_map_bounds_concurrency(self):
        run = self.run_wf("conformance.map", {"count": 20, "concurrency": 5}, timeout=60)
        self.assertEqual(run["output"], [2 * i for i in range(20)])
        kids = self.c.children(run["id"], 0)
        self.assertEqual([k["id"] for k in kids], [trellis.child_run_id(run["id"], 0, i) for i in range(20)])
        spans = [(t(k["started_at"]), t(k["finished_at"])) for k in kids]
        for s, _ in spans:
            self.assertLessEqual(sum(1 for a, b in spans if a <= s < b), 5)

    def test_select_event_wins(self):
        r = self.c.start("conformance.select", {}, queue=QUEUE)
        wait_status(self.c, r["id"], "waiting")
        self.c.send_event(r["id"], "pick", "b")
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["output"], {"index": 1, "value": "b"})
        ops = ops_of(self.c, run["id"])
        sel = [o for o in ops if o["kind"] == "select"]
        self.assertEqual(sel[0]["result"], 1)
        self.assertEqual([o["kind"] for o in ops], ["timer", "event", "select"])

    def test_cancel_runs_cleanup(self):
        r = self.c.start("conformance.cancel", {}, queue=QUEUE)
        wait_status(self.c, r["id"], "waiting")
        self.c.cancel(r["id"])
        run = self.c.result(r["id"], timeout=20)
        self.assertEqual(run["status"], "cancelled")
        self.assertEqual(run["error"]["type"], "cancelled")
        ops = ops_of(self.c, run["id"])
        steps = [(o["name"], o["result"]) for o in ops if o["kind"] == "step"]
        self.assertEqual(steps, [("work", "worked"), ("cleanup", "cleaned")])
        evs = [e["event"] for e in self.c.stream(run["id"], timeout=10)]
        self.assertEqual(evs[-1], "run.cancelled")
        with self.assertRaises(trellis.APIError) as e:
            self.c.send_event(run["id"], "late")
        self.assertEqual(e.exception.code, "run_finished")

    def test_kv(self):
        run = self.run_wf("conformance.kv", {})
        self.assertEqual(run["output"], {"a": None, "b": {"x": 2}})
        self.assertEqual([(o["kind"], o["name"]) for o in ops_of(self.c, run["id"])],
                         [("set", "a"), ("set", "b"), ("delete", "a")])
        self.assertEqual(self.c.value(run["id"], "b"), {"x": 2})
        with self.assertRaises(trellis.APIError) as e:
            self.c.value(run["id"], "a")
        self.assertEqual(e.exception.status, 404)

    def test_emit_stream_order(self):
        run = self.run_wf("conformance.emit", {})
        self.assertEqual(run["output"], "done")
        evs = [(e["event"], e["data"]) for e in self.c.stream(run["id"], timeout=10)]
        self.assertEqual([e for e, _ in evs], ["run.started", "progress", "step.completed", "progress", "run.succeeded"])
        self.assertEqual(evs[1][1], {"pct": 50})
        self.assertEqual(evs[3][1], {"pct": 100})
        self.assertEqual([(o["kind"], o["name"]) for o in ops_of(self.c, run["id"])],
                         [("emit", "progress"), ("step", "work"), ("emit", "progress")])

    def test_nondeterminism_blocks(self):
        r = self.c.start("conformance.nondeterminism", {}, queue=QUEUE)
        wait_status(self.c, r["id"], "waiting")
        self.c.send_event(r["id"], "next")
        run = wait_status(self.c, r["id"], "blocked")
        self.assertEqual(run["error"]["type"], "non_determinism")
        self.assertIn("position 0", run["error"]["message"])
        self.assertIn('history has step "before", code asked for step "after"', run["error"]["message"])

    def test_job(self):
        run = self.run_wf("conformance.job_sum", {"a": 2, "b": 3})
        self.assertEqual((run["status"], run["output"]), ("succeeded", 5))

    def test_recorded_values(self):
        run = self.run_wf("conformance.recorded", {})
        ops = ops_of(self.c, run["id"])
        self.assertEqual([o["kind"] for o in ops], ["now", "uuid", "random"])
        self.assertEqual(ops[0]["result"], run["output"]["now"])
        self.assertEqual(ops[1]["result"], run["output"]["uuid"])
        self.assertIsInstance(ops[2]["result"], int)
        self.assertTrue(0 <= ops[2]["result"] < 2 ** 64)
        self.assertLess(abs((t(run["output"]["now"]) - dt.datetime.now(dt.timezone.utc)).total_seconds()), 60)


if __name__ == "__main__":
    unittest.main()
