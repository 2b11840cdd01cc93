"""The SDK's exceptions.

Two families: what a workflow sees (a step that failed, a wait that timed out,
the run's cancellation), and what a caller of the server sees (ProtocolError
for the worker protocol, APIError for the HTTP API).
"""

from __future__ import annotations


class TrellisError(Exception):
    """The base of every error of the SDK."""


class ProtocolError(TrellisError):
    """An error of a worker protocol call: `code` is the Connect code name
    (``aborted``...), `reason` the server's stable ErrorDetail reason
    (``LEASE_LOST``...) when it sent one."""

    def __init__(self, code: str, message: str, reason: str = "", http_status: int | None = None):
        super().__init__(f"{code}: {message}" + (f" ({reason})" if reason else ""))
        self.code, self.message, self.reason, self.http_status = code, message, reason, http_status


class APIError(TrellisError):
    """An error answer of the HTTP API: `status` (HTTP), `code` (stable, e.g.
    ``run_exists``) and `detail`, from its problem document."""

    def __init__(self, status: int, code: str, detail: str, body: dict | None = None):
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail, self.body = status, code, detail, body or {}


class Failure(TrellisError):
    """A recorded failure: a step that failed for good, a wait that timed out, a
    child run that did not succeed. `type` is the recorded error type (e.g.
    ``step_timeout``, ``ValueError``), `non_retryable` as recorded."""

    default_type = ""

    def __init__(self, message: str, type: str | None = None, non_retryable: bool = False):  # noqa: A002
        super().__init__(message)
        self.message = message
        self.type = self.default_type if type is None else type
        self.non_retryable = non_retryable

    def info(self) -> dict:
        d = {"message": self.message}
        if self.type:
            d["type"] = self.type
        if self.non_retryable:
            d["non_retryable"] = True
        return d


class StepError(Failure):
    """Raise it from a step to record an error of a given type; with
    non_retryable=True the step fails at once, without retries. A step that
    failed for good raises it in the workflow."""


class NonRetryable(StepError):
    """A step error that is not retried."""

    def __init__(self, message: str, type: str | None = None):  # noqa: A002
        super().__init__(message, type, non_retryable=True)


class StepTimeout(StepError):
    default_type = "step_timeout"


class EventTimeout(Failure):
    default_type = "event_timeout"


class ApprovalTimeout(Failure):
    default_type = "approval_timeout"


class ChildFailed(Failure):
    """A child run that did not succeed: `run_id`, `status`."""

    def __init__(self, message: str, type: str | None = None, run_id: str = "", status: str = ""):  # noqa: A002
        super().__init__(message, type)
        self.run_id, self.status = run_id, status


class MapFailed(Failure):
    """A map whose items failed (fail-fast): `failed` lists them as recorded
    (``index``, ``run_id``, ``status``, ``message``, ``type``)."""

    default_type = "map_failed"

    def __init__(self, message: str, failed: list):
        super().__init__(message)
        self.failed = failed


class Cancelled(Failure):
    """The run's cancellation, raised by the op that observed it. A workflow may
    catch it to clean up (see Context.detached()); re-raise it (or let it
    propagate) for the run to end cancelled."""

    default_type = "cancelled"

    def __init__(self, message: str = "run cancelled"):
        super().__init__(message)


class DeadlineExceeded(Failure):
    default_type = "deadline_exceeded"

    def __init__(self, message: str = "run deadline exceeded"):
        super().__init__(message)


class NonDeterminismError(TrellisError):
    """The workflow asked for another op than its history holds at a position.
    Never raised into workflow code: the run is saved blocked."""

    def __init__(self, position: int, recorded: str, requested: str):
        super().__init__(f"non-determinism at position {position}: history has {recorded}, code asked for {requested}")
        self.position = position
