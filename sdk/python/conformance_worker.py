"""The conformance kit's worker in Python: the 16 kit workflows, served on
TRELLIS_QUEUE through TRELLIS_SERVER (`trellis conformance --worker-cmd
'python3 sdk/python/conformance_worker.py'`). Stops gracefully on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trellis  # noqa: E402

QUEUE = os.environ.get("TRELLIS_QUEUE", "default")


def mark(info, what: str) -> None:
    """Not part of the kit's contract: for the SDK's own tests (their harness
    sets TRELLIS_TEST_MARKERS), a step leaves a file saying when it reached
    `what` ("started", "cancelled"), so that a test waits for the step itself
    rather than guessing how long it takes to start."""
    d = os.environ.get("TRELLIS_TEST_MARKERS")
    if not d:
        return
    path = os.path.join(d, f"{info.run_id}.{info.step}.{info.attempt}.{what}")
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.replace(path + ".tmp", path)


@trellis.workflow("conformance.three_steps")
async def three_steps(ctx, inp):
    a = await ctx.step.run("add", lambda: inp["x"] + 1)
    b = await ctx.step.run("mul", lambda: a * 10)
    return await ctx.step.run("format", lambda: f"result={b}")


@trellis.workflow("conformance.retries")
async def retries(ctx, inp):
    def flaky(info):
        if info.attempt <= inp["fail_times"]:
            raise RuntimeError(f"flaky failure {info.attempt}")
        return f"ok after {info.attempt}"

    return await ctx.step.run("flaky", flaky, retry=trellis.Retry(max_attempts=4, initial=0.2, factor=2, jitter=0))


@trellis.workflow("conformance.step_timeout")
async def step_timeout(ctx, inp):
    def slow(info):
        if info.cancelled.wait(10):
            raise TimeoutError("slow: aborted")
        return "slow"

    try:
        await ctx.step.run("slow", slow, timeout=0.3, retry=trellis.Retry(max_attempts=2, initial=0.1, jitter=0))
    except trellis.StepError as e:
        return {"error_type": e.type}
    return {"error_type": None}


@trellis.workflow("conformance.sleep")
async def sleep(ctx, inp):
    await ctx.sleep(inp["seconds"])
    return await ctx.step.run("after", lambda: "slept")


@trellis.workflow("conformance.event_wait")
async def event_wait(ctx, inp):
    p = await ctx.wait_for_event("go", timeout=60)
    try:
        await ctx.wait_for_event("never", timeout=1)
        never = "arrived"
    except trellis.EventTimeout:
        never = "timeout"
    return {"go": p, "never": never}


@trellis.workflow("conformance.approval")
async def approval(ctx, inp):
    d = await ctx.approval("ship")
    return {"approved": d["approved"]}


@trellis.workflow("conformance.double")
async def double(ctx, inp):
    return await ctx.step.run("double", lambda: inp["n"] * 2)


@trellis.workflow("conformance.child")
async def child(ctx, inp):
    # queue, when given, is another worker's queue, of any language (docs/conformance.md)
    return await ctx.child("conformance.double", {"n": inp["n"]}, queue=inp.get("queue") or QUEUE)


@trellis.workflow("conformance.map")
async def map_(ctx, inp):
    items = [{"n": i} for i in range(inp["count"])]
    return await ctx.map("conformance.double", items, concurrency=inp["concurrency"], queue=QUEUE)


@trellis.workflow("conformance.select")
async def select(ctx, inp):
    timer = ctx.timer(60)
    pick = ctx.event("pick")
    i = await ctx.select(timer, pick)
    return {"index": i, "value": await pick if i == 1 else None}


@trellis.workflow("conformance.cancel")
async def cancel(ctx, inp):
    await ctx.step.run("work", lambda: "worked")
    try:
        await ctx.wait_for_event("never")
    except trellis.Cancelled:
        await ctx.detached().step.run("cleanup", lambda: "cleaned")
        raise
    return "not cancelled"


@trellis.workflow("conformance.kv")
async def kv(ctx, inp):
    ctx.set("a", 1)
    ctx.set("b", {"x": 2})
    ctx.delete("a")
    return {"a": ctx.get("a"), "b": ctx.get("b")}


@trellis.workflow("conformance.emit")
async def emit(ctx, inp):
    ctx.emit("progress", {"pct": 50})
    await ctx.step.run("work", lambda: "w")
    ctx.emit("progress", {"pct": 100})
    return "done"


@trellis.workflow("conformance.nondeterminism")
async def nondeterminism(ctx, inp):
    if ctx.attempt == 1:
        await ctx.step.run("before", lambda: "before")
    else:
        await ctx.step.run("after", lambda: "after")
    await ctx.wait_for_event("next")
    return "unreachable"


@trellis.job("conformance.job_sum")
def job_sum(inp):
    return inp["a"] + inp["b"]


@trellis.workflow("conformance.takeover")
async def takeover(ctx, inp):
    await ctx.step.run("before", lambda: "b")

    async def slow(info):
        mark(info, "started")
        try:
            await asyncio.sleep(4)
        except asyncio.CancelledError:
            mark(info, "cancelled")
            raise
        return "s"

    await ctx.step.run("slow", slow)
    await ctx.step.run("after", lambda: "a")
    return "survived"


@trellis.workflow("conformance.at_most_once")
async def at_most_once(ctx, inp):
    await ctx.step.run("before", lambda: "b")

    async def charge(info):
        mark(info, "started")
        await asyncio.sleep(4)
        return "c"

    try:
        c = await ctx.step.run("charge", charge, at_most_once=True)
    except trellis.StepError as e:
        return {"error_type": e.type}
    return {"charged": c}


@trellis.workflow("conformance.recorded")
async def recorded(ctx, inp):
    now = ctx.now()
    u = ctx.uuid()
    ctx.random()
    return {"now": trellis.format_time(now), "uuid": u}


@trellis.workflow("conformance.workflow_retry", retry=trellis.Retry(max_attempts=3, initial=0.1, factor=2, jitter=0))
async def workflow_retry(ctx, inp):
    await ctx.step.run("lookup", lambda: "found")

    def flaky(info):
        if info.attempt <= inp["fail_times"]:
            raise RuntimeError(f"flaky failure {info.attempt}")
        return f"ok after {info.attempt}"

    result = await ctx.step.run("flaky", flaky, retry=trellis.Retry(max_attempts=2, initial=0.05, factor=1, jitter=0))
    return {"workflow_attempt": ctx.workflow_attempt, "result": result}


WORKFLOWS = [three_steps, retries, step_timeout, sleep, event_wait, approval, double, child, map_, select, cancel, kv,
             emit, nondeterminism, job_sum, takeover, at_most_once, recorded, workflow_retry]


def main():
    env = os.environ
    w = trellis.Worker(env["TRELLIS_SERVER"], env.get("TRELLIS_TOKEN"), namespace=env.get("TRELLIS_NAMESPACE", "default"),
                       queues=[QUEUE], name=env.get("TRELLIS_WORKER_NAME"),
                       lease_seconds=float(env.get("TRELLIS_LEASE_SECONDS", "10")),
                       # Not part of the kit's contract: the SDK's own tests shorten the grace.
                       shutdown_grace=float(env.get("TRELLIS_SHUTDOWN_GRACE", "10")))
    w.register(*WORKFLOWS)
    w.run()


if __name__ == "__main__":
    main()
