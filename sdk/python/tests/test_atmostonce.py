"""At-most-once steps with real processes: a worker SIGKILLed in the middle of
an attempt leaves it started, and the worker that takes the run over does not
run the step again (on_unknown decides); a failure the attempt reports is
retried as usual; bad options fail the run with a clear error."""

from __future__ import annotations

import os
import unittest

from _harness import ServerCase, WorkerProcess, ops_of, wait_marker

EXTRA = os.path.join(os.path.dirname(__file__), "extra_worker.py")


class AtMostOnce(ServerCase):
    def setUp(self):
        super().setUp()
        self.effects = os.path.join(self.srv.dir, "effects.log")

    def worker(self, **env) -> WorkerProcess:
        w = WorkerProcess(self.srv, self.queue, script=EXTRA, lease_seconds=1,
                          extra_env=dict(TRELLIS_AMO_EFFECTS=self.effects, **env)).wait_live()
        self.addCleanup(w.close)
        return w

    def effect_lines(self) -> list:
        with open(self.effects) as f:
            return f.read().split()

    def test_killed_attempt_not_run_again(self):
        hung = self.worker(TRELLIS_AMO_HANG="1")
        e = self.c.start("extra.amo_error", None, queue=self.queue)
        f = self.c.start("extra.amo_fail", None, queue=self.queue)
        wait_marker(self.srv, e["id"], "charge")
        wait_marker(self.srv, f["id"], "charge")
        hung.kill()
        self.worker()
        run = self.c.result(e["id"], timeout=30)
        self.assertEqual((run["status"], run["output"]), ("succeeded", {"type": "step_outcome_unknown"}))
        run = self.c.result(f["id"], timeout=30)
        self.assertEqual((run["status"], run["error"]["type"]), ("failed", "step_outcome_unknown"))
        self.assertIn("not run again", run["error"]["message"])
        lines = self.effect_lines()
        self.assertEqual(len(lines), 4, f"each step ran once: {lines}")  # two "<run> <attempt>" lines
        for rid in (e["id"], f["id"]):
            op = ops_of(self.c, rid)[0]
            self.assertEqual((op["name"], op["done"], op["error"]["type"]), ("charge", True, "step_outcome_unknown"))
            self.assertEqual(len(op.get("attempt_log") or []), 1, "the unknown attempt stays in the history")

    def test_reported_failure_retried_and_bad_options(self):
        self.worker()
        r = self.c.start("extra.amo_retry", None, queue=self.queue)
        run = self.c.result(r["id"], timeout=30)
        self.assertEqual((run["status"], run["output"]), ("succeeded", "ab2"))
        once, flaky = ops_of(self.c, r["id"])[:2]
        self.assertFalse(once.get("attempt_log"), "no started row left after the first attempt succeeded")
        self.assertTrue(once.get("attempt_started_at"))
        self.assertEqual([a["error"]["message"] for a in flaky.get("attempt_log") or []], ["declined for now"])
        for i, want in enumerate(["applies to at-most-once steps only", "on_unknown must be 'error' or 'fail_run'",
                                  "at_most_once must be a bool"]):
            r = self.c.start("extra.amo_bad", i, queue=self.queue)
            run = self.c.result(r["id"], timeout=30)
            self.assertEqual(run["status"], "failed")
            self.assertIn(want, run["error"]["message"])
            self.assertEqual(ops_of(self.c, r["id"]), [])


if __name__ == "__main__":
    unittest.main()
