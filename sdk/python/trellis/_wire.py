"""The worker protocol as Connect's JSON protocol over HTTP/1.1 (http.client).

Unary calls are ``POST /trellis.worker.v1.WorkerService/<Method>`` with a JSON
body; server streams (Claim, Subscribe) use the Connect streaming protocol
(``application/connect+json``): each message is an envelope of one flag byte
and a 4-byte big-endian length, and the stream ends with an envelope whose
flag has bit 0x02 set, carrying ``{"error": ..., "metadata": ...}``.

Messages follow protobuf's JSON mapping: int64 as strings (numbers are also
accepted on input), bytes as standard base64, Timestamps as RFC 3339, Durations
as ``"1.5s"``, lowerCamelCase names. Received messages are given to callers with
snake_case keys (``_snake``), so the SDK reads one spelling whichever the
server writes.
"""

from __future__ import annotations

import base64
import datetime as _dt
import http.client
import json
import re
import socket
import ssl
import struct
import threading
import urllib.parse

from .errors import ProtocolError

SERVICE = "/trellis.worker.v1.WorkerService/"

_UTC = _dt.timezone.utc


# --- values -----------------------------------------------------------------


def dumps(v) -> bytes:
    """Encodes a value as compact JSON (UTF-8; NaN and infinities refused)."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def unb64(s) -> bytes | None:
    if s is None:
        return None
    # protojson writes standard base64; accept URL-safe and unpadded too.
    s = s.replace("-", "+").replace("_", "/")
    return base64.b64decode(s + "=" * (-len(s) % 4))


_TS = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|z|[+-]\d\d:\d\d)$")


def parse_time(s: str | None) -> _dt.datetime | None:
    """Parses an RFC 3339 time (any number of fraction digits; kept to the µs)."""
    if not s:
        return None
    m = _TS.match(s)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    us = int((frac or "0")[:6].ljust(6, "0"))
    if tz in ("Z", "z"):
        tzinfo = _UTC
    else:
        sign = 1 if tz[0] == "+" else -1
        tzinfo = _dt.timezone(sign * _dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    t = _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), us, tzinfo)
    return t.astimezone(_UTC)


def fmt_time(t: _dt.datetime) -> str:
    """RFC 3339 in UTC with the fraction's trailing zeros cut, as Go's
    time.RFC3339Nano writes it (so JSON results look alike in every SDK)."""
    if t.tzinfo is not _UTC:
        t = t.astimezone(_UTC)
    s = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if t.microsecond:
        s += "." + f"{t.microsecond:06d}".rstrip("0")
    return s + "Z"


def fmt_duration(seconds: float) -> str:
    """A protobuf JSON Duration: "1.5s"."""
    s = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return s + "s"


def parse_duration(s: str | None) -> float | None:
    if not s:
        return None
    if not s.endswith("s"):
        raise ValueError(f"not a duration: {s!r}")
    return float(s[:-1])


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_UTC)


_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_snake_cache: dict[str, str] = {}


def _snake_key(k: str) -> str:
    s = _snake_cache.get(k)
    if s is None:
        s = _CAMEL.sub(r"\1_\2", k).lower()
        _snake_cache[k] = s
    return s


def _snake(v):
    if isinstance(v, dict):
        return {_snake_key(k): _snake(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_snake(x) for x in v]
    return v


def as_int(v, default=0) -> int:
    return default if v is None else int(v)


# --- errors -------------------------------------------------------------------


def _pb_strings(data: bytes) -> dict[int, str]:
    """Decodes the string fields of a protobuf message (ErrorDetail has only those)."""
    out, i = {}, 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, i = _varint(data, i)
            out[field] = data[i : i + n].decode("utf-8", "replace")
            i += n
        elif wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            break
    return out


def _varint(b: bytes, i: int):
    shift = v = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def error_from_json(e: dict, http_status: int | None = None) -> ProtocolError:
    """Makes a ProtocolError from a Connect error object, taking the reason from
    its trellis.worker.v1.ErrorDetail detail when it has one."""
    code = e.get("code") or "unknown"
    msg = e.get("message") or ""
    reason = ""
    for d in e.get("details") or ():
        if d.get("type", "").endswith("trellis.worker.v1.ErrorDetail"):
            dbg = d.get("debug")
            if isinstance(dbg, dict) and dbg.get("reason"):
                reason = dbg["reason"]
            else:
                try:
                    reason = _pb_strings(unb64(d.get("value") or ""))[1]
                except Exception:  # noqa: BLE001 - a detail we cannot read is no reason
                    pass
    return ProtocolError(code, msg, reason=reason, http_status=http_status)


_HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "unimplemented",
               408: "deadline_exceeded", 409: "aborted", 412: "failed_precondition", 413: "resource_exhausted",
               429: "unavailable", 431: "resource_exhausted", 502: "unavailable", 503: "unavailable",
               504: "unavailable"}


# --- connections --------------------------------------------------------------


class _Endpoint:
    def __init__(self, url: str, token: str | None, timeout: float):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server URL must be http(s)://host[:port], got {url!r}")
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.base = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.ssl_context = ssl.create_default_context() if self.https else None

    def connect(self, timeout: float | None = None) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        if self.https:
            c = http.client.HTTPSConnection(self.host, self.port, timeout=t, context=self.ssl_context)
        else:
            c = http.client.HTTPConnection(self.host, self.port, timeout=t)
        c.connect()
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c

    def headers(self, content_type: str, extra: dict | None = None) -> dict:
        h = {"Content-Type": content_type, "Connect-Protocol-Version": "1", "User-Agent": "trellis-python"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if extra:
            h.update(extra)
        return h


class ConnectClient:
    """A client of WorkerService. Unary calls are safe from many threads: each
    thread keeps its own keep-alive connection. Streams open a connection each.

    `timeout` bounds each read of a unary call (and each connect): a call on a
    connection that stopped answering (half-open) fails with TimeoutError
    after it, and every kept-alive connection is then replaced (they lead to
    the same peer), so that the caller's retry does not meet another stalled
    one."""

    def __init__(self, url: str, token: str | None, timeout: float = 60.0):
        self.ep = _Endpoint(url, token, timeout)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[http.client.HTTPConnection] = []
        self._gen = 0  # connections opened before a timeout are not reused

    def close(self):
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except OSError:
                pass

    def _conn(self):
        c = getattr(self._local, "conn", None)
        if c is not None and self._local.gen != self._gen:
            self._drop()
            c = None
        if c is None:
            gen = self._gen
            c = self.ep.connect()
            self._local.conn, self._local.gen = c, gen
            with self._lock:
                self._conns.append(c)
        return c

    def _drop(self):
        c = getattr(self._local, "conn", None)
        self._local.conn = None
        if c is not None:
            with self._lock:
                if c in self._conns:
                    self._conns.remove(c)
            c.close()

    def unary(self, method: str, msg: dict) -> dict:
        """Calls a unary procedure; returns the answer with snake_case keys or
        raises ProtocolError (a connection failure: OSError / HTTPException)."""
        body = dumps(msg)
        for tries in range(2):
            c = self._conn()
            try:
                c.request("POST", self.ep.base + SERVICE + method, body, self.ep.headers("application/json"))
                r = c.getresponse()
                data = r.read()
            except TimeoutError:
                # Stalled: give this connection up and the others kept alive
                # with it; the caller decides whether to call again.
                self._drop()
                with self._lock:
                    self._gen += 1
                raise
            except (OSError, http.client.HTTPException):
                self._drop()
                # A kept-alive connection the server closed while idle: one retry
                # on a fresh one. (Every write the SDK retries is idempotent.)
                if tries == 0:
                    continue
                raise
            if r.getheader("Connection", "").lower() == "close":
                self._drop()
            if r.status != 200:
                try:
                    e = json.loads(data)
                except ValueError:
                    e = {"code": _HTTP_CODES.get(r.status, "unknown"), "message": data[:200].decode("utf-8", "replace")}
                raise error_from_json(e, r.status)
            return _snake(json.loads(data)) if data else {}
        raise AssertionError("unreachable")

    def stream(self, method: str, msg: dict, read_timeout: float | None = None) -> "ServerStream":
        """Opens a server stream; iterate it for messages (snake_case keys).
        With read_timeout, a stream silent that long (its headers included)
        raises TimeoutError: pass a little more than the longest silence the
        server allows on it."""
        return ServerStream(self.ep, method, msg, read_timeout)


class ServerStream:
    """One server-streaming call. Iterating yields its messages; the end-of-stream
    message's error is raised as ProtocolError. close() from another thread
    ends a blocked read (the iteration then ends or raises OSError)."""

    def __init__(self, ep: _Endpoint, method: str, msg: dict, read_timeout: float | None = None):
        self._closed = False
        body = dumps(msg)
        env = struct.pack(">BI", 0, len(body)) + body
        # The server may be silent on a stream for long (a claim's wait, an idle
        # subscription): each read waits read_timeout (None: for ever).
        self.conn = ep.connect(timeout=ep.timeout)
        try:
            self.conn.sock.settimeout(read_timeout)
            self.conn.request("POST", ep.base + SERVICE + method, env, ep.headers("application/connect+json"))
            self.resp = self.conn.getresponse()
        except BaseException:
            self.conn.close()
            raise
        if self.resp.status != 200:
            data = self.resp.read()
            self.conn.close()
            try:
                e = json.loads(data)
            except ValueError:
                e = {"code": _HTTP_CODES.get(self.resp.status, "unknown"), "message": data[:200].decode("utf-8", "replace")}
            raise error_from_json(e, self.resp.status)

    def close(self):
        self._closed = True
        try:
            self.conn.sock and self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.resp.read(n - len(buf))
            if not chunk:
                raise ProtocolError("unavailable", "stream ended without an end-of-stream message")
            buf += chunk
        return buf

    def __iter__(self):
        try:
            while True:
                head = self._read(5)
                flags, n = struct.unpack(">BI", head)
                data = self._read(n)
                if flags & 0x01:
                    raise ProtocolError("internal", "compressed stream messages are not supported")
                if flags & 0x02:
                    end = json.loads(data) if data else {}
                    if end.get("error"):
                        raise error_from_json(end["error"])
                    return
                yield _snake(json.loads(data))
        finally:
            self.conn.close()
