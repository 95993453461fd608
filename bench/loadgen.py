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
into the run and issuing nothing new after ``stop_issuing``. It may instead
hang up mid-answer (``hangup_after`` content events, then close and reconnect)
or pipeline (``pipeline_after``: write the next request on the socket while the
current answer is still arriving). Every loop here is bounded: the run ends at
its ``timeout`` whatever the servers do, and sockets still open then are closed
and their responses marked ``"timeout"``.

:func:`alternate` is the other driver: one client, concurrency 1, blocking
sockets, sending the same request to two servers in turn (first-token latency,
what one client sees).
"""

from __future__ import annotations

import errno
import heapq
import json
import math
import selectors
import socket
import struct
import threading
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
    # What ends one event (markers are counted in whole events only): SSE's blank line;
    # Gemini's SSE uses CRLF line ends, a JSON-lines stream a single newline.
    separator: bytes = b"\n\n"
    # The body is AWS event-stream frames whose payloads carry the events (SageMaker):
    # the payloads of whole frames are joined first, the frames' binary left out.
    eventstream: bool = False


# The fake provider's OpenAI chunks: the role chunk has "delta":{"role":...}, the
# finish chunk "delta":{} — only content chunks have "delta":{"content":.
DIRECT = Dialect("direct", b'"delta":{"content":', b"data: [DONE]")
# mlstream's ml-commons events (server/responses.py builds them around these bytes).
MLSTREAM = Dialect("mlstream", b',"is_last":false}', b'"is_last":true')
# A non-stream answer (either side) holds the upstream's chat.completion.
WHOLE = Dialect("whole", b"", b'"finish_reason":"stop"')
# Any other answer (GET /healthz, a model GET): a 200 with its whole body is enough.
PLAIN = Dialect("plain", b"", b"")


def _event_text(dialect: str, data: bytes) -> Any:
    """The content of one SSE event's JSON (``data`` without ``data: ``), or None.

    Only for the first content events of a response (finding the first one with
    non-empty content): JSON parsing is kept off the hot path.
    """
    try:
        event = json.loads(data)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    if dialect == DIRECT.name:
        choices = event.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        delta = choice.get("delta")
        return delta.get("content") if isinstance(delta, dict) else choice.get("text")
    if dialect == "messages":  # bench/fronts.py: Anthropic's content_block_delta
        delta = event.get("delta")
        return delta.get("text") if isinstance(delta, dict) else None
    if dialect == "responses":  # bench/fronts.py: response.output_text.delta
        return event.get("delta") if event.get("type") == "response.output_text.delta" else None
    if dialect == MLSTREAM.name:
        try:
            data_map = event["inference_results"][0]["output"][0]["dataAsMap"]
        except (KeyError, IndexError, TypeError):
            return None
        return None if data_map.get("is_last") else data_map.get("content")
    return None


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


# An event-stream frame's prelude (total length, headers length, prelude CRC) and message CRC.
_FRAME_OVERHEAD = 16

# Response parser states
_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _DONE = range(7)


class Response:
    """One response, parsed as bytes arrive; the record of what the client saw.

    ``feed(data, now)`` returns how many *content events* ``data`` completed;
    ``done`` turns true when the response is over (its last byte arrived, or
    it failed). ``ok`` says whether it was a complete, successful answer.
    """

    __slots__ = ("request", "t_send", "t_write", "t_turn", "t_head", "t_first", "t_text", "t_end", "status",
                 "content", "events", "nbytes", "body_bytes", "ended", "failed", "complete", "error", "gaps",
                 "last_t", "keep_alive", "done", "hung_up", "rest", "body", "_state", "_head", "_raw", "_sse",
                 "_left", "_marker", "_end", "_err", "_dialect", "_sep", "_frames")

    def __init__(self, request: Request, t_send: float, *, track_gaps: bool = False,
                 keep_body: bool = False) -> None:
        self.request = request
        self.t_send = t_send      # the request was issued (a new connection's connect included)
        self.t_write = math.nan   # its first byte was handed to the kernel
        self.t_turn = t_send      # it was issued, or the answer before it on the connection ended (pipelining)
        self.t_head = self.t_first = self.t_text = self.t_end = math.nan
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
        self.hung_up = False      # the client closed the connection on purpose, mid-answer
        self.rest = b""           # bytes that arrived after this response's end (a pipelined answer's)
        self.body: bytearray | None = bytearray() if keep_body else None
        self._state = _HEAD
        self._head = bytearray()
        self._raw = bytearray()   # chunked framing not parsed yet
        self._sse = bytearray()   # de-chunked bytes not yet split into whole events
        self._left = 0
        d = request.dialect if request.stream or request.dialect is PLAIN else WHOLE
        self._marker, self._end, self._err = d.content, d.end, d.error
        self._dialect = d.name
        self._sep = d.separator
        self._frames = bytearray() if d.eventstream else None  # event-stream bytes not yet whole frames

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

    @property
    def ttft(self) -> float:
        """Time from the request's first byte written to the first event with non-empty content."""
        return self.t_text - self.t_write

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

    def hang_up(self, now: float) -> None:
        """The client closes the connection mid-answer, on purpose."""
        if not self.done:
            self.hung_up = True
            self.done = True
            self.t_end = now
            self.keep_alive = False

    def feed(self, data: bytes, now: float) -> int:
        """Parse ``data``; bytes past this response's end are kept in ``rest``."""
        if self.done:
            self.rest += data
            return 0
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
                self._keep_rest(data)
                return 0
        if self._state == _LENGTH:
            return self._feed_length(data, now)
        return self._feed_chunked(data, now)

    def _keep_rest(self, data: bytes | bytearray) -> None:
        if data and self.complete:
            self.rest += bytes(data)
            self.nbytes -= len(data)

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
            self._keep_rest(data[len(take):])
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
        if self._frames is not None and not self._unframe(sse):
            self.fail("a corrupt event-stream frame (shorter than its prelude and CRC)", now)
            return 0
        found = 0
        end = sse.rfind(self._sep)
        if end >= 0:
            end += len(self._sep)
            events = bytes(sse[:end])
            del sse[:end]
            if self.body is not None:
                self.body += events
            self.events += events.count(b"data:")
            found = events.count(self._marker)
            if found:
                self.content += found
                if self.t_text != self.t_text:  # nan: no content seen yet, JSON-check these events
                    self._find_text(events, now)
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
            self._keep_rest(raw)
            del raw[:]
        return found

    def _unframe(self, data: bytearray) -> bool:
        """Move ``data`` (de-chunked event-stream bytes) into the frame buffer and put
        the payloads of its whole frames back in ``data``, in order; False if a frame
        is corrupt (its declared lengths leave no room for its prelude and CRC)."""
        frames = self._frames
        frames += data
        del data[:]
        pos, n = 0, len(frames)
        while n - pos >= 12:  # a prelude: total length, headers length, CRC
            total, headers = struct.unpack_from("!II", frames, pos)
            if total < _FRAME_OVERHEAD + headers:  # also what would never move pos on
                return False
            if n - pos < total:
                break
            data += frames[pos + 12 + headers:pos + total - 4]  # payload, before the message CRC
            pos += total
        del frames[:pos]
        return True

    def _find_text(self, events: bytes, now: float) -> None:
        """Set ``t_text`` if one of ``events`` is a content event with non-empty content."""
        marker = self._marker
        for block in events.split(b"\n\n"):
            if marker in block:
                for line in block.split(b"\n"):
                    if line.startswith(b"data:") and _event_text(self._dialect, line[5:].strip()):
                        self.t_text = now
                        return


@dataclass
class User:
    """One client: ``count`` requests in a row on one keep-alive connection."""

    address: tuple[str, int]
    request: Request
    count: int = 1
    start: float = 0.0                 # seconds into the run
    stop_issuing: float = math.inf     # seconds into the run
    think: float = 0.0                 # seconds between one response's end and the next request
    burst: int = 1                     # ... after every ``burst`` responses (the others: back to back)
    track_gaps: bool = False
    # Hang up after this many content events (0: never): close the connection (every other
    # time with a reset instead of a FIN), then connect anew for the next request.
    hangup_after: int = 0
    # Pipeline: write the next request once the current answer has this many content events
    # (None: only after it ended). At most one request waits behind the one being answered.
    pipeline_after: int | None = None

    def __post_init__(self) -> None:
        if self.hangup_after and self.pipeline_after is not None:
            raise ValueError("a user either hangs up or pipelines")
        if self.pipeline_after is not None and self.think:
            raise ValueError("a pipelining user has no think time")


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
    __slots__ = ("user", "gen", "sock", "remaining", "response", "ahead", "writing", "outbuf", "connecting",
                 "connects", "reused", "hangups", "answered")

    def __init__(self, user: User, gen: "LoadGenerator") -> None:
        self.user = user
        self.gen = gen
        self.sock: socket.socket | None = None
        self.connects = 0
        self.reused = False       # the current request went out on a kept-alive connection
        self.remaining = user.count
        self.response: Response | None = None   # the answer being read
        self.ahead: Response | None = None      # a pipelined request's, written behind it
        self.writing: Response | None = None    # whose request ``outbuf`` holds
        self.outbuf = b""
        self.connecting = False
        self.hangups = 0
        self.answered = 0         # answers over (for ``burst``)


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
        ``fn(now)`` about every ``interval`` seconds (sampling RSS, metrics), on a
        thread of its own (``_Sampler``): a sample reads /proc and asks the server
        for its metrics, which took up to tens of ms, and in this loop every stream's
        next event would have waited for it.
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
        sampler = _Sampler(*tick) if tick else None
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
                if sampler is not None:
                    sampler.check()
                wake = min(hard_deadline, starts[0][0] if starts else math.inf)
                if not busy:
                    if wake > now:
                        time.sleep(min(wake - now, 0.05))
                    continue
                events = sel.select(max(0.0, min(wake - now, 0.05)))
                now = time.monotonic()
                for key, mask in events:
                    conn: _Connection = key.data
                    if conn.sock is None or conn.response is None:
                        continue  # closed by an earlier event of this batch
                    if mask & selectors.EVENT_WRITE:
                        self._on_writable(conn, now)
                    if mask & selectors.EVENT_READ and conn.sock is not None and not conn.connecting:
                        response = conn.response
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
                    if not self._advance(conn, now, responses, t0):
                        continue
                    # The user's answers so far are over: reuse the connection, or drop it.
                    busy -= 1
                    t_last = now
                    response = conn.response
                    conn.answered += 1
                    if not response.keep_alive or not response.complete:
                        self._close(conn)
                    user = conn.user
                    if conn.remaining <= 0 or now - t0 >= user.stop_issuing:
                        self._close(conn)
                    elif user.think > 0 and conn.answered % user.burst == 0:
                        if conn.sock is not None:
                            sel.unregister(conn.sock)
                        heapq.heappush(starts, (now + user.think, seq, conn))
                        seq += 1
                    elif self._next_request(conn, now, responses, t0):
                        busy += 1
        finally:
            if sampler is not None:
                sampler.stop()
            now = time.monotonic()
            for conn in conns:
                for pending in (conn.response, conn.ahead):
                    if pending is not None and not pending.done:
                        pending.fail("timeout", now)
                        timed_out += 1
                        t_last = now
                self._close(conn)
            sel.close()
            self._sel = None
        if sampler is not None:
            sampler.check()
        wall = (t_last if responses else time.monotonic()) - t0
        win = (min(w1, t_last) - w0) if window else 0.0
        return RunResult(responses, wall, time.thread_time() - cpu0, window_content, window_bytes,
                         max(win, 0.0), timed_out, sum(c.connects for c in conns))

    # -- per connection

    def _advance(self, conn: _Connection, now: float, responses: list[Response], t0: float) -> bool:
        """After bytes arrived (or a write): hang up, pipeline, or move on to a pipelined
        answer. True when no answer is in flight on the connection any more."""
        user = conn.user
        while True:
            response = conn.response
            if not response.done:
                if user.hangup_after and response.content >= user.hangup_after:
                    response.hang_up(now)
                    self._close(conn, reset=conn.hangups % 2 == 1)
                    conn.hangups += 1
                elif (user.pipeline_after is not None and conn.ahead is None and conn.sock is not None
                      and response.content >= user.pipeline_after and conn.remaining > 0
                      and now - t0 < user.stop_issuing):
                    conn.remaining -= 1
                    ahead = Response(user.request, now, track_gaps=user.track_gaps)
                    responses.append(ahead)
                    conn.ahead = ahead
                    self._write(conn, ahead)
                if not response.done:
                    return False
            ahead, rest = conn.ahead, response.rest
            if ahead is None:
                if rest and response.error is None:
                    response.error = "bytes after the end of the response"
                return True
            conn.ahead = None
            if not (response.complete and response.keep_alive) or conn.sock is None:
                ahead.fail("connection closed with a pipelined request pending", now)
                return True
            # The pipelined answer's turn: the bytes past the previous end are its first.
            conn.response = ahead
            ahead.t_turn = now
            if rest:
                response.rest = b""
                ahead.feed(rest, now)

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
        conn.ahead = None
        conn.writing = response
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
        if not conn.reused or response.nbytes or conn.ahead is not None:
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
        conn.writing = response
        response.t_write = math.nan
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

    def _write(self, conn: _Connection, response: Response) -> None:
        """Queue a pipelined request behind the one being answered, and write it."""
        if conn.outbuf:  # the previous request is not all out yet: it goes first
            conn.outbuf += response.request.payload
            conn.writing = response
            return
        conn.writing = response
        conn.outbuf = response.request.payload
        self._send(conn, response.t_send)

    def _send(self, conn: _Connection, now: float) -> bool:
        """Write what is left of the request; wait for the answer (reading all along)."""
        writing = conn.writing
        if writing is not None and writing.t_write != writing.t_write:  # nan: its first byte
            writing.t_write = time.monotonic()
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            (writing or conn.response).fail(_name(exc), now)
            return False
        conn.outbuf = conn.outbuf[sent:]
        mask = selectors.EVENT_READ | selectors.EVENT_WRITE if conn.outbuf else selectors.EVENT_READ
        try:
            key = self._sel.get_key(conn.sock)
        except KeyError:
            self._sel.register(conn.sock, mask, conn)
        else:
            if key.events != mask:
                self._sel.modify(conn.sock, mask, conn)
        return True

    def _close(self, conn: _Connection, *, reset: bool = False) -> None:
        """Close the socket: with a FIN (what arrived and was not read is drained first,
        bounded), or with a reset (``reset``: SO_LINGER 0)."""
        sock, conn.sock = conn.sock, None
        conn.outbuf = b""
        if sock is not None:
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            try:
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    for _ in range(16):  # unread bytes would turn the close into a reset
                        if not sock.recv(RECV_BYTES):
                            break
            except OSError:
                pass
            sock.close()


class _Sampler:
    """Calls ``fn(now)`` every ``interval`` seconds on its own thread, from one interval into
    the run until ``stop``; an exception it raised is raised again by ``check``."""

    def __init__(self, interval: float, fn: Callable[[float], None]) -> None:
        self._interval, self._fn = interval, fn
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="loadgen-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._fn(time.monotonic())
            except BaseException as exc:  # noqa: BLE001 - handed to the run's thread
                self._error = exc
                return

    def check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(60)


def _name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


# --------------------------------------------------------------------------- one client, two servers


@dataclass
class AlternateResult:
    responses: dict[str, list[Response]]   # per target, in order: pair i is the i-th of each list
    wall: float
    cpu: float                             # CPU seconds of the calling thread over the run


def alternate(targets: dict[str, tuple[tuple[str, int], Request]], pairs: int, *, pause: float = 0.0,
              warmup: int = 10, timeout: float = 120.0, runs: int = 1, parse_events: bool = False
              ) -> AlternateResult:
    """One client, concurrency 1: the same request to each target in turn, ``pairs`` times.

    What a client sees, with the two targets measured in the same conditions:
    one keep-alive connection per target (blocking socket, TCP_NODELAY, opened
    and warmed up with ``warmup`` unrecorded requests each); pair *i* asks the
    targets in the given order when *i* is even, in reverse when odd; before each
    request the client waits ``pause`` seconds, so that the servers sit idle
    between requests as they do between a real client's, and each request
    starts from the state the other target's request left the machine in.
    ``t_write`` is taken just before the request is written; ``t_text`` when the
    ``recv`` that completed the first event with non-empty content returned.
    ``runs`` > 1: each turn asks the same target ``runs`` times in a row (``pause``
    before each) and records only the last, so a recorded request follows the same
    server's previous answer (what it left behind is on this request's path), as for
    a client that only talks to one of them. ``parse_events``: every SSE event's JSON
    is decoded as it arrives, as a client library does (the client's own CPU then
    competes with the server's, as it does on a real client's machine).
    Bounded: the run stops at ``timeout`` (remaining responses are not sent).
    """
    cpu0 = time.thread_time()
    t0 = time.monotonic()
    deadline = t0 + timeout
    conns: dict[str, socket.socket | None] = {name: None for name in targets}
    out: dict[str, list[Response]] = {name: [] for name in targets}
    order = list(targets)
    try:
        for name in order:
            for _ in range(warmup):
                _exchange(conns, name, targets[name], deadline, parse_events)
        for i in range(pairs):
            if time.monotonic() >= deadline:
                break
            for name in (order if i % 2 == 0 else order[::-1]):
                for _ in range(runs):
                    if pause > 0:
                        time.sleep(pause)
                    response = _exchange(conns, name, targets[name], deadline, parse_events)
                out[name].append(response)
    finally:
        for sock in conns.values():
            if sock is not None:
                sock.close()
    return AlternateResult(out, time.monotonic() - t0, time.thread_time() - cpu0)


def _exchange(conns: dict[str, socket.socket | None], name: str, target: tuple[tuple[str, int], Request],
              deadline: float, parse_events: bool = False) -> Response:
    """One request and its whole answer on ``conns[name]`` (connecting if needed; once
    anew if a kept-alive connection turns out closed before any byte of the answer)."""
    address, request = target
    for attempt in (1, 2):
        sock = conns[name]
        reused = sock is not None
        if sock is None:
            sock = socket.create_connection(address, timeout=10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns[name] = sock
        now = time.monotonic()
        response = Response(request, now, keep_body=parse_events)
        parser = _EventParser() if parse_events else None
        response.t_write = now
        try:
            sock.sendall(request.payload)
        except OSError as exc:
            response.fail(_name(exc), time.monotonic())
        while not response.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                response.fail("timeout", time.monotonic())
                break
            sock.settimeout(min(remaining, 1.0))
            try:
                data = sock.recv(RECV_BYTES)
            except socket.timeout:
                continue
            except OSError as exc:
                response.fail(_name(exc), time.monotonic())
                break
            now = time.monotonic()
            if not data:
                response.eof(now)
                break
            response.feed(data, now)
            if parser is not None and response.body is not None:
                parser.parse(response.body)
        if response.rest and response.error is None:
            response.error = "bytes after the end of the response"
        if not response.keep_alive or not response.ok:
            sock.close()
            conns[name] = None
        if response.error is not None and not response.nbytes and reused and attempt == 1:
            continue  # the server had closed the idle connection: as HTTP clients do, once more
        return response
    raise AssertionError("unreachable")


class _EventParser:
    """A client library's share of the work: every complete SSE event's data decoded as JSON
    (``[DONE]`` and comments skipped) as soon as it is in the body."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at = 0

    def parse(self, body: bytearray) -> None:
        while (end := body.find(b"\n\n", self._at)) >= 0:
            for line in bytes(body[self._at:end]).split(b"\n"):
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    json.loads(line[5:])
            self._at = end + 2


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
