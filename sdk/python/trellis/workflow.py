"""Declaring workflows and jobs."""

from __future__ import annotations

import inspect

from ._engine import Retry


class Workflow:
    """A registered workflow (``kind == "workflow"``: ``async def fn(ctx,
    input)``) or job (``kind == "job"``: ``fn(input)`` or ``fn(input, info)``,
    sync or async, run as the run's one step)."""

    def __init__(self, name: str, fn, kind: str = "workflow", queue: str | None = None, retry: Retry | None = None,
                 timeout: float | None = None):
        if not name:
            raise ValueError("a workflow needs a name")
        if kind == "workflow" and not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {name!r}: the function must be async (async def {fn.__name__}(ctx, input))")
        self.name, self.fn, self.kind, self.queue, self.retry, self.timeout = name, fn, kind, queue, retry, timeout
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self):
        return f"<trellis {self.kind} {self.name!r}>"


def workflow(name: str | None = None, *, queue: str | None = None):
    """Declares an async workflow function ``async def fn(ctx, input)``:

        @trellis.workflow("checkout")
        async def checkout(ctx, order):
            receipt = await ctx.step.run("charge", lambda: charge(order))
            return receipt

    `queue` is where ctx.child / ctx.map start it by default."""

    def deco(fn):
        return Workflow(name or fn.__name__, fn, "workflow", queue)

    return deco


def job(name: str | None = None, *, queue: str | None = None, retry: Retry | None = None,
        timeout: float | None = None):
    """Declares a job: one function, no workflow code around it (Go's NewJob).
    Its attempts are retried per `retry`; `timeout` bounds each (seconds)."""

    def deco(fn):
        return Workflow(name or fn.__name__, fn, "job", queue, retry, timeout)

    return deco
