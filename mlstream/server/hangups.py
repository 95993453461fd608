"""One thread that notices clients hanging up on open streams.

A handler learns that its client left only when a write fails, and after a
graceful close (FIN) the first write still succeeds: with a provider sending
every half second, a vanished client would hold a worker and an upstream
connection for a second or more, and for a whole heartbeat interval while the
provider is silent. This watcher waits on every open stream's socket at once
(epoll: no per-chunk cost) and cancels the stream's channel on a hang-up, which
shuts the upstream response down and frees the worker at once.

It asks the kernel for the hang-up itself (EPOLLRDHUP: the peer closed its
sending side; EPOLLHUP / EPOLLERR: reset or closed), never for readability. So
it never reads or peeks at a socket — a keep-alive client that pipelines its
next request wakes nothing — and no call of this thread can block on a client.

Stale events. ``poll()`` runs outside the lock, so by the time its events are
looked at, a socket may have been unwatched, closed, and its descriptor number
reused by a new connection that was watched again. Every watch is stamped with
the poll round during which it was made; an event is acted on only for a watch
older than the poll that reported it. A fresher watch is skipped: epoll is
level-triggered, so a real hang-up on it is reported again by the next round.

    handler thread                       watcher thread
      watch(sock, channel)  --lock-->      round = next round         (lock)
      ... relay ...                        events = poll()            (no lock)
      unwatch(sock)         --lock-->      stale? -> skip             (lock)
                                           hung up -> forget the watch (lock)
                                           channel.cancel(ClientGone) (no lock)

Where epoll does not exist (not Linux), nothing is watched and a hang-up is found
by the next write, as without this watcher.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
from dataclasses import dataclass
from typing import Protocol

from ..errors import ClientGone
from ..streaming.channel import Channel

log = logging.getLogger(__name__)


# Hang-ups only: never EPOLLIN, which a pipelined request would raise.
HANGUP_EVENTS = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)
_WAKE_EVENTS = getattr(select, "EPOLLIN", 0)


class Poller(Protocol):
    """What the watcher needs of ``select.epoll`` (a test may wrap one)."""

    def register(self, fd: int, eventmask: int) -> None: ...
    def unregister(self, fd: int) -> None: ...
    def poll(self, timeout: float = -1) -> list[tuple[int, int]]: ...
    def close(self) -> None: ...


def new_poller() -> Poller | None:
    return select.epoll() if hasattr(select, "epoll") else None


@dataclass(frozen=True, slots=True)
class _Watch:
    sock: socket.socket
    channel: Channel
    round: int  # the poll round during which the watch was made


class HangupWatcher:
    def __init__(self, poller: Poller | None = None) -> None:
        self._poller = poller if poller is not None else new_poller()
        # Guards _watches, _round and _closed. Held only for dict updates and
        # epoll_ctl (register / unregister never block); poll() and cancel() run outside.
        self._lock = threading.Lock()
        self._watches: dict[int, _Watch] = {}
        self._round = 0
        self._closed = self._poller is None
        self._thread: threading.Thread | None = None
        if self._poller is None:
            return
        self._wake_reader, self._wake_writer = os.pipe()
        self._poller.register(self._wake_reader, _WAKE_EVENTS)
        self._thread = threading.Thread(target=self._run, name="mlstream-hangups", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, channel: Channel) -> None:
        """Cancel ``channel`` if the client on ``sock`` hangs up, until ``unwatch``."""
        try:
            fd = sock.fileno()
        except OSError:
            return
        if fd < 0:
            return
        with self._lock:
            if self._closed:
                return
            if fd in self._watches:  # a descriptor closed without unwatch, now reused
                self._forget(fd)
            try:
                self._poller.register(fd, HANGUP_EVENTS)  # type: ignore[union-attr]
            except OSError:
                return
            self._watches[fd] = _Watch(sock, channel, self._round)

    def unwatch(self, sock: socket.socket) -> None:
        """Stop watching; call before the socket is closed. Safe twice."""
        try:
            fd = sock.fileno()
        except OSError:
            return
        with self._lock:
            watch = self._watches.get(fd)
            if watch is not None and watch.sock is sock:
                self._forget(fd)

    @property
    def watching(self) -> int:
        with self._lock:
            return len(self._watches)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            os.write(self._wake_writer, b"x")
        except OSError:
            pass

    def _forget(self, fd: int) -> None:
        """Drop a watch (with the lock held)."""
        del self._watches[fd]
        try:
            self._poller.unregister(fd)  # type: ignore[union-attr]
        except (OSError, ValueError):
            pass  # the descriptor was closed already: the kernel dropped it itself

    def _run(self) -> None:
        poller = self._poller
        assert poller is not None
        while True:
            with self._lock:
                if self._closed:
                    break
                self._round += 1
                this_round = self._round
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            gone: list[Channel] = []
            with self._lock:
                for fd, _mask in events:
                    watch = self._watches.get(fd)
                    if watch is None or watch.round >= this_round:
                        continue  # the wake-up pipe, unwatched, or watched afresh during this poll
                    self._forget(fd)
                    gone.append(watch.channel)
            for channel in gone:
                log.debug("client hung up mid-stream; cancelling the stream")
                channel.cancel(ClientGone("the client closed the connection"))
        with self._lock:
            for fd in list(self._watches):
                self._forget(fd)
        poller.close()
        os.close(self._wake_reader)
        os.close(self._wake_writer)
