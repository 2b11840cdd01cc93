"""Trellis for Python: workflows and jobs run by a worker through a Trellis
server (the worker protocol, Connect's JSON protocol over HTTP/1.1), and a
client of its HTTP API. Standard library only; Python 3.10+.

    import trellis

    @trellis.workflow("greet")
    async def greet(ctx, name):
        return await ctx.step.run("hello", lambda: f"hello {name}")

    trellis.Worker("http://127.0.0.1:7070", token).register(greet).run()
"""

from ._engine import Context, Retry, StepInfo, child_run_id
from ._wire import fmt_time as format_time, parse_time
from .client import Client
from .errors import (
    APIError,
    ApprovalTimeout,
    Cancelled,
    ChildFailed,
    DeadlineExceeded,
    EventTimeout,
    Failure,
    MapFailed,
    NonDeterminismError,
    NonRetryable,
    ProtocolError,
    StepError,
    StepTimeout,
    TrellisError,
)
from .worker import Worker
from .workflow import Workflow, job, workflow

__version__ = "0.1.0"

__all__ = [
    "APIError", "ApprovalTimeout", "Cancelled", "ChildFailed", "Client", "Context", "DeadlineExceeded",
    "EventTimeout", "Failure", "MapFailed", "NonDeterminismError", "NonRetryable", "ProtocolError", "Retry",
    "StepError", "StepInfo", "StepTimeout", "TrellisError", "Worker", "Workflow", "child_run_id", "job",
    "workflow", "format_time", "parse_time",
]
