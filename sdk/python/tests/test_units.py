"""The SDK's pieces that need no server: the protobuf JSON values, Go's
duration format, retry delays, the Connect error details, and the protocol's
envelopes read from a real socket pair."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import socket
import struct
import threading
import unittest

from _harness import trellis  # noqa: F401 (puts the SDK on the path)
from trellis import _engine, _wire


class Values(unittest.TestCase):
    def test_times_round_trip_as_go_writes_them(self):
        t = dt.datetime(2026, 11, 29, 7, 8, 9, 120000, tzinfo=dt.timezone.utc)
        self.assertEqual(_wire.fmt_time(t), "2026-11-29T07:08:09.12Z")
        self.assertEqual(_wire.fmt_time(t.replace(microsecond=0)), "2026-11-29T07:08:09Z")
        self.assertEqual(_wire.parse_time("2026-11-29T07:08:09.12Z"), t)
        # Go writes nanoseconds: kept to the microsecond
        self.assertEqual(_wire.parse_time("2026-11-29T07:08:09.120000999Z"), t)
        self.assertEqual(_wire.parse_time("2026-11-29T09:08:09.12+02:00"), t)
        for bad in ("2026-11-29", "yesterday", "2026-11-29T07:08:09"):
            with self.assertRaises(ValueError):
                _wire.parse_time(bad)

    def test_durations(self):
        self.assertEqual(_wire.fmt_duration(1.5), "1.5s")
        self.assertEqual(_wire.fmt_duration(30), "30s")
        self.assertEqual(_wire.parse_duration("0.200s"), 0.2)
        for secs, want in ((0.3, "300ms"), (1.5, "1.5s"), (120, "2m0s"), (3725, "1h2m5s"), (0.0000015, "1.5µs")):
            self.assertEqual(_engine.go_duration(secs), want)

    def test_json_is_strict(self):
        self.assertEqual(_wire.dumps({"a": "é"}), '{"a":"é"}'.encode())
        with self.assertRaises(ValueError):
            _wire.dumps(float("inf"))

    def test_snake_case_of_answers(self):
        self.assertEqual(_wire._snake({"leaseToken": "1", "run": {"cancelRequested": True}, "queue_retry": None}),
                         {"lease_token": "1", "run": {"cancel_requested": True}, "queue_retry": None})

    def test_retry_delays(self):
        r = trellis.Retry(max_attempts=5, initial=0.2, factor=2, max=0.5, jitter=0)
        self.assertEqual([r.delay(n) for n in (1, 2, 3)], [0.2, 0.4, 0.5])
        q = _engine.DEFAULT_RETRY.with_queue({"max_attempts": "7", "initial_backoff": "0.050s", "max_backoff": "1s"})
        self.assertEqual((q.max_attempts, q.initial, q.max), (7, 0.05, 1.0))
        own = trellis.Retry(max_attempts=2)
        self.assertIs(own.with_queue({"max_attempts": "7"}), own)

    def test_worker_record_names_the_sdk(self):
        # The Workers page shows each worker's version: the SDK's unless given.
        self.assertEqual(trellis.Worker("http://127.0.0.1:1", "t").version, f"trellis-py/{trellis.__version__}")
        self.assertEqual(trellis.Worker("http://127.0.0.1:1", "t", version="deploy-7").version, "deploy-7")

    def test_child_run_ids_as_go(self):
        self.assertEqual(trellis.child_run_id("r1", 3), "r1.3")
        self.assertEqual(trellis.child_run_id("r1", 3, 0), "r1.3.0")

    def test_arity_counts_required_parameters(self):
        # A step function's parameter with a default (a loop's `lambda i=i:`)
        # keeps its default rather than receiving the StepInfo.
        for fn, want in [(lambda: 0, 0), (lambda info: 0, 1), (lambda i=3: i, 0), (lambda info, i=3: i, 1),
                         (lambda inp, info: 0, 2), (lambda inp, info=None: 0, 1)]:
            self.assertEqual(_engine._arity(fn), want)

        def with_default(i=7):
            return i
        self.assertEqual(_engine._arity(with_default), 0)

    def test_error_detail_reason_from_protobuf(self):
        # ErrorDetail{reason: "LEASE_LOST", message: "m", code: "aborted"}, as connect-go sends it
        pb = b"\x0a\x0aLEASE_LOST\x12\x01m\x1a\x07aborted"
        e = _wire.error_from_json({"code": "aborted", "message": "lease lost", "details": [
            {"type": "trellis.worker.v1.ErrorDetail", "value": base64.b64encode(pb).decode().rstrip("=")}]})
        self.assertEqual((e.code, e.reason), ("aborted", "LEASE_LOST"))
        e = _wire.error_from_json({"code": "internal", "details": [{"type": "x", "value": "!!"}]})
        self.assertEqual(e.reason, "")


class Events(unittest.TestCase):
    """What an event wait records, from a claimed run's inbox."""

    def take(self, name):
        null = base64.b64encode(b"null").decode()
        rs = _engine.RunState(None, {"run": {"id": "r1"}, "inbox": [
            {"seq": "1", "name": "bare"}, {"seq": "2", "name": "null", "payload": null}]})
        w = _engine.EventWait(rs, False, name, None)
        self.assertTrue(asyncio.run(w.try_()))
        return rs, w

    def test_event_without_payload_is_recorded_without_result(self):
        # as the Go engine records it: the op has no result (not a JSON null)
        rs, w = self.take("bare")
        self.assertEqual(rs.pending.consume, [1])
        self.assertIsNone(w.op.result)
        wire = w.op.wire()
        self.assertEqual((wire["kind"], wire["name"], wire.get("done")), ("event", "bare", True))
        self.assertNotIn("result", wire)
        self.assertIsNone(w.value())

    def test_event_with_a_null_payload_keeps_it(self):
        rs, w = self.take("null")
        self.assertEqual(rs.pending.consume, [2])
        self.assertEqual(w.op.result, b"null")
        self.assertEqual(base64.b64decode(w.op.wire()["result"]), b"null")


class Envelopes(unittest.TestCase):
    """A Connect server stream from a socket: messages, then the end of the
    stream with an error, as connect-go writes them over chunked HTTP/1.1."""

    def serve(self, body: bytes, status=200):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        self.addCleanup(srv.close)

        def run():
            c, _ = srv.accept()
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += c.recv(4096)
            head, rest = buf.split(b"\r\n\r\n", 1)
            n = int(next(v for k, v in (h.split(b": ", 1) for h in head.split(b"\r\n")[1:])
                         if k.lower() == b"content-length"))
            while len(rest) < n:
                rest += c.recv(4096)
            self.request = rest
            chunks = b""
            for i in range(0, len(body), 7):  # small chunks: envelopes split across them
                part = body[i:i + 7]
                chunks += b"%x\r\n%s\r\n" % (len(part), part)
            c.sendall(b"HTTP/1.1 %d OK\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: chunked\r\n\r\n"
                      % status + chunks + b"0\r\n\r\n")
            c.close()

        threading.Thread(target=run, daemon=True).start()
        return f"http://127.0.0.1:{srv.getsockname()[1]}"

    @staticmethod
    def env(flags, obj):
        b = json.dumps(obj).encode()
        return struct.pack(">BI", flags, len(b)) + b

    def test_messages_then_end(self):
        url = self.serve(self.env(0, {"subscribed": True}) + self.env(0, {"nextDue": "2026-01-01T00:00:00Z"})
                         + self.env(2, {}))
        c = _wire.ConnectClient(url, "tok")
        got = list(c.stream("Subscribe", {"namespace": "default", "topic": "cancel"}))
        self.assertEqual(got, [{"subscribed": True}, {"next_due": "2026-01-01T00:00:00Z"}])
        flags, n = struct.unpack(">BI", self.request[:5])
        self.assertEqual((flags, json.loads(self.request[5:5 + n])), (0, {"namespace": "default", "topic": "cancel"}))

    def test_end_with_error(self):
        url = self.serve(self.env(0, {"runs": []}) + self.env(2, {"error": {"code": "unauthenticated",
                                                                             "message": "token revoked"}}))
        c = _wire.ConnectClient(url, "tok")
        it = iter(c.stream("Claim", {}))
        self.assertEqual(next(it), {"runs": []})
        with self.assertRaises(trellis.ProtocolError) as e:
            next(it)
        self.assertEqual(e.exception.code, "unauthenticated")

    def test_silent_stream_times_out(self):
        # a message, then silence on an open connection (half-open): the read
        # gives up after read_timeout instead of blocking for ever
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        self.addCleanup(srv.close)
        done = threading.Event()
        self.addCleanup(done.set)

        def run():
            c, _ = srv.accept()
            c.recv(65536)
            msg = self.env(0, {"subscribed": True})
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: chunked\r\n\r\n"
                      + b"%x\r\n%s\r\n" % (len(msg), msg))
            done.wait(10)
            c.close()

        threading.Thread(target=run, daemon=True).start()
        c = _wire.ConnectClient(f"http://127.0.0.1:{srv.getsockname()[1]}", "tok")
        it = iter(c.stream("Subscribe", {}, read_timeout=0.3))
        self.assertEqual(next(it), {"subscribed": True})
        with self.assertRaises(TimeoutError):
            next(it)

    def test_cut_stream(self):
        url = self.serve(self.env(0, {"a": 1})[:-2])
        c = _wire.ConnectClient(url, "tok")
        with self.assertRaises(trellis.ProtocolError) as e:
            list(c.stream("Claim", {}))
        self.assertEqual(e.exception.code, "unavailable")


class Protocol(unittest.TestCase):
    """Calls of the worker protocol a real server refuses."""

    @classmethod
    def setUpClass(cls):
        from _harness import Server

        cls.srv = Server()

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def test_refused_checkpoint_names_its_reason(self):
        c = _wire.ConnectClient(self.srv.url, self.srv.token)
        res = c.unary("Checkpoint", {"checkpoints": [{"lease": {"namespace": "default", "runId": "nope", "token": "1",
                                                                "queue": "default", "secret": "x" * 43},
                                                      "status": "running", "seq": 1}]})
        self.assertEqual(res["results"][0]["error"]["reason"], "LEASE_LOST")
        c.close()

    def test_unauthenticated_and_malformed(self):
        bad = _wire.ConnectClient(self.srv.url, "trl_nope")
        with self.assertRaises(trellis.ProtocolError) as e:
            bad.unary("ListWorkers", {"namespace": "default"})
        self.assertEqual(e.exception.code, "unauthenticated")
        c = _wire.ConnectClient(self.srv.url, self.srv.token)
        with self.assertRaises(trellis.ProtocolError) as e:
            c.unary("Heartbeat", {"namespace": "default", "name": "w", "ttl": "soon"})
        self.assertEqual(e.exception.code, "invalid_argument")
        with self.assertRaises(trellis.ProtocolError) as e:
            list(c.stream("Claim", {"namespace": "default", "credit": 0, "worker": "w"}))
        self.assertEqual(e.exception.code, "invalid_argument")
        bad.close()
        c.close()


if __name__ == "__main__":
    unittest.main()
