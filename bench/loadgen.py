"""A lean HTTP/1.1 load generator: one thread, non-blocking sockets, ``selectors``.

The generator must not be what it measures, so it does as little per byte as it
can and no JSON at all on the hot path:

- requests are encoded once (:class:`Request`) and written with one ``send``;
- a response is parsed by :class:`Response`: the status line and headers once,
  then HTTP chunk framing in a small loop over ``bytes.find``, and SSE events
  only *counted*, by ``bytes.count`` of a marker that appears once in every
  content event of the dialect (:class:`Dialect`);
- time is read once per ``recv`` (``time.monotonic``), so every event in one
  ``recv`` gets the same arrival time: the time the client could have seen it.

    LoadGenerator.run(users)                 one selectors loop, many connections
      _Connection (one per User)             connect, send, recv, keep-alive reuse
        Response (one per request)           status, head, chunked body, SSE counts

A :class:`User` sends ``count`` requests one after the other on one keep-alive
connection (reconnecting if the server closes it), starting ``start`` seconds
into the run and issuing nothing new after ``stop_issuing``. Every loop here is
bounded: the run ends at its ``timeout`` whatever the servers do, and sockets
still open then are closed and their responses marked ``"timeout"``.
"""

from __future__ import annotations

import errno
import heapq
import json
import math
import selectors
import socket
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

RECV_BYTES = 256 * 1024
# Status line and headers of any response here are a few hundred bytes; more means
# the server is not speaking HTTP to us.
MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Dialect:
    """How to recognise the events of one wire format without parsing JSON.

    ``content`` occurs exactly once in every content event (and in no other
    event), ``end`` in the event that closes a complete answer, ``error`` in an
    in-band error event.
    """

    name: str
    content: bytes
    end: bytes
    error: bytes = b'data: {"error"'


# The fake provider's OpenAI chunks: the role chunk has "delta":{"role":...}, the
# finish chunk "delta":{} — only content chunks have "delta":{"content":.
DIRECT = Dialect("direct", b'"delta":{"content":', b"data: [DONE]")
# mlstream's ml-commons events (server/responses.py builds them around these bytes).
MLSTREAM = Dialect("mlstream", b',"is_last":false}', b'"is_last":true')
# A non-stream answer (either side) holds the upstream's chat.completion.
WHOLE = Dialect("whole", b"", b'"finish_reason":"stop"')


@dataclass(frozen=True)
class Request:
    """One pre-encoded request and what its answer looks like."""

    payload: bytes
    dialect: Dialect
    stream: bool
    label: str = ""


def build_request(address: tuple[str, int], path: str, body: Any, *, dialect: Dialect, stream: bool,
                  headers: dict[str, str] | None = None, label: str = "") -> Request:
    data = json.dumps(body, separators=(",", ":")).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: {address[0]}:{address[1]}",
             "Content-Type: application/json", f"Content-Length: {len(data)}"]
    if stream:
        lines.append("Accept: text/event-stream")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return Request(("\r\n".join(lines) + "\r\n\r\n").encode() + data, dialect, stream, label)


def build_get(address: tuple[str, int], path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\n\r\n".encode()


# Response parser states
_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _DONE = range(7)


class Response:
    """One response, parsed as bytes arrive; the record of what the client saw.

    ``feed(data, now)`` returns how many *content events* ``data`` completed;
    ``done`` turns true when the response is over (its last byte arrived, or
    it failed). ``ok`` says whether it was a complete, successful answer.
    """

    __slots__ = ("request", "t_send", "t_head", "t_first", "t_end", "status", "content", "events",
                 "nbytes", "body_bytes", "ended", "failed", "complete", "error", "gaps", "last_t",
                 "keep_alive", "done", "body", "_state", "_head", "_raw", "_sse", "_left", "_marker",
                 "_end", "_err")

    def __init__(self, request: Request, t_send: float, *, track_gaps: bool = False,
                 keep_body: bool = False) -> None:
        self.request = request
        self.t_send = t_send
        self.t_head = self.t_first = self.t_end = math.nan
        self.status = 0
        self.content = 0          # content events
        self.events = 0           # SSE data events of any kind
        self.nbytes = 0           # bytes off the socket, framing included
        self.body_bytes = 0       # de-chunked body bytes
        self.ended = False        # the dialect's end marker arrived
        self.failed = False       # an in-band error event arrived
        self.complete = False     # the HTTP framing finished (last chunk / Content-Length)
        self.error: str | None = None
        self.gaps: array | None = array("d") if track_gaps else None
        self.last_t = math.nan    # arrival of the latest content event
        self.keep_alive = True
        self.done = False
        self.body: bytearray | None = bytearray() if keep_body else None
        self._state = _HEAD
        self._head = bytearray()
        self._raw = bytearray()   # chunked framing not parsed yet
        self._sse = bytearray()   # de-chunked bytes not yet split into whole events
        self._left = 0
        d = request.dialect if request.stream else WHOLE
        self._marker, self._end, self._err = d.content, d.end, d.error

    @property
    def ok(self) -> bool:
        if self.error is not None or self.status != 200 or not self.complete:
            return False
        return self.ended and not self.failed

    @property
    def latency(self) -> float:
        return self.t_end - self.t_send

    @property
    def ttfe(self) -> float:
        """Time to first content event."""
        return self.t_first - self.t_send

    def fail(self, reason: str, now: float) -> None:
        if not self.done:
            self.error = reason
            self.done = True
            self.t_end = now
            self.keep_alive = False

    def eof(self, now: float) -> None:
        """The server closed the connection."""
        if not self.done:
            self.fail("closed before the response ended", now)

    def feed(self, data: bytes, now: float) -> int:
        self.nbytes += len(data)
        if self._state == _HEAD:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD_BYTES:
                    self.fail("response head too long", now)
                return 0
            data = bytes(self._head[end + 4:])
            self._parse_head(bytes(self._head[:end]), now)
            self._head = bytearray()
            if self.done:
                return 0
        if self._state == _LENGTH:
            return self._feed_length(data, now)
        return self._feed_chunked(data, now)

    def _parse_head(self, head: bytes, now: float) -> None:
        self.t_head = now
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.fail("bad status line", now)
            return
        chunked, length = False, 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                length = int(value.strip())
            elif name == b"connection":
                self.keep_alive = b"close" not in value.lower()
        if chunked:
            self._state = _SIZE
        else:
            self._state = _LENGTH
            self._left = length
            if self.body is None:
                self.body = bytearray()  # a Content-Length body is small: keep it to check it
            if length == 0:
                self._finish(now)

    def _feed_length(self, data: bytes, now: float) -> int:
        take = data[: self._left]
        self._left -= len(take)
        self.body_bytes += len(take)
        self.body += take
        if self._left <= 0:
            self._finish(now)
        return 0

    def _finish(self, now: float) -> None:
        self.complete = True
        self.done = True
        self.t_end = now
        if self._state == _LENGTH:
            body = self.body or b""
            self.ended = self._end in body
            if self.status == 200 and self.request.stream:
                self.ended = False  # a stream answered without chunking is not a stream
        self._state = _DONE

    def _feed_chunked(self, data: bytes, now: float) -> int:
        raw = self._raw
        raw += data
        pos, n = 0, len(raw)
        sse = self._sse
        state, left = self._state, self._left
        find = raw.find
        while pos < n:
            if state == _SIZE:
                # The common case first: a whole chunk (size line, data, CRLF) is here.
                i = find(b"\r\n", pos)
                if i < 0:
                    break
                try:
                    size = int(raw[pos:i], 16)
                except ValueError:
                    try:
                        size = int(raw[pos:i].split(b";", 1)[0], 16)
                    except ValueError:
                        self.fail("bad chunk size", now)
                        return 0
                self.body_bytes += size
                start = i + 2
                if not size:
                    pos, state = start, _TRAILER
                    continue
                end = start + size
                if end + 2 <= n:
                    sse += raw[start:end]
                    pos = end + 2
                    continue
                pos, left, state = start, size, _DATA
            elif state == _DATA:
                take = min(left, n - pos)
                sse += raw[pos:pos + take]
                pos += take
                left -= take
                if left:
                    break
                state = _CRLF
            elif state == _CRLF:
                if n - pos < 2:
                    break
                pos += 2
                state = _SIZE
            elif state == _TRAILER:
                i = find(b"\r\n", pos)
                if i < 0:
                    break
                blank = i == pos
                pos = i + 2
                if blank:
                    state = _DONE
                    break
            else:
                break
        del raw[:pos]
        self._state, self._left = state, left
        found = 0
        end = sse.rfind(b"\n\n")
        if end >= 0:
            events = bytes(sse[:end + 2])
            del sse[:end + 2]
            if self.body is not None:
                self.body += events
            self.events += events.count(b"data:")
            found = events.count(self._marker)
            if found:
                self.content += found
                if self.t_first != self.t_first:  # nan: the first content event
                    self.t_first = now
                elif self.gaps is not None:
                    self.gaps.append(now - self.last_t)
                if self.gaps is not None and found > 1:
                    self.gaps.extend([0.0] * (found - 1))
                self.last_t = now
            if self._end in events:
                self.ended = True
            if self._err in events:
                self.failed = True
        if state == _DONE:
            self._finish(now)
        return found


@dataclass
class User:
    """One client: ``count`` requests in a row on one keep-alive connection."""

    address: tuple[str, int]
    request: Request
    count: int = 1
    start: float = 0.0                 # seconds into the run
    stop_issuing: float = math.inf     # seconds into the run
    think: float = 0.0                 # seconds between one response's end and the next request
    track_gaps: bool = False


@dataclass
class RunResult:
    responses: list[Response]
    wall: float                  # seconds from the first connect to the last response
    cpu: float                   # CPU seconds of the generator's thread over the run
    window_content: int = 0      # content events that arrived inside the window
    window_bytes: int = 0        # bytes that arrived inside the window
    window_seconds: float = 0.0
    timed_out: int = 0
    connects: int = 0

    def by_label(self, label: str) -> list[Response]:
        return [r for r in self.responses if r.request.label == label]


class _Connection:
    __slots__ = ("user", "gen", "sock", "remaining", "response", "outbuf", "connecting", "connects", "reused")

    def __init__(self, user: User, gen: "LoadGenerator") -> None:
        self.user = user
        self.gen = gen
        self.sock: socket.socket | None = None
        self.connects = 0
        self.reused = False       # the current request went out on a kept-alive connection
        self.remaining = user.count
        self.response: Response | None = None
        self.outbuf = b""
        self.connecting = False


class LoadGenerator:
    """Drive many connections from one thread. ``run`` is the whole API."""

    def __init__(self) -> None:
        self._sel: selectors.BaseSelector | None = None

    def run(self, users: Sequence[User], *, timeout: float, window: tuple[float, float] | None = None,
            tick: tuple[float, Callable[[float], None]] | None = None) -> RunResult:
        """Run every user to its end, or until ``timeout`` seconds have passed.

        ``window`` (start, end) in seconds into the run: content events and bytes
        that arrive inside it are counted apart, for steady-state rates that
        leave out the ramp-up and the tail. ``tick`` (interval, fn) calls
        ``fn(now)`` about every ``interval`` seconds (sampling RSS, metrics).
        """
        sel = selectors.DefaultSelector()
        self._sel = sel
        responses: list[Response] = []
        cpu0 = time.thread_time()
        t0 = time.monotonic()
        hard_deadline = t0 + timeout
        w0, w1 = (t0 + window[0], t0 + window[1]) if window else (math.inf, -math.inf)
        window_content = window_bytes = 0
        conns = [_Connection(u, self) for u in users]
        # (when, sequence, connection): first requests, and next requests after a think time
        starts = [(t0 + c.user.start, i, c) for i, c in enumerate(conns)]
        heapq.heapify(starts)
        seq = len(starts)
        busy = 0          # connections with a request in flight
        next_tick = t0 + tick[0] if tick else math.inf
        timed_out = 0
        t_last = t0
        try:
            while starts or busy:
                now = time.monotonic()
                if now >= hard_deadline:
                    break
                while starts and starts[0][0] <= now:
                    conn = heapq.heappop(starts)[2]
                    if self._next_request(conn, now, responses, t0):
                        busy += 1
                if tick and now >= next_tick:
                    tick[1](now)
                    next_tick = now + tick[0]
                wake = min(hard_deadline, next_tick, starts[0][0] if starts else math.inf)
                if not busy:
                    if wake > now:
                        time.sleep(min(wake - now, 0.05))
                    continue
                events = sel.select(max(0.0, min(wake - now, 0.05)))
                now = time.monotonic()
                for key, mask in events:
                    conn: _Connection = key.data
                    response = conn.response
                    if mask & selectors.EVENT_WRITE:
                        self._on_writable(conn, now)
                    elif mask & selectors.EVENT_READ:
                        try:
                            data = conn.sock.recv(RECV_BYTES)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError as exc:
                            if self._retry_stale(conn, now):
                                continue
                            response.fail(_name(exc), now)
                            data = None
                        if not data and data is not None and self._retry_stale(conn, now):
                            continue
                        if data:
                            found = response.feed(data, now)
                            if w0 <= now < w1:
                                window_content += found
                                window_bytes += len(data)
                        elif data is not None:
                            response.eof(now)
                    if not response.done:
                        continue
                    # The response is over: reuse the connection, or drop it.
                    busy -= 1
                    t_last = now
                    if not response.keep_alive or not response.complete:
                        self._close(conn)
                    user = conn.user
                    if conn.remaining <= 0 or now - t0 >= user.stop_issuing:
                        self._close(conn)
                    elif user.think > 0:
                        if conn.sock is not None:
                            sel.unregister(conn.sock)
                        heapq.heappush(starts, (now + user.think, seq, conn))
                        seq += 1
                    elif self._next_request(conn, now, responses, t0):
                        busy += 1
        finally:
            now = time.monotonic()
            for conn in conns:
                if conn.response is not None and not conn.response.done:
                    conn.response.fail("timeout", now)
                    timed_out += 1
                    t_last = now
                self._close(conn)
            sel.close()
            self._sel = None
        wall = (t_last if responses else time.monotonic()) - t0
        win = (min(w1, t_last) - w0) if window else 0.0
        return RunResult(responses, wall, time.thread_time() - cpu0, window_content, window_bytes,
                         max(win, 0.0), timed_out, sum(c.connects for c in conns))

    # -- per connection

    def _next_request(self, conn: _Connection, now: float, responses: list[Response], t0: float) -> bool:
        """Start the user's next request; False when it has none left or it failed at once."""
        user = conn.user
        if conn.remaining <= 0 or now - t0 >= user.stop_issuing:
            self._close(conn)
            return False
        conn.remaining -= 1
        response = Response(user.request, now, track_gaps=user.track_gaps)
        responses.append(response)
        conn.response = response
        conn.outbuf = user.request.payload
        if conn.sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = sock.connect_ex(user.address)
            if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                sock.close()
                response.fail(errno.errorcode.get(code, str(code)), now)
                conn.remaining = 0
                return False
            conn.sock = sock
            conn.connecting = True
            conn.reused = False
            conn.connects += 1
            self._sel.register(sock, selectors.EVENT_WRITE, conn)
            return True
        conn.reused = True
        return self._send(conn, now)

    def _retry_stale(self, conn: _Connection, now: float) -> bool:
        """A kept-alive connection the server closed before our request reached it
        (its idle limit): send the request again on a new connection, as HTTP clients do."""
        response = conn.response
        if not conn.reused or response.nbytes:
            return False
        self._close(conn)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(conn.user.address)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            return False
        conn.sock, conn.connecting, conn.reused = sock, True, False
        conn.connects += 1
        conn.outbuf = conn.user.request.payload
        self._sel.register(sock, selectors.EVENT_WRITE, conn)
        return True

    def _on_writable(self, conn: _Connection, now: float) -> None:
        if conn.connecting:
            code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                conn.response.fail(errno.errorcode.get(code, str(code)), now)
                conn.remaining = 0
                return
            conn.connecting = False
        self._send(conn, now)

    def _send(self, conn: _Connection, now: float) -> bool:
        """Write what is left of the request; wait for the answer once it is all out."""
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            conn.response.fail(_name(exc), now)
            return False
        conn.outbuf = conn.outbuf[sent:]
        mask = selectors.EVENT_WRITE if conn.outbuf else selectors.EVENT_READ
        try:
            key = self._sel.get_key(conn.sock)
        except KeyError:
            self._sel.register(conn.sock, mask, conn)
        else:
            if key.events != mask:
                self._sel.modify(conn.sock, mask, conn)
        return True

    def _close(self, conn: _Connection) -> None:
        sock, conn.sock = conn.sock, None
        if sock is not None:
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()


def _name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


# --------------------------------------------------------------------------- figures


def percentile(values: Iterable[float], p: float) -> float:
    """The p-th percentile (0..100), linear between closest ranks; nan when empty."""
    data = sorted(v for v in values if v == v)
    if not data:
        return math.nan
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def summarize(values: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    """n, p50, p90, p99, max, mean of ``values`` × ``scale`` (e.g. 1000 for ms)."""
    data = [v for v in values if v == v]
    if not data:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    return {"n": len(data),
            "p50": round(percentile(data, 50) * scale, digits),
            "p90": round(percentile(data, 90) * scale, digits),
            "p99": round(percentile(data, 99) * scale, digits),
            "max": round(max(data) * scale, digits),
            "mean": round(sum(data) / len(data) * scale, digits)}


@dataclass
class Outcomes:
    """Counts of how a set of responses ended."""

    total: int = 0
    ok: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, responses: Iterable[Response]) -> "Outcomes":
        out = cls()
        for r in responses:
            out.total += 1
            out.ok += r.ok
            out.statuses[str(r.status)] = out.statuses.get(str(r.status), 0) + 1
            if not r.ok:
                reason = r.error or ("in-band error event" if r.failed else
                                     "no end marker" if r.status == 200 else f"status {r.status}")
                out.errors[reason] = out.errors.get(reason, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "ok": self.ok, "statuses": self.statuses, "errors": self.errors}
