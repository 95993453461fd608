"""One thread that notices clients hanging up on open streams.

A handler learns that its client left only when a write fails, and after a
graceful close (FIN) the first write still succeeds: with a provider sending
every half second, a vanished client would hold a worker and an upstream
connection for a second or more, and for a whole heartbeat interval while the
provider is silent. A streaming client sends nothing, so its socket becoming
readable means it closed (or reset) the connection — or pipelined its next
request. This watcher waits on every open stream's socket at once (epoll: no
per-chunk cost) and cancels the stream's channel on a hang-up, which shuts the
upstream response down and frees the worker at once.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading

from ..errors import MLStreamError
from ..streaming.channel import Channel

log = logging.getLogger(__name__)


class ClientGone(MLStreamError):
    """The client closed or reset its connection mid-stream."""


class HangupWatcher:
    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mlstream-hangups", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, channel: Channel) -> None:
        # A TLS socket cannot be peeked at (records, not bytes); its hang-up is found
        # by the next write, as without this watcher.
        if isinstance(sock, ssl.SSLSocket):
            return
        with self._lock:
            if not self._closed:
                self._selector.register(sock, selectors.EVENT_READ, channel)

    def unwatch(self, sock: socket.socket) -> None:
        """Stop watching; call before the socket is read again or closed. Safe twice."""
        with self._lock:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self._wake_writer.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        while True:
            events = self._selector.select()
            with self._lock:
                if self._closed:
                    self._selector.close()
                    self._wake_reader.close()
                    self._wake_writer.close()
                    return
                gone: list[Channel] = []
                for key, _ in events:
                    if key.data is None:
                        continue  # the wake-up socket
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        self._selector.unregister(sock)
                    except (KeyError, ValueError):
                        continue  # unwatched meanwhile
                    if _hung_up(sock):
                        gone.append(key.data)
            for channel in gone:  # outside the lock: cancel shuts the upstream down
                log.debug("client hung up mid-stream; cancelling the stream")
                channel.cancel(ClientGone("the client closed the connection"))


def _hung_up(sock: socket.socket) -> bool:
    """True for EOF or a reset; False when the client sent data (a pipelined request)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
