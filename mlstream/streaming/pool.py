"""The bounded pool of provider readers, with admission control.

The pool bounds CPU, not the number of live streams. A stream is admitted (``admit``)
and counted live until it ends (``end``); while it lives, its reading comes to the
pool in slices (``run``): one bounded piece of reading and decoding what has arrived,
after which the stream waits on the watcher (its socket) or its channel (its client),
holding no thread. At most ``workers`` slices run at once; the others queue in
arrival order.

    active   = live streams: admitted and not yet ended
    queued   = slices waiting for a worker
    running  = slices on a worker now

Admission refuses a new stream with ``Overloaded`` (429 + Retry-After) at once while
more than ``backlog`` slices wait for a worker: the readers are that far behind what
has arrived, and one more stream would only slow every stream down. A stream whose
body cannot be watched (see ``upstream.body``) is one slice that lasts its life.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..errors import Overloaded

log = logging.getLogger(__name__)

_Job = Callable[[], None]


class StreamPool:
    def __init__(self, workers: int, backlog: int) -> None:
        self.workers = workers
        self.backlog = backlog
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mlstream-reader")
        # Guards the counts and the closed flag: arithmetic and notify only. The
        # executor's submit (it may start a thread) and the slices run outside it;
        # wait_until releases it while it waits.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every count change
        self._closed = False
        self.active = 0
        self.queued = 0
        self.running = 0
        self.rejected = 0

    def admit(self) -> None:
        """Count a new live stream, or raise Overloaded when the backlog is full (or the
        pool shut down). Every admitted stream ends with ``end``."""
        with self._lock:
            if self._closed:
                raise Overloaded("the server is shutting down")
            if self.queued > self.backlog:
                self.rejected += 1
                raise Overloaded(
                    f"the stream readers are behind ({self.queued} slices waiting for {self.workers} "
                    "workers); try again later")
            self.active += 1
            self._changed.notify_all()

    def end(self) -> None:
        """An admitted stream is over."""
        with self._lock:
            self.active -= 1
            self._changed.notify_all()

    def run(self, job: _Job, dropped: Callable[[], None] | None = None) -> None:
        """Queue one slice of an admitted stream for a worker. If the pool shuts down
        before it runs, ``dropped`` runs instead (on the calling thread when already shut down)."""
        with self._lock:
            closed = self._closed
            if not closed:
                self.queued += 1
                self._changed.notify_all()
        if closed:
            if dropped is not None:
                dropped()
            return
        try:
            future = self._executor.submit(self._run, job)
        except RuntimeError:  # shut down meanwhile
            with self._lock:
                self.queued -= 1
                self._changed.notify_all()
            if dropped is not None:
                dropped()
            return
        if dropped is not None:
            future.add_done_callback(lambda done: self._dropped(done, dropped))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no stream lives and no slice runs or waits; False at ``timeout``."""
        return self.wait_until(lambda pool: pool.active + pool.queued + pool.running == 0, timeout)

    def wait_until(self, predicate: Callable[["StreamPool"], bool], timeout: float) -> bool:
        """Wait until ``predicate(pool)`` holds; False if it still does not at ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def shutdown(self) -> None:
        """Refuse new streams and slices and drop the waiting slices; running ones finish."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _dropped(self, future, dropped: Callable[[], None]) -> None:
        if future.cancelled():  # dropped by the executor's shutdown: never ran
            with self._lock:
                self.queued -= 1
                self._changed.notify_all()
            dropped()

    def _run(self, job: _Job) -> None:
        with self._lock:
            self.queued -= 1
            self.running += 1
            self._changed.notify_all()
        try:
            job()
        except Exception:  # a bug in a reader must not kill the worker thread
            log.exception("stream reader failed")
        finally:
            with self._lock:
                self.running -= 1
                self._changed.notify_all()
