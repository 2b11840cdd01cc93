"""Python and Go workers on one server (the Go SDK's kit worker,
conformance/goworker): a child run of the other language, and a run one
language started that the other finishes after a SIGKILL or while it waits.
Runs of both languages replay each other's histories."""

from __future__ import annotations

import time
import unittest

from _harness import Server, WorkerProcess, new_queue, ops_of, wait_status

srv: Server | None = None
workers: list = []
PY, GO = new_queue(), new_queue()


def setUpModule():
    global srv
    srv = Server()
    workers.append(WorkerProcess(srv, PY).wait_live())
    workers.append(WorkerProcess(srv, GO, script="go").wait_live())


def tearDownModule():
    for w in workers:
        w.close()
    if srv:
        srv.close()


class Interop(unittest.TestCase):
    def setUp(self):
        self.c = srv.client()
        self.addCleanup(self.c.close)

    def test_children_of_the_other_language(self):
        for parent, child in ((PY, GO), (GO, PY)):
            r = self.c.start("conformance.child", {"n": 21, "queue": child}, queue=parent)
            run = self.c.result(r["id"], timeout=30)
            self.assertEqual(run["output"], 42, (parent, child))
            (kid,) = self.c.children(r["id"], 0)
            self.assertEqual((kid["queue"], kid["parent_id"], kid["id"]), (child, r["id"], r["id"] + ".0"))

    def test_streams_look_alike(self):
        evs = {}
        for q in (PY, GO):
            r = self.c.start("conformance.emit", {}, queue=q)
            self.c.result(r["id"], timeout=30)
            evs[q] = [(e["event"], {k: v for k, v in e["data"].items() if k != "duration_ms"})
                      for e in self.c.stream(r["id"], timeout=10)]
        self.assertEqual(evs[PY], evs[GO])


class Handover(unittest.TestCase):
    """One queue served by a Python worker, then a Go one (and back)."""

    def setUp(self):
        self.c = srv.client()
        self.addCleanup(self.c.close)
        self.q = new_queue()
        self.ws = []

    def tearDown(self):
        for w in self.ws:
            w.close()

    def start_worker(self, lang):
        w = WorkerProcess(srv, self.q, script="go" if lang == "go" else "conformance_worker.py").wait_live()
        self.ws.append(w)
        return w

    def test_python_run_taken_over_by_go(self):
        py = self.start_worker("py")
        r = self.c.start("conformance.takeover", {}, queue=self.q)
        while not any(o["name"] == "before" and o["done"] for o in ops_of(self.c, r["id"])):
            time.sleep(0.05)
        time.sleep(0.8)
        py.kill()
        self.start_worker("go")
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual(run["output"], "survived")
        ops = ops_of(self.c, r["id"])
        # slow's killed attempt is in the history as lost when a heartbeat had
        # reported it; the Go worker numbers its attempt after it
        lost = [a["attempt"] for a in ops[1].get("attempt_log") or () if a.get("outcome") == "lost"]
        self.assertEqual(lost, list(range(1, len(lost) + 1)))
        self.assertEqual([(o["name"], o["attempts"]) for o in ops],
                         [("before", 1), ("slow", 1 + len(lost)), ("after", 1)])

    def test_go_waits_finished_by_python(self):
        go = self.start_worker("go")
        r1 = self.c.start("conformance.event_wait", {}, queue=self.q)
        r2 = self.c.start("conformance.sleep", {"seconds": 3}, queue=self.q)
        r3 = self.c.start("conformance.map", {"count": 6, "concurrency": 2}, queue=self.q)
        wait_status(self.c, r1["id"], "waiting")
        wait_status(self.c, r2["id"], "waiting")
        time.sleep(0.3)
        go.kill()
        self.start_worker("py")
        self.c.send_event(r1["id"], "go", {"color": "green"})
        self.assertEqual(self.c.result(r1["id"], timeout=30)["output"], {"go": {"color": "green"}, "never": "timeout"})
        self.assertEqual(self.c.result(r2["id"], timeout=30)["output"], "slept")
        self.assertEqual(self.c.result(r3["id"], timeout=60)["output"], [0, 2, 4, 6, 8, 10])


if __name__ == "__main__":
    unittest.main()
