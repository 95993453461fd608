"""A fake OpenAI chat provider that paces its answers like a real model, for thousands
of streams at once: one thread, non-blocking sockets, a timer heap (no thread per stream).

``POST /v1/chat/completions`` with ``Authorization: Bearer <api_key>``. A stream
(``"stream": true``) gets its head and a role-only chunk at once, then ``tokens``
content chunks, the first after ``first_ms`` and then ``tps`` per second, a finish
chunk, a usage chunk (with ``stream_options.include_usage``) and ``data: [DONE]``, over
HTTP/1.1 chunked encoding on a keep-alive connection. A non-stream request gets the
whole ``chat.completion`` once the last token would have been sent. The pace comes
from the model name's query (``paced?tokens=100&tps=20&first_ms=200``), else from the
fake's defaults.

Backpressure: at most ``MAX_BUFFERED`` bytes wait for a client that stops reading;
past that the stream's clock stops until the client catches up (never unbounded memory).

    python -m mlstream.testing.fake_paced --port 0   # prints its URL first, serves until SIGTERM
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from .stats import CounterStats

log = logging.getLogger(__name__)

DEFAULT_API_KEY = "sk-fake-paced"
MAX_BUFFERED = 64 * 1024
MAX_REQUEST_BYTES = 1024 * 1024
_HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True)
class Pace:
    tokens: int = 100
    tps: float = 20.0
    first_ms: float = 200.0

    @classmethod
    def of(cls, model: str, default: "Pace") -> "Pace":
        _, _, query = model.partition("?")
        values = dict(urllib.parse.parse_qsl(query))
        return cls(int(values.get("tokens", default.tokens)), float(values.get("tps", default.tps)),
                   float(values.get("first_ms", default.first_ms)))


class PacedStats(CounterStats):
    COUNTERS = ("streams_started", "streams_completed", "answers", "chunks_written", "auth_failures",
                "connections", "client_disconnects")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(value: dict[str, Any]) -> bytes:
    return _chunk(b"data: " + json.dumps(value, separators=(",", ":")).encode() + b"\n\n")


def _token(index: int) -> str:
    return f"tok{index} "


class _Answer:
    """The bytes of one model's answer, encoded once (the per-token path sends bytes only)."""

    def __init__(self, model: str, tokens: int) -> None:
        base = {"id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return _event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        self.prologue = chunk({"role": "assistant", "content": ""})
        self.content = [chunk({"content": _token(i)}) for i in range(tokens)]
        self.finish = chunk({}, "stop")
        self.usage = _event({**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens,
                                                              "total_tokens": 10 + tokens}})
        self.done = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.whole = json.dumps({
            "id": "chatcmpl-paced", "object": "chat.completion", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(map(_token, range(tokens)))},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
        }, separators=(",", ":")).encode()


class _Connection:
    __slots__ = ("sock", "inbox", "outbox", "answer", "usage", "sent", "due", "pace", "start", "waiting",
                 "stream", "closed")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = b""
        self.outbox = bytearray()
        self.answer: _Answer | None = None  # the answer being sent, None between requests
        self.usage = False
        self.sent = 0          # content chunks sent of the current answer
        self.due = 0.0
        self.pace = Pace()
        self.start = 0.0
        self.waiting = False   # the clock stopped: the client is behind by MAX_BUFFERED
        self.stream = True
        self.closed = False


class FakePaced:
    """The fake on loopback, served by one thread; ``with FakePaced() as fake: fake.url``."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, api_key: str = DEFAULT_API_KEY,
                 pace: Pace = Pace()) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fake serves loopback only")
        self.api_key = api_key
        self.pace = pace
        self.stats = PacedStats()
        self._listener = socket.create_server((host, port), backlog=4096)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, _Connection]] = []
        self._order = itertools.count()
        self._answers: dict[tuple[str, int], _Answer] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-paced", daemon=True)

    def start(self) -> "FakePaced":
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        os.write(self._wake_w, b"x")
        self._thread.join(10)
        for key in list(self._selector.get_map().values()):
            if isinstance(key.data, _Connection):
                key.data.sock.close()
        self._selector.close()
        self._listener.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self) -> "FakePaced":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- the loop -------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            timeout = max(0.0, self._timers[0][0] - time.monotonic()) if self._timers else 1.0
            for key, events in self._selector.select(min(timeout, 1.0)):
                if key.data is None:
                    self._accept()
                elif key.data == "wake":
                    os.read(self._wake_r, 64)
                else:
                    conn = key.data
                    if events & selectors.EVENT_READ:
                        self._readable(conn)
                    if events & selectors.EVENT_WRITE and not conn.closed:
                        self._flush(conn)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, _, conn = heapq.heappop(self._timers)
                if not conn.closed:
                    self._tick(conn, now)

    def _accept(self) -> None:
        for _ in range(256):  # bounded: other sockets get their turn
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(sock)
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self.stats._add(connections=1)

    def _readable(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if conn.answer is not None:
                self.stats._add(client_disconnects=1)
            self._close(conn)
            return
        conn.inbox += data
        if len(conn.inbox) > MAX_REQUEST_BYTES:
            self._close(conn)
            return
        if conn.answer is None:
            self._request(conn)

    def _request(self, conn: _Connection) -> None:
        head_end = conn.inbox.find(_HEAD_END)
        if head_end < 0:
            return
        lines = conn.inbox[:head_end].decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in
                   (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0") or 0)
        if len(conn.inbox) < head_end + 4 + length:
            return
        body, conn.inbox = conn.inbox[head_end + 4:head_end + 4 + length], conn.inbox[head_end + 4 + length:]
        method, path = (lines[0].split(" ") + ["", ""])[:2]
        if method != "POST" or path.split("?")[0] != "/v1/chat/completions":
            self._reply(conn, 404, {"error": {"message": f"no route {method} {path}", "type": "invalid_request_error"}})
            return
        if headers.get("authorization") != f"Bearer {self.api_key}":
            self.stats._add(auth_failures=1)
            self._reply(conn, 401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                              "code": "invalid_api_key"}})
            return
        try:
            request = json.loads(body)
            model = str(request.get("model", "paced"))
            pace = Pace.of(model, self.pace)
        except (ValueError, AttributeError):
            self._reply(conn, 400, {"error": {"message": "the body is not a chat request", "type": "invalid_request_error"}})
            return
        key = (model, pace.tokens)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = _Answer(model, pace.tokens)
        conn.answer, conn.pace, conn.sent, conn.start = answer, pace, 0, time.monotonic()
        conn.stream = bool(request.get("stream"))
        conn.usage = bool((request.get("stream_options") or {}).get("include_usage"))
        if conn.stream:
            self.stats._add(streams_started=1)
            conn.outbox += (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                            b"Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n") + answer.prologue
            self._flush(conn)
            self._schedule(conn, conn.start + pace.first_ms / 1000)
        else:
            self._schedule(conn, conn.start + pace.first_ms / 1000 + max(0, pace.tokens - 1) / pace.tps)

    def _schedule(self, conn: _Connection, due: float) -> None:
        conn.due = due
        heapq.heappush(self._timers, (due, next(self._order), conn))

    def _tick(self, conn: _Connection, now: float) -> None:
        answer = conn.answer
        if answer is None:
            return
        if not conn.stream:
            self.stats._add(answers=1)
            conn.answer = None
            self._reply(conn, 200, None, answer.whole)
            return
        if len(conn.outbox) >= MAX_BUFFERED:  # the client is behind: stop the clock
            conn.waiting = True
            return
        conn.outbox += answer.content[conn.sent]
        conn.sent += 1
        self.stats._add(chunks_written=1)
        if conn.sent == len(answer.content):
            conn.outbox += answer.finish + (answer.usage if conn.usage else b"") + answer.done
            conn.answer = None
            self.stats._add(streams_completed=1)
        else:
            self._schedule(conn, max(conn.due + 1 / conn.pace.tps, now))
        self._flush(conn)
        if conn.answer is None and conn.inbox:
            self._request(conn)  # a pipelined next request

    def _reply(self, conn: _Connection, status: int, value: Any, body: bytes | None = None) -> None:
        payload = body if body is not None else json.dumps(value).encode()
        phrase = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}[status]
        conn.outbox += (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        self._flush(conn)
        if conn.answer is None and conn.inbox:
            self._request(conn)

    def _flush(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.outbox) if conn.outbox else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        del conn.outbox[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        self._selector.modify(conn.sock, events, conn)
        if conn.waiting and len(conn.outbox) < MAX_BUFFERED // 2:  # caught up: the clock runs again
            conn.waiting = False
            self._schedule(conn, time.monotonic())

    def _close(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    args = parser.parse_args(argv)
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with FakePaced(port=args.port, api_key=args.api_key) as fake:
        sys.stdout.write(fake.url + "\n")
        sys.stdout.flush()
        while not stop.wait(3600):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
