"""A client of the server's HTTP API (docs/http-api.md)."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
import uuid

from ._wire import _Endpoint, dumps
from .errors import APIError


class Client:
    """Starts and steers runs through a Trellis server. Safe to share between
    threads (each keeps its own keep-alive connection)."""

    def __init__(self, server: str, token: str | None = None, *, namespace: str = "default", timeout: float = 90.0):
        self.namespace = namespace
        self._ep = _Endpoint(server, token, timeout)
        self._local = threading.local()

    def close(self):
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # --- plumbing ---

    def _path(self, *parts, query: dict | None = None, ns: str | None = None) -> str:
        p = self._ep.base + "/v1/namespaces/" + urllib.parse.quote(ns or self.namespace, safe="")
        for x in parts:
            p += "/" + urllib.parse.quote(str(x), safe=":")
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                p += "?" + urllib.parse.urlencode(q)
        return p

    def _request(self, method: str, path: str, body=None, headers: dict | None = None):
        data = None if body is None else dumps(body)
        h = self._ep.headers("application/json", headers)
        for tries in range(2):
            c = getattr(self._local, "conn", None)
            if c is None:
                c = self._ep.connect()
                self._local.conn = c
            try:
                try:
                    c.request(method, path, data, h)
                except (BrokenPipeError, ConnectionResetError):
                    # A server may answer before it has read the whole body (413
                    # payload_too_large) and close: its answer is still there to read.
                    if data is None:
                        raise
                r = c.getresponse()
                raw = r.read()
            except (OSError, http.client.HTTPException):
                c.close()
                self._local.conn = None
                if tries == 0 and (method == "GET" or (headers and "Idempotency-Key" in headers)):
                    continue
                raise
            if r.status >= 400:
                try:
                    doc = json.loads(raw)
                except ValueError:
                    doc = {}
                raise APIError(r.status, doc.get("code", ""), doc.get("detail", raw[:200].decode("utf-8", "replace")),
                               doc)
            return r.status, (json.loads(raw) if raw else None)
        raise AssertionError("unreachable")

    def _mutate(self, path: str, body=None, idempotency_key: str | None = None):
        return self._request("POST", path, body, {"Idempotency-Key": idempotency_key or str(uuid.uuid4())})

    # --- runs ---

    def start(self, workflow, input=None, *, id: str | None = None, queue: str | None = None,  # noqa: A002
              priority: int | None = None, deadline: str | None = None, available_at: str | None = None,
              reuse: str | None = None, idempotency_key: str | None = None, version: int | None = None,
              retry: dict | None = None) -> dict:
        """Starts a run of `workflow` (a name or a decorated workflow) and returns
        the run as created. `id` is the workflow ID; `idempotency_key` makes a
        retried start create one run; `version` pins the run to that workflow
        version: only a worker that serves it runs it (None or 0: not pinned). `retry` is the run's workflow retry policy as the
        API takes it (``{"max_attempts": 3, "initial_backoff": "1s", ...}``,
        docs/workflow-retries.md), stored with the run: it replaces the
        workflow's."""
        name = workflow if isinstance(workflow, str) else workflow.name
        if queue is None and not isinstance(workflow, str):
            queue = getattr(workflow, "queue", None)
        body = {"workflow": name, "input": input}
        for k, v in (("id", id), ("queue", queue), ("priority", priority), ("deadline", deadline),
                     ("available_at", available_at), ("reuse", reuse), ("version", version or None), ("retry", retry)):
            if v is not None:
                body[k] = v
        _, run = self._mutate(self._path("runs"), body, idempotency_key)
        return run

    def get(self, run_id: str) -> dict:
        return self._request("GET", self._path("runs", run_id))[1]

    def result(self, run_id: str, timeout: float = 60.0, poll: float = 30.0) -> dict:
        """Waits (long polls, `poll` seconds each) until the run ended or
        `timeout` seconds passed, and returns the run (check its "status")."""
        import time as _t

        end = _t.monotonic() + timeout
        while True:
            left = end - _t.monotonic()
            w = max(1, min(int(poll), 60, int(left) if left > 1 else 1))
            status, run = self._request("GET", self._path("runs", run_id, "result", query={"wait": f"{w}s"}))
            if status == 200 or _t.monotonic() >= end:
                return run

    def output(self, run_id: str, timeout: float = 60.0):
        """Waits for the run and returns its output; raises APIError-like
        RunFailed (a TrellisError) when it did not succeed."""
        run = self.result(run_id, timeout)
        if run.get("status") != "succeeded":
            from .errors import Failure

            e = run.get("error") or {}
            raise Failure(f"run {run_id} {run.get('status')}: {e.get('message', '')}", e.get("type", ""))
        return run.get("output")

    def cancel(self, run_id: str, idempotency_key: str | None = None) -> dict:
        return self._mutate(self._path("runs", run_id, "cancel"), None, idempotency_key)[1]

    def resume(self, run_id: str) -> dict:
        return self._mutate(self._path("runs", run_id, "resume"))[1]

    def send_event(self, run_id: str, name: str, payload=None, idempotency_key: str | None = None) -> None:
        self._mutate(self._path("runs", run_id, "events"), {"name": name, "payload": payload}, idempotency_key)

    def list_runs(self, *, status=None, workflow: str | None = None, workflow_id: str | None = None,
                  queue: str | None = None, limit: int | None = None, page_token: str | None = None) -> dict:
        """One page: {"runs": [...], "next_page_token": ...}."""
        if isinstance(status, (list, tuple)):
            status = ",".join(status)
        q = {"status": status, "workflow": workflow, "workflow_id": workflow_id, "queue": queue, "limit": limit,
             "page_token": page_token}
        return self._request("GET", self._path("runs", query=q))[1]

    def iter_runs(self, **kw):
        """Every run matching the filters, page after page."""
        tok = None
        while True:
            page = self.list_runs(page_token=tok, **kw)
            yield from page.get("runs") or ()
            tok = page.get("next_page_token")
            if not tok:
                return

    def history(self, run_id: str) -> dict:
        """The run and its ops ({"format": "trellis.history/v1", "run", "ops"})."""
        return self._request("GET", self._path("runs", run_id, "history"))[1]

    def children(self, run_id: str, position: int) -> list:
        return self._request("GET", self._path("runs", run_id, "children", query={"position": position}))[1]["runs"]

    def value(self, run_id: str, key: str):
        return self._request("GET", self._path("runs", run_id, "values", key))[1]["value"]

    def workers(self) -> list:
        return self._request("GET", self._path("workers"))[1]["workers"]

    # --- approvals ---

    def approvals(self, *, run: str | None = None, status: str | None = None, limit: int | None = None) -> list:
        q = {"run": run, "status": status, "limit": limit}
        return self._request("GET", self._path("approvals", query=q))[1]["approvals"]

    def approve(self, approval_id: str, comment: str | None = None) -> dict:
        body = {"comment": comment} if comment else None
        return self._mutate(self._path("approvals", approval_id, "approve"), body)[1]

    def reject(self, approval_id: str, comment: str | None = None) -> dict:
        body = {"comment": comment} if comment else None
        return self._mutate(self._path("approvals", approval_id, "reject"), body)[1]

    # --- streams ---

    def stream(self, run_id: str, after=None, timeout: float | None = None, reconnect: int = 5):
        """The run's stream events from the SSE route, as dicts {"id", "event",
        "data"} (data decoded from JSON), until its final event (run.succeeded,
        run.failed, run.cancelled). A connection that breaks before it (a
        server restart) is made again from the last event's id, up to
        `reconnect` times in a row. Close the generator to stop early."""
        import time as _t

        tries = 0
        while True:
            got_final = False
            try:
                for ev in self._stream_once(run_id, after, timeout):
                    tries = 0
                    if ev.get("id"):
                        after = ev["id"]
                    got_final = ev.get("event") in ("run.succeeded", "run.failed", "run.cancelled")
                    yield ev
                    if got_final:
                        return
            except TimeoutError:
                raise  # the caller's timeout: no event for that long
            except (OSError, http.client.HTTPException):
                pass
            if got_final:
                return
            tries += 1
            if tries > reconnect:
                raise APIError(0, "unavailable", f"the stream of run {run_id} broke {tries} times")
            _t.sleep(min(0.1 * 2 ** tries, 2.0))

    def _stream_once(self, run_id, after, timeout):
        c = self._ep.connect(timeout=timeout)
        try:
            path = self._path("runs", run_id, "stream", query={"after": after})
            h = self._ep.headers("application/json", {"Accept": "text/event-stream"})
            c.request("GET", path, None, h)
            r = c.getresponse()
            if r.status >= 400:
                raw = r.read()
                try:
                    doc = json.loads(raw)
                except ValueError:
                    doc = {}
                raise APIError(r.status, doc.get("code", ""), doc.get("detail", ""), doc)
            ev: dict = {}
            data: list[str] = []
            while True:
                line = r.readline()
                if not line:
                    return
                line = line.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data or ev:
                        d = "\n".join(data)
                        try:
                            ev["data"] = json.loads(d) if d else None
                        except ValueError:
                            ev["data"] = d
                        ev.setdefault("event", "message")
                        yield ev
                    ev, data = {}, []
                    continue
                if line.startswith(":"):
                    continue
                k, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                if k == "data":
                    data.append(v)
                elif k in ("id", "event"):
                    ev[k] = v
        finally:
            c.close()
