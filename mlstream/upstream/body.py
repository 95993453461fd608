"""A provider's streamed body read without blocking, for the readiness loop.

Once a stream's head is in and its first bytes were read through http.client (on the
client's handler thread), the rest of the body is read here straight from the socket,
which is switched to non-blocking for the purpose: ``read()`` returns what has arrived,
``None`` when nothing has (the watcher then waits on the socket, not a thread), ``b""``
at the body's end. The body's framing is followed as http.client would: chunked
(``wire.framing.ChunkedBody``, taking over where http.client's reader stopped), a
Content-Length, or until the connection closes.

TLS: ``recv`` on a non-blocking ``SSLSocket`` returns what OpenSSL holds decrypted
before it touches the socket, and raises ``SSLWantReadError`` only when a whole record
is not there yet; a socket is only ever given back to the watcher after such a "would
block", so no byte waits inside the TLS layer while the watcher waits on the socket.

``restore()`` gives the socket its timeout back, before the connection returns to
urllib3's pool (or is closed).
"""

from __future__ import annotations

import socket
import ssl
from typing import Any, Callable

from ..errors import MLStreamError
from ..wire.framing import ChunkedBody

# Bytes asked of the socket per read: what has arrived, up to this (a burst's cap).
READ_SIZE = 64 * 1024


class SocketBody:
    """The rest of one response's body, read without blocking (see the module's doc)."""

    __slots__ = ("_sock", "_inner", "_chunks", "_left", "_buffered", "_timeout", "_translate",
                 "wants_write", "done")

    def __init__(self, sock: socket.socket, inner: Any, translate: Callable[[BaseException], MLStreamError]) -> None:
        self._sock = sock
        self._inner = inner                    # http.client's response, for its end of the body
        self._translate = translate
        self._chunks = ChunkedBody(inner.chunk_left) if inner.chunked else None
        self._left: int | None = None if inner.chunked else inner.length  # None: until the close
        self._timeout = sock.gettimeout()
        self.wants_write = False               # TLS needs to write before it can read on
        self.done = False
        sock.settimeout(0.0)
        # What http.client's buffered reader holds already (its head and first reads
        # went through it): taken out once, with the socket non-blocking, so that from
        # here on every byte comes from the socket the watcher waits on.
        reader = inner.fp
        try:
            held = reader.peek(READ_SIZE)
        except OSError:  # nothing held, and the socket has nothing either (TLS: want read)
            held = b""
        self._buffered = reader.read1(len(held)) if held else b""

    @property
    def timeout(self) -> float | None:
        """The read timeout the socket had: how long the watcher waits for bytes."""
        return self._timeout

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self) -> bytes | None:
        """The body's data that has arrived, or None if nothing has; b"" when only chunk
        framing arrived, or at the end (then ``done``). Raises MLStreamError for a broken
        connection or framing."""
        if self.done:
            return b""
        try:
            if self._buffered:
                data, self._buffered = self._buffered, b""
            else:
                data = self._sock.recv(READ_SIZE)
        except (BlockingIOError, ssl.SSLWantReadError):
            self.wants_write = False
            return None
        except ssl.SSLWantWriteError:
            self.wants_write = True
            return None
        except MLStreamError:
            raise
        except Exception as exc:  # noqa: BLE001 - a reset, a TLS alert: the connection broke
            raise self._translate(exc) from exc
        if not data:
            if self._left is None and self._chunks is None:  # delimited by the close
                self._end()
                return b""
            raise self._translate(ConnectionError("the provider closed the connection mid-body"))
        return self._frame(data)

    def _frame(self, data: bytes) -> bytes:
        if self._chunks is not None:
            payload = self._chunks.feed(data)  # ProtocolError for broken framing
            if self._chunks.done:
                self._end()
            return payload
        if self._left is not None:
            if len(data) >= self._left:  # bytes past the length are not this body's
                data = data[:self._left]
                self._left = 0
                self._end()
            else:
                self._left -= len(data)
        return data

    def _end(self) -> None:
        self.done = True
        # http.client's own end of a body: its reader lets go, the socket stays the pool's.
        self._inner.chunk_left = None
        self._inner.length = 0
        self._inner._close_conn()

    def restore(self) -> None:
        """The socket's timeout back (best effort: it may be closed already)."""
        try:
            self._sock.settimeout(self._timeout)
        except OSError:
            pass


def socket_body(response: Any, translate: Callable[[BaseException], MLStreamError]) -> SocketBody | None:
    """A ``SocketBody`` for the rest of ``response``'s body, or None when it cannot be read
    that way (a content coding urllib3 must decode, no socket underneath, no http.client
    reader): then the body is read as before, by a worker that waits on it."""
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    inner = getattr(response, "_fp", None)
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    if (encoding != "identity" or inner is None or not isinstance(sock, socket.socket)
            or getattr(inner, "fp", None) is None or not hasattr(inner, "_close_conn")
            or not hasattr(inner.fp, "peek")):
        return None
    if not inner.chunked and inner.length is None and not inner.will_close:
        return None  # no framing http.client knows of: leave it to http.client
    return SocketBody(sock, inner, translate)
