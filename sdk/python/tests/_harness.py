"""Real processes for the tests: a `trellis server` on a fresh SQLite file (or
Postgres, with TRELLIS_TEST_STORE=postgres), and workers started as processes
of conformance_worker.py (or another script) that the tests may SIGTERM or
SIGKILL.

The server binary is $TRELLIS_BIN, else built once with `go build` from the
repository root into a temporary directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(SDK))
sys.path.insert(0, SDK)

import trellis  # noqa: E402

_bin_lock = threading.Lock()
_bin_path = None
_bin_dir = None


def trellis_bin() -> str:
    global _bin_path, _bin_dir
    with _bin_lock:
        if _bin_path:
            return _bin_path
        if os.environ.get("TRELLIS_BIN"):
            _bin_path = os.environ["TRELLIS_BIN"]
            return _bin_path
        _bin_dir = tempfile.mkdtemp(prefix="trellis-pytest-bin-")
        out = os.path.join(_bin_dir, "trellis")
        subprocess.run(["go", "build", "-o", out, "./cmd/trellis"], cwd=REPO, check=True)
        _bin_path = out
        return out


_goworker = None


def goworker_bin() -> str:
    """The Go SDK's kit worker (conformance/goworker): $TRELLIS_GOWORKER, else
    built once next to the server binary."""
    global _goworker, _bin_dir
    with _bin_lock:
        if _goworker:
            return _goworker
        if os.environ.get("TRELLIS_GOWORKER"):
            _goworker = os.environ["TRELLIS_GOWORKER"]
            return _goworker
        if _bin_dir is None:
            _bin_dir = tempfile.mkdtemp(prefix="trellis-pytest-bin-")
        out = os.path.join(_bin_dir, "goworker")
        subprocess.run(["go", "build", "-o", out, "./conformance/goworker"], cwd=REPO, check=True)
        _goworker = out
        return out


def cleanup_bin():
    if _bin_dir:
        shutil.rmtree(_bin_dir, ignore_errors=True)


def _pg_store(schema: str) -> str:
    base = os.environ.get("TRELLIS_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema={schema}"


class Server:
    """A trellis server process on its own store."""

    def __init__(self, store: str | None = None, dir: str | None = None):  # noqa: A002
        self.dir = dir or tempfile.mkdtemp(prefix="trellis-pytest-")
        self.schema = None
        if store is None:
            if os.environ.get("TRELLIS_TEST_STORE") == "postgres":
                self.schema = "pysdk_" + uuid.uuid4().hex[:12]
                store = _pg_store(self.schema)
            else:
                store = "sqlite:" + os.path.join(self.dir, "t.db")
        self.store = store
        # Where the tests' steps leave their markers (see wait_marker).
        self.markers = os.path.join(self.dir, "markers")
        os.makedirs(self.markers, exist_ok=True)
        self.proc = None
        self.url = None
        self.token = None
        self.start()

    def start(self, listen: str = "127.0.0.1:0"):
        if self.token is None:
            # A token of our own (the server makes a first admin token only
            # when the store has none, and writes it after it listens).
            subprocess.run([trellis_bin(), "migrate", "--store", self.store], check=True, capture_output=True)
            out = subprocess.run([trellis_bin(), "tokens", "create", "--store", self.store, "--name", "pytest",
                                  "--grant", "admin:*"], check=True, capture_output=True, text=True)
            self.token = out.stdout.strip().splitlines()[-1]
        args = [trellis_bin(), "server", "--store", self.store, "--listen", listen, "--access-log=false"]
        self.log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.write(line)
            m = re.search(rb"listening on (http://[0-9.:]+)", line)
            if m:
                self.url = m.group(1).decode()
                break
        if not self.url:
            self.proc.kill()
            self.proc.wait()
            self.log.close()
            raise RuntimeError(f"trellis server did not start (see {self.dir}/server.log)")
        threading.Thread(target=self._drain, args=(self.proc, self.log), daemon=True).start()

    @staticmethod
    def _drain(proc, log):
        for line in proc.stdout:
            log.write(line)
        proc.stdout.close()
        log.close()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self):
        """Stops the server (SIGTERM) and starts it again on the same store and port."""
        hostport = self.url.removeprefix("http://")
        self.stop()
        self.url = None
        self.start(hostport)

    def close(self):
        self.stop()
        if self.schema:
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc",
                            f"DROP SCHEMA {self.schema} CASCADE"], check=False, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, namespace="default") -> trellis.Client:
        return trellis.Client(self.url, self.token, namespace=namespace)


class WorkerProcess:
    """A worker process (its own process group, so SIGKILL takes it whole)."""

    def __init__(self, server: Server, queue: str, name: str | None = None, script: str = "conformance_worker.py",
                 lease_seconds: float = 5, extra_env: dict | None = None):
        self.name = name or "pyw-" + uuid.uuid4().hex[:8]
        env = dict(os.environ, TRELLIS_SERVER=server.url, TRELLIS_TOKEN=server.token, TRELLIS_NAMESPACE="default",
                   TRELLIS_QUEUE=queue, TRELLIS_WORKER_NAME=self.name, TRELLIS_LEASE_SECONDS=str(lease_seconds),
                   TRELLIS_TEST_MARKERS=server.markers, PYTHONUNBUFFERED="1")
        env.update(extra_env or {})
        self.logpath = os.path.join(server.dir, f"worker-{self.name}.log")
        self._log = open(self.logpath, "wb")
        if script == "go":  # the Go SDK's kit worker
            argv = [goworker_bin()]
        else:
            argv = [sys.executable, script if os.path.isabs(script) else os.path.join(SDK, script)]
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self.server = server

    def wait_live(self, timeout=15):
        c = self.server.client()
        try:
            end = time.time() + timeout
            while time.time() < end:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited: {self.output()}")
                if any(w["name"] == self.name and w.get("live") for w in c.workers()):
                    return self
                time.sleep(0.05)
            raise RuntimeError(f"worker {self.name} not live: {self.output()}")
        finally:
            c.close()

    def output(self) -> str:
        self._log.flush()
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout=30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def close(self):
        self.kill()
        self._log.close()


def wait_status(c: trellis.Client, run_id: str, status: str, timeout: float = 15) -> dict:
    end = time.time() + timeout
    r = None
    while time.time() < end:
        r = c.get(run_id)
        if r["status"] == status:
            return r
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} is {r and r['status']}, not {status}: {json.dumps(r)}")


def wait_marker(server: Server, run_id: str, step: str, what: str = "started", timeout: float = 15) -> float:
    """Waits for the marker a step of the tests' workers leaves (trellis_marks:
    when it started, when it saw its cancelled event...) and returns the time
    the step wrote in it (time.time() of the worker's clock, the same machine's)."""
    end = time.time() + timeout
    prefix = f"{run_id}.{step}."
    while time.time() < end:
        for f in os.listdir(server.markers):
            if f.startswith(prefix) and f.endswith("." + what):
                with open(os.path.join(server.markers, f)) as fh:
                    return float(fh.read())
        time.sleep(0.02)
    raise AssertionError(f"step {step} of run {run_id} left no {what!r} marker in {timeout} s")


def ops_of(c: trellis.Client, run_id: str) -> list:
    return c.history(run_id)["ops"]


def new_queue() -> str:
    return "q" + uuid.uuid4().hex[:10]


class ServerCase(unittest.TestCase):
    """A test with a server of its own (self.srv), a client of it (self.c)
    and a queue no other test uses (self.queue)."""

    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.close)
        self.c = self.srv.client()
        self.addCleanup(self.c.close)
        self.queue = new_queue()
