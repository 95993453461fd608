"""What both fake providers share: a threaded HTTP/1.1 server on loopback and its lifecycle.

A fake is a ``FakeServer`` subclass naming its ``FakeHandler`` subclass; the handler
implements ``serve()`` for one request and uses the helpers here to read the body,
pause, and hang up. Everything about the provider itself (routes, scenarios, wire
format, credentials) stays in the fake's own module.

Classes::

    socketserver.TCPServer
     +-- http.server.HTTPServer
          +-- http.server.ThreadingHTTPServer
               +-- _ThreadingServer     one daemon thread per connection; knows its
                                        FakeServer and every open connection
    http.server.BaseHTTPRequestHandler
     +-- FakeHandler                    HTTP/1.1 keep-alive, TCP_NODELAY; serve() per request
          +-- fake_openai._Handler, fake_bedrock._Handler

    FakeServer                          binds at construction; start(), url, stop(), with
     +-- fake_openai.FakeOpenAI, fake_bedrock.FakeBedrock

Stopping: ``ThreadingHTTPServer`` never joins its handler threads, and a handler may be
pausing mid-stream or waiting on a keep-alive connection. ``stop()`` therefore sets a
stop event and shuts down every open connection's socket: a pausing handler wakes on
the EOF (or the event) and leaves, an idle one reads EOF and leaves. Then ``stop()``
waits briefly until the stats say no connection is open.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import select
import signal
import socket
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

from ..errors import BadRequest, MLStreamError, PayloadTooLarge
from ..wire.framing import ChunkedDecoder, body_framing
from .stats import CounterStats

__all__ = ["LAST_CHUNK", "MAX_BODY_BYTES", "BadBody", "ClientGone", "FakeHandler", "FakeServer",
           "http_chunk", "json_or_none", "serve_until_signalled"]

logger = logging.getLogger(__name__)

# A provider request is a few kilobytes; 16 MiB leaves room for long prompts while
# keeping a runaway client from making a fake buffer without bound.
MAX_BODY_BYTES = 16 * 1024 * 1024
# serve_forever's poll interval is how long stop() waits for the accept loop; the
# stdlib default (0.5 s) would slow every test's teardown.
_POLL_INTERVAL = 0.01
# stop() waits this long for handler threads to notice their sockets closed.
_STOP_GRACE_SECONDS = 5.0

LAST_CHUNK = b"0\r\n\r\n"


def http_chunk(payload: bytes) -> bytes:
    """``payload`` framed as one HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def json_or_none(raw: bytes) -> Any:
    """The body's JSON as the fakes record it: None when empty or not JSON."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


class ClientGone(ConnectionError):
    """The peer closed, a write failed, or the fake is stopping: abandon the response."""


class BadBody(Exception):
    """The request body cannot be read: answer ``status`` with ``reason``, then close
    (the rest of the body is unread, so the connection is unusable)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class FakeHandler(BaseHTTPRequestHandler):
    """One connection of a fake. Every method goes to ``serve()``; a ``ClientGone``
    (or any ``ConnectionError``) out of it ends the connection and counts as a
    client disconnect unless the fake is stopping."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    sys_version = ""
    server: _ThreadingServer
    fake: FakeServer

    # ---- connection lifecycle

    def setup(self) -> None:
        super().setup()
        self.fake = self.server.fake
        self.fake.stats._add(connections_open=1)
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)
            self.fake.stats._add(connections_open=-1, connections_closed=1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        # Called for every request; format nothing unless someone reads debug logs.
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: %s %s", self.fake, self.address_string(), format % args)

    def dispatch(self) -> None:
        self.fake.stats._request_started()
        try:
            self.serve()
        except (ConnectionError, TimeoutError) as exc:
            self.close_connection = True
            if not self.fake._stopping.is_set():
                self.fake.stats._add(client_disconnects=1)
            logger.debug("%s: client %s went away: %r", self.fake, self.address_string(), exc)
        finally:
            self.fake.stats._request_ended()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = dispatch

    def serve(self) -> None:
        """Answer one request (the fake's own routes)."""
        raise NotImplementedError

    # ---- helpers for serve()

    def read_body(self) -> bytes:
        """The request body, by Content-Length or chunked, at most ``MAX_BODY_BYTES``.

        Raises ``BadBody`` (400, or 413 for a body over the limit: what both fakes have
        always answered) or ``ClientGone`` when the peer closes inside the body.
        """
        try:
            framing = body_framing(self.headers.get("Transfer-Encoding"), self.headers.get("Content-Length"),
                                   MAX_BODY_BYTES)
            if framing.close_after:
                # Both framings at once is a smuggling shape: read it chunked, then hang up.
                self.close_connection = True
            if framing.chunked:
                return self._read_chunked()
            data = self.rfile.read(framing.length)
            if len(data) < framing.length:
                raise ClientGone("request body cut short")
            return data
        except MLStreamError as exc:
            self.close_connection = True
            raise BadBody(413 if isinstance(exc, PayloadTooLarge) else 400, exc.reason) from exc

    def _read_chunked(self) -> bytes:
        decoder = ChunkedDecoder(MAX_BODY_BYTES)
        while (want := decoder.want()) is not None:
            data = self.rfile.readline(want.size) if want.line else self.rfile.read(want.size)
            try:
                decoder.give(data)
            except BadRequest:
                # Less than asked for, and no line end: the peer closed mid-body.
                if len(data) < want.size and not (want.line and data.endswith(b"\n")):
                    raise ClientGone("chunked request body cut short") from None
                raise
        return decoder.body

    def send(self, data: bytes) -> None:
        """``sendall``, a failed write meaning the client is gone."""
        try:
            self.connection.sendall(data)
        except OSError as exc:
            raise ClientGone("write failed") from exc

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, but raise ``ClientGone`` as soon as the peer closes or stop() runs.

        A closed peer makes the socket readable with nothing to read (a FIN gives b"",
        a RST an error). If the client instead sent bytes (a pipelined next request)
        they are left for the next request and the pause just waits on the stop event.
        """
        if seconds <= 0:
            return
        sock, stopping = self.connection, self.fake._stopping
        deadline = time.monotonic() + seconds
        watch_peer = True
        while True:
            if stopping.is_set():
                raise ClientGone("the fake is stopping")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if not watch_peer:
                stopping.wait(remaining)
                continue
            if not _wait_readable(sock, remaining):
                continue
            try:
                peeked = sock.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                raise ClientGone("peer reset the connection") from exc
            if not peeked:
                raise ClientGone("peer closed")
            watch_peer = False

    def hang_up(self) -> None:
        """Close abruptly: FIN after what was written, nothing more on this connection."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    fd = sock.fileno()
    if fd < 0:  # closed under us: the recv that follows fails at once
        return True
    # poll rather than select.select: select fails on descriptors >= 1024, which a
    # benchmark with a thousand open connections reaches.
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0, math.ceil(timeout * 1000))))
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


def _shutdown_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _ThreadingServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], fake: FakeServer) -> None:
        self.fake = fake
        # Guards _connections only; the sockets are shut down outside it.
        self._connections_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        super().__init__(address, fake.handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can
        # stall for seconds on a machine with broken DNS; loopback needs no name.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def track(self, sock: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(sock)
        if self.fake._stopping.is_set():  # accepted while stop() was running
            _shutdown_quietly(sock)

    def untrack(self, sock: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(sock)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        # Shutting down only wakes the handler threads, which then untrack themselves.
        for sock in connections:
            _shutdown_quietly(sock)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            logger.debug("%s: connection from %s ended: %r", self.fake, client_address, exc)
        else:
            logger.exception("%s: error serving %s", self.fake, client_address)


def _loopback_host(host: str, owner: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"{owner} binds IPv4 loopback only, not {host!r}") from None
    if not address.is_loopback:
        raise ValueError(f"{owner} binds IPv4 loopback only, not {host!r}")
    return host


class FakeServer:
    """A fake provider on loopback. Binds at construction; ``start()`` serves.

    ``stop()`` stops accepting, closes every open connection (in-flight streams end at
    once, without counting as client disconnects), waits briefly for the handler
    threads, and is safe to call twice or without ``start()``. Do not call it from a
    handler thread (``shutdown`` would wait for itself).
    """

    handler: ClassVar[type[FakeHandler]]

    def __init__(self, *, host: str, port: int, stats: CounterStats, tls: ssl.SSLContext | None = None) -> None:
        self.stats = stats
        self._stopping = threading.Event()
        self._lock = threading.Lock()   # guards _thread and _stopped; nothing blocks under it
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._server = _ThreadingServer((_loopback_host(host, type(self).__name__), port), self)
        self.host: str = self._server.server_name
        self.port: int = self._server.server_port
        self.scheme = "http"
        if tls is not None:  # HTTPS: every accepted connection does its handshake first
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self) -> Self:
        name = type(self).__name__
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"a stopped {name} cannot be started again")
            if self._thread is not None:
                raise RuntimeError(f"{name} is already started")
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": _POLL_INTERVAL},
                name=f"{name.lower().replace('fake', 'fake-')}-{self.port}", daemon=True)
            self._thread.start()
        logger.debug("%s serving", self)
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
        self._stopping.set()
        if thread is not None:
            self._server.shutdown()   # blocks until serve_forever returns
            thread.join()
        self._server.close_connections()
        self._server.server_close()
        # ThreadingHTTPServer never joins daemon handlers; wait for them to see their
        # closed sockets so a test's teardown leaves nothing running.
        if not self.stats.wait_for(lambda s: s.connections_open == 0, timeout=_STOP_GRACE_SECONDS):
            logger.debug("%s: %d connection(s) still closing", self, self.stats.connections_open)
        logger.debug("%s stopped", self)

    def __enter__(self) -> Self:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"


def serve_until_signalled(fake: FakeServer) -> int:
    """A fake's command line: serve in this process until SIGINT/SIGTERM.

    Writes the URL as the first line of stdout, so a parent process can read the port.
    """
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    with fake:
        sys.stdout.write(fake.url + "\n")
        sys.stdout.flush()
        done.wait()
    return 0
