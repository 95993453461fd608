"""The readiness loop: one thread waits on the provider sockets of every live stream.

A stream with nothing to read costs no thread: its reader arms it here (``arm``) and
returns its worker to the pool. When the socket turns readable, or the timeout passes,
the watcher calls the stream's callback once (``True``: ready, ``False``: timed out),
which hands the stream to the pool for its next slice of reading. An arm fires at most
once; a fired or disarmed arm is gone. Timers without a socket (``fd=None``) serve the
streams that wait for their client to take what they read (the stall timeout).

epoll with EPOLLONESHOT (Linux): the kernel disarms a socket as it reports it, so a
socket is never reported twice for one arm, and arming from any thread is one system
call with no lock on the loop's side. Where epoll is missing (``available()`` False),
readers keep the blocking path: a worker waits on its socket for the stream's life.

Locking: ``_lock`` guards the tables (which key is armed with which generation, the
fd of each key) and the timer heap: dict and heap operations only. epoll calls and
the callbacks run outside it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import threading
import time
from typing import Callable, Hashable

log = logging.getLogger(__name__)

Ready = Callable[[bool], None]

_ONESHOT = getattr(select, "EPOLLONESHOT", 0)
_READ = getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLRDHUP", 0) | _ONESHOT
_WRITE = getattr(select, "EPOLLOUT", 0) | _ONESHOT
# The longest the loop sleeps with no timer due: only a bound, wake-ups are events.
_IDLE_WAIT_SECONDS = 60.0
# Stale timers the heap may hold past twice the live arms before it is rebuilt.
_HEAP_SLACK = 1024


def available() -> bool:
    return hasattr(select, "epoll")


class Watcher:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        # key -> (generation, fd, callback, deadline)
        self._armed: dict[Hashable, tuple[int, int | None, Ready, float | None]] = {}
        self._keys: dict[int, Hashable] = {}       # fd -> the key armed on it
        self._registered: set[int] = set()         # fds in the epoll set (armed or spent)
        self._timers: list[tuple[float, int, Hashable]] = []  # (deadline, generation, key)
        self._generations = itertools.count(1)
        self._next_deadline = float("inf")  # what the loop sleeps until (read under _lock)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="mlstream-watcher", daemon=True)
        self._thread.start()

    @property
    def watched(self) -> int:
        """Arms waiting to fire (a snapshot)."""
        return len(self._armed)

    def arm(self, key: Hashable, fd: int | None, timeout: float | None, ready: Ready, *,
            write: bool = False) -> None:
        """Call ``ready(True)`` once ``fd`` is readable (writable with ``write``), or
        ``ready(False)`` once ``timeout`` seconds pass; ``fd`` None: the timer alone.
        A key holds one arm at a time; arming it again replaces the last."""
        generation = next(self._generations)
        deadline = time.monotonic() + timeout if timeout is not None else None
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                self._armed[key] = (generation, fd, ready, deadline)
                if fd is not None:
                    self._keys[fd] = key
                    known = fd in self._registered
                    self._registered.add(fd)
                wake = False
                if deadline is not None:
                    heapq.heappush(self._timers, (deadline, generation, key))
                    if len(self._timers) > 2 * len(self._armed) + _HEAP_SLACK:
                        self._compact()
                    wake = deadline < self._next_deadline
        if closed:
            ready(False)
            return
        if fd is not None:
            events = _WRITE if write else _READ
            try:
                if known:
                    self._epoll.modify(fd, events)
                else:
                    self._epoll.register(fd, events)
            except OSError:  # closed under us: report it as ready, the read will say why
                if self.disarm(key):
                    ready(True)
                return
        if wake:
            self._wake()

    def _compact(self) -> None:
        """The timer heap rebuilt from the live arms (under ``_lock``): an arm that fired
        by readiness leaves its timer behind, and streams re-arm many times a second."""
        self._timers = [(deadline, generation, key) for key, (generation, _, _, deadline) in self._armed.items()
                        if deadline is not None]
        heapq.heapify(self._timers)

    def disarm(self, key: Hashable) -> bool:
        """Take back ``key``'s arm; True if it was armed (so it will not fire now)."""
        with self._lock:
            entry = self._armed.pop(key, None)
            if entry is not None and entry[1] is not None:
                self._keys.pop(entry[1], None)
        return entry is not None

    def forget(self, fd: int) -> None:
        """Take ``fd`` out of the epoll set, before its socket is closed or given back to
        a connection pool (its number may be reused)."""
        with self._lock:
            registered = fd in self._registered
            self._registered.discard(fd)
            key = self._keys.pop(fd, None)
            if key is not None:
                self._armed.pop(key, None)
        if registered:
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        """Stop the loop; every arm still waiting fires as timed out."""
        with self._lock:
            self._closed = True
            pending = list(self._armed.values())
            self._armed.clear()
            self._keys.clear()
            self._timers.clear()
        self._wake()
        self._thread.join(5)
        for _, _, ready, _ in pending:
            _call(ready, False)
        self._epoll.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # a wake-up is pending already (or we are closing)

    def _loop(self) -> None:
        wake_fd = self._wake_r
        while True:
            with self._lock:
                if self._closed:
                    return
                self._next_deadline = self._timers[0][0] if self._timers else float("inf")
                wait = min(max(0.0, self._next_deadline - time.monotonic()), _IDLE_WAIT_SECONDS)
            try:
                events = self._epoll.poll(wait)
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return  # closed
            fired: list[Ready] = []
            with self._lock:
                for fd, _ in events:
                    if fd == wake_fd:
                        continue
                    key = self._keys.pop(fd, None)
                    entry = self._armed.pop(key, None) if key is not None else None
                    if entry is not None:
                        fired.append(entry[2])
                expired: list[Ready] = []
                now = time.monotonic()
                timers = self._timers
                while timers and timers[0][0] <= now:
                    _, generation, key = heapq.heappop(timers)
                    entry = self._armed.get(key)
                    if entry is not None and entry[0] == generation:
                        del self._armed[key]
                        if entry[1] is not None:
                            self._keys.pop(entry[1], None)
                        expired.append(entry[2])
            if any(fd == wake_fd for fd, _ in events):
                try:
                    while os.read(wake_fd, 4096):
                        pass
                except BlockingIOError:
                    pass
            for ready in fired:
                _call(ready, True)
            for ready in expired:
                _call(ready, False)


def _call(ready: Ready, value: bool) -> None:
    try:
        ready(value)
    except Exception:  # noqa: BLE001 - one stream's bug must not stop the loop of all
        log.exception("a watched stream's callback failed")
