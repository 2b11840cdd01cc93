"""A start pinned to a workflow version (its `version`) goes only to a worker
that serves that version (a workflow's version and also_serves); until one
does, it waits, pending, with a wait reason that says which versions the live
workers serve. A start without a version goes to any worker of the workflow."""

from __future__ import annotations

import threading
import time
import unittest

from _harness import Server, new_queue, trellis


def versioned(version, also_serves=()):
    @trellis.workflow("py.versioned", version=version, also_serves=also_serves)
    async def wf(ctx, inp):
        return ctx.version

    return wf


class Versions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.c = cls.srv.client()

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.srv.close()

    def worker(self, q, wf):
        w = trellis.Worker(self.srv.url, self.srv.token, queues=[q], name=f"py-{q}-{wf.version}")
        w.register(wf)
        t = threading.Thread(target=w.run)
        t.start()

        def stop():
            w.stop()
            t.join(30)

        self.addCleanup(stop)
        return w

    def test_pinned_start_waits_for_a_worker_of_its_version(self):
        q = new_queue()
        self.worker(q, versioned(2))
        pinned = self.c.start("py.versioned", None, queue=q, version=3)
        two = self.c.start("py.versioned", None, queue=q, version=2)
        free = self.c.start("py.versioned", None, queue=q)
        self.assertEqual(self.c.result(two["id"], timeout=30)["output"], 2)
        self.assertEqual(self.c.result(free["id"], timeout=30)["output"], 0)
        time.sleep(0.3)
        run = self.c.get(pinned["id"])
        self.assertEqual((run["status"], run.get("pinned"), run["attempts"]), ("pending", True, 0))
        self.assertEqual(run["wait_reason"],
                         'version 3 of workflow "py.versioned" is served by no live worker; live workers serve version 2')
        self.worker(q, versioned(4, also_serves=[3]))
        self.assertEqual(self.c.result(pinned["id"], timeout=30)["output"], 3)

    def test_bad_versions(self):
        with self.assertRaises(ValueError):
            versioned(-1)
        with self.assertRaises(ValueError):
            versioned(2, also_serves=[0])
        with self.assertRaises(trellis.APIError) as e:
            self.c.start("py.versioned", None, version=-1)
        self.assertEqual((e.exception.status, e.exception.code), (400, "invalid_argument"))


if __name__ == "__main__":
    unittest.main()
