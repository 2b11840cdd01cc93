"""The bench worker of `bench-3-steps` (trellis bench --workload w1 --no-worker):
steps a, b, c each return a 100-character string; the output is the last
one's first 8 characters (internal/bench/bench.go threeSteps).

    python3 sdk/python/bench_worker.py --server URL --token T [--concurrency 256]

Runs in namespace `bench`, queue `default`, until SIGTERM / Ctrl-C."""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trellis  # noqa: E402

PAYLOAD = "trellis-" * 12 + "bench"  # 101 characters, as Go's bench payload


async def noop():
    return PAYLOAD


def noop_sync():
    return PAYLOAD


STEP = noop  # --sync-steps: noop_sync, run on the worker's step threads


@trellis.workflow("bench-3-steps")
async def three_steps(ctx, _):
    out = ""
    for name in ("a", "b", "c"):
        out = await ctx.step.run(name, STEP)
    return out[:8]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=os.environ.get("TRELLIS_SERVER"))
    ap.add_argument("--token", default=os.environ.get("TRELLIS_TOKEN"))
    ap.add_argument("--namespace", default="bench")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--name", default=None)
    ap.add_argument("--sync-steps", action="store_true", help="plain (not async) step functions, run on threads")
    ap.add_argument("--profile", default=None, help="write a cProfile of the worker to this file")
    a = ap.parse_args()
    global STEP
    if a.sync_steps:
        STEP = noop_sync
    w = trellis.Worker(a.server, a.token, namespace=a.namespace, queues=["default"], concurrency=a.concurrency,
                       name=a.name)
    w.register(three_steps)
    if a.profile:
        import cProfile

        cProfile.runctx("w.run()", globals(), {"w": w}, a.profile)
    else:
        w.run()
    print(f"bench worker: {w.stats}", file=sys.stderr)


if __name__ == "__main__":
    main()
