"""A worker of the tests' own workflows (beyond the kit), started as a process
with the kit's environment variables."""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import trellis  # noqa: E402
from conformance_worker import mark  # noqa: E402

QUEUE = os.environ.get("TRELLIS_QUEUE", "default")


@trellis.workflow("extra.unencodable")
async def unencodable(ctx, _):
    return await ctx.step.run("bad", lambda: object(), retry=trellis.Retry(max_attempts=1))


@trellis.workflow("extra.non_retryable")
async def non_retryable(ctx, _):
    def declined():
        raise trellis.NonRetryable("card declined", type="declined")

    return await ctx.step.run("charge", declined, retry=trellis.Retry(max_attempts=5, initial=0.01))


@trellis.workflow("extra.reserved_emit")
async def reserved_emit(ctx, _):
    ctx.emit("run.fake", {})


@trellis.workflow("extra.fails")
async def fails(ctx, _):
    raise RuntimeError("boom")


@trellis.workflow("extra.child_fails")
async def child_fails(ctx, _):
    try:
        await ctx.child("extra.fails", None, queue=QUEUE)
    except trellis.ChildFailed as e:
        return {"type": e.type, "status": e.status, "run_id": e.run_id}


@trellis.workflow("extra.maybe_fail")
async def maybe_fail(ctx, n):
    if n == 1:
        raise RuntimeError("item 1 fails")
    return n


@trellis.workflow("extra.map_fails")
async def map_fails(ctx, _):
    try:
        await ctx.map("extra.maybe_fail", [0, 1, 2], queue=QUEUE)
    except trellis.MapFailed as e:
        return {"failed": [f["index"] for f in e.failed]}


@trellis.workflow("extra.patched_backoff")
async def patched_backoff(ctx, _):
    p = ctx.patched("v2")

    def flaky(info):
        if info.attempt == 1:
            raise RuntimeError("first")
        return f"ok {info.attempt}"

    v = await ctx.step.run("flaky", flaky, retry=trellis.Retry(max_attempts=2, initial=2.5, jitter=0))
    return {"patched": p, "value": v}


@trellis.job("extra.flaky_job", retry=trellis.Retry(max_attempts=3, initial=0.1, jitter=0))
def flaky_job(inp, info):
    if info.attempt <= inp["fail"]:
        raise RuntimeError(f"job failure {info.attempt}")
    return f"job ok {info.attempt}"


@trellis.workflow("extra.approvals")
async def approvals(ctx, _):
    d = await ctx.approval("ship", subject="ship it?", details={"order": 7})
    try:
        await ctx.approval("late", timeout=0.5)
        late = "decided"
    except trellis.ApprovalTimeout as e:
        late = e.type
    return {"approved": d["approved"], "comment": d.get("comment"), "late": late}


@trellis.workflow("extra.deadline")
async def deadline(ctx, _):
    await ctx.sleep(30)
    return "too late"


@trellis.workflow("extra.cancel_then_step")
async def cancel_then_step(ctx, _):
    try:
        await ctx.wait_for_event("never")
    except trellis.Cancelled:
        try:
            await ctx.step.run("not_run", lambda: "ran")  # not detached: ends at once, cancelled
        except trellis.Cancelled:
            pass
        raise


@trellis.workflow("extra.stubborn")
async def stubborn(ctx, _):
    def ignores_its_signal(info):
        mark(info, "started")
        time.sleep(30)
        return "late"

    return await ctx.step.run("stubborn", ignores_its_signal)


@trellis.workflow("extra.parallel")
async def parallel(ctx, _):
    async def slow(info):
        await asyncio.sleep(1)
        return info.step

    def slow_sync(info):
        time.sleep(1)
        return info.step

    out = await asyncio.gather(ctx.step.run("a", slow), ctx.step.run("b", slow_sync), ctx.step.run("c", slow))
    await ctx.sleep(2.5)  # released: the replay takes a, b and c from history
    return out


@trellis.workflow("extra.parallel_backoff")
async def parallel_backoff(ctx, _):
    def flaky(info):
        if info.attempt == 1:
            raise RuntimeError("first attempt fails")
        return "x" + str(info.attempt)

    async def slow(info):
        await asyncio.sleep(1)
        return "y"

    return await asyncio.gather(
        ctx.step.run("x", flaky, retry=trellis.Retry(max_attempts=2, initial=2.5, jitter=0)),
        ctx.step.run("y", slow))


@trellis.workflow("extra.parallel_cancel")
async def parallel_cancel(ctx, _):
    # Two steps at once, each waiting for its cancelled event: a cancellation
    # of the run must reach both, not only the one started last.
    def waits(info):
        mark(info, "started")
        if info.cancelled.wait(30):
            mark(info, "cancelled")
            raise RuntimeError("saw the cancellation")
        return "not cancelled"

    return await asyncio.gather(ctx.step.run("a", waits), ctx.step.run("b", waits))


def _charge(ctx, on_unknown):
    # An at-most-once step that records its effect, then (with TRELLIS_AMO_HANG
    # set) blocks until its process is killed.
    def charge(info):
        with open(os.environ["TRELLIS_AMO_EFFECTS"], "a") as f:
            f.write(f"{info.run_id} {info.attempt}\n")
        mark(info, "started")
        if os.environ.get("TRELLIS_AMO_HANG"):
            time.sleep(3600)
        return "receipt"

    return ctx.step.run("charge", charge, at_most_once=True, on_unknown=on_unknown)


@trellis.workflow("extra.amo_error")
async def amo_error(ctx, _):
    try:
        return await _charge(ctx, "error")
    except trellis.StepError as e:
        return {"type": e.type}


@trellis.workflow("extra.amo_fail")
async def amo_fail(ctx, _):
    return {"returned": await _charge(ctx, "fail_run")}


@trellis.workflow("extra.amo_retry")
async def amo_retry(ctx, _):
    def flaky(info):
        if info.attempt == 1:
            raise RuntimeError("declined for now")
        return "b" + str(info.attempt)

    a = await ctx.step.run("once", lambda: "a", at_most_once=True)
    b = await ctx.step.run("flaky", flaky, at_most_once=True, on_unknown="fail_run",
                           retry=trellis.Retry(max_attempts=2, initial=0.01, jitter=0))
    return a + b


@trellis.workflow("extra.amo_bad")
async def amo_bad(ctx, i):
    opts = [{"on_unknown": "fail_run"}, {"at_most_once": True, "on_unknown": "retry"}, {"at_most_once": "yes"}][i]
    return await ctx.step.run("s", lambda: 1, **opts)


@trellis.workflow("extra.detached_child")
async def detached_child(ctx, _):
    return await ctx.start_child("extra.maybe_fail", 5, queue=QUEUE, detached=True)


@trellis.workflow("extra.big")
async def big(ctx, what):
    # 2000 bytes of each kind of payload, for a queue with a payload limit
    # below it (test_failures.QueuePayloadLimit).
    blob = "x" * 2000
    if what == "step":
        return await ctx.step.run("big", lambda: blob)
    if what == "value":
        ctx.set("k", blob)
    elif what == "emit":
        ctx.emit("progress", blob)
    elif what == "output":
        return blob
    return await ctx.step.run("small", lambda: what)


@trellis.job("extra.big_job")
def big_job(_):
    return "x" * 2000


# Workflow retries: "charge" fails its first `fail` calls of the run (2
# attempts per run attempt); the workflow is retried up to 3 attempts.
_charges: dict[str, int] = {}


@trellis.workflow("extra.wfretry", retry=trellis.Retry(max_attempts=3, initial=0.05, jitter=0))
async def wfretry(ctx, inp):
    await ctx.step.run("lookup", lambda: "found")

    def charge():
        n = _charges[ctx.run_id] = _charges.get(ctx.run_id, 0) + 1
        if n <= inp["fail"]:
            raise RuntimeError(f"card service down ({n})")
        return 42

    await ctx.step.run("charge", charge, retry=trellis.Retry(max_attempts=2, initial=0.001))
    return {"workflow_attempt": ctx.workflow_attempt}


@trellis.workflow("extra.wfretry_plain")
async def wfretry_plain(ctx, _):
    def fail():
        raise RuntimeError("always")

    await ctx.step.run("s", fail, retry=trellis.Retry(max_attempts=1))


if __name__ == "__main__":
    env = os.environ
    w = trellis.Worker(env["TRELLIS_SERVER"], env.get("TRELLIS_TOKEN"), queues=[QUEUE],
                       name=env.get("TRELLIS_WORKER_NAME"), lease_seconds=float(env.get("TRELLIS_LEASE_SECONDS", "10")),
                       shutdown_grace=float(env.get("TRELLIS_SHUTDOWN_GRACE", "10")))
    w.register(unencodable, non_retryable, reserved_emit, fails, child_fails, maybe_fail, map_fails, patched_backoff,
               flaky_job, approvals, deadline,
               cancel_then_step, stubborn, parallel, parallel_backoff, parallel_cancel,
               detached_child, amo_error, amo_fail, amo_retry, amo_bad, big, big_job,
               wfretry, wfretry_plain)
    w.run()
