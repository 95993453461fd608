"""One thread that enforces deadlines on sockets (the header deadline).

A socket timeout bounds each read, not a whole request head: a slowloris client
sending one header byte every few seconds never trips it. Each request head
instead gets a deadline here; if it is still pending when the deadline passes,
the socket is shut down and the handler's blocked read returns at once.

One heap and one condition for every connection: arming and disarming cost a
heap push and a set insert, not a thread or a timer each.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)


class Deadlines:
    def __init__(self) -> None:
        # Guards the heap and the disarmed set: heap pushes and pops only. The deadline
        # thread waits on it (releasing it) and shuts sockets down after releasing it.
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, socket.socket]] = []
        self._armed: set[int] = set()     # tokens still in the heap
        self._disarmed: set[int] = set()  # a subset of _armed
        self._counter = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mlstream-deadlines", daemon=True)
        self._thread.start()

    def arm(self, sock: socket.socket, seconds: float) -> int:
        """Shut ``sock`` down in ``seconds`` unless disarmed; returns the token to disarm."""
        token = next(self._counter)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + seconds, token, sock))
            self._armed.add(token)
            if self._heap[0][1] == token:
                self._cond.notify()  # a new earliest deadline
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            if token in self._armed:  # else it fired already: nothing to remember
                self._disarmed.add(token)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            expired: list[socket.socket] = []
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] in self._disarmed):
                    _, token, sock = heapq.heappop(self._heap)
                    self._armed.discard(token)
                    if token in self._disarmed:
                        self._disarmed.discard(token)
                    else:
                        expired.append(sock)
                if not expired:
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                    continue
            for sock in expired:  # outside the lock
                log.debug("request head not complete by its deadline; closing the connection %r", sock)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
