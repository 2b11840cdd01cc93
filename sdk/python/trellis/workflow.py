"""Declaring workflows and jobs."""

from __future__ import annotations

import inspect

from ._engine import Retry


MAX_VERSION = 2**31 - 1
"""The highest workflow version a run may be pinned to."""


class Workflow:
    """A registered workflow (``kind == "workflow"``: ``async def fn(ctx,
    input)``) or job (``kind == "job"``: ``fn(input)`` or ``fn(input, info)``,
    sync or async, run as the run's one step).

    `version` and `also_serves` are the versions a worker that registers it
    serves to runs pinned to a version (a start's `version`): such a run goes
    only to a worker that serves its version; a run that is not pinned goes to
    any worker of the workflow."""

    def __init__(self, name: str, fn, kind: str = "workflow", queue: str | None = None, retry: Retry | None = None,
                 timeout: float | None = None, version: int = 0, also_serves=()):
        if not name:
            raise ValueError("a workflow needs a name")
        if kind == "workflow" and not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {name!r}: the function must be async (async def {fn.__name__}(ctx, input))")
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
            raise ValueError(f"workflow {name!r}: version must be an int from 0 to {MAX_VERSION}, got {version!r}")
        also_serves = tuple(also_serves)
        if any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_VERSION for v in also_serves):
            raise ValueError(f"workflow {name!r}: also_serves must hold ints from 1 to {MAX_VERSION}, got {also_serves!r}")
        self.version, self.also_serves = version, also_serves
        self.name, self.fn, self.kind, self.queue, self.retry, self.timeout = name, fn, kind, queue, retry, timeout
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self):
        return f"<trellis {self.kind} {self.name!r}>"

    def served_versions(self) -> list[int]:
        """The versions a worker of this definition serves to pinned runs:
        its version, then also_serves."""
        out = [self.version]
        out += [v for v in self.also_serves if v not in out]
        return out


def workflow(name: str | None = None, *, queue: str | None = None, version: int = 0, also_serves=(),
             retry: Retry | None = None):
    """Declares an async workflow function ``async def fn(ctx, input)``:

        @trellis.workflow("checkout")
        async def checkout(ctx, order):
            receipt = await ctx.step.run("charge", lambda: charge(order))
            return receipt

    `queue` is where ctx.child / ctx.map start it by default. `version` and
    `also_serves` (older versions the code still runs, branching on
    ctx.version) are the versions a worker serves to runs pinned to one."""

    def deco(fn):
        return Workflow(name or fn.__name__, fn, "workflow", queue, retry, version=version, also_serves=also_serves)

    return deco


def job(name: str | None = None, *, queue: str | None = None, retry: Retry | None = None,
        timeout: float | None = None, version: int = 0):
    """Declares a job: one function, no workflow code around it (Go's NewJob).
    Its attempts are retried per `retry`; `timeout` bounds each (seconds)."""

    def deco(fn):
        return Workflow(name or fn.__name__, fn, "job", queue, retry, timeout, version=version)

    return deco
