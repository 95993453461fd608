"""The bounded pool of provider readers, with admission control.

At most ``workers`` jobs run and at most ``backlog`` wait; one more is refused at
once with ``Overloaded`` (429 + Retry-After) instead of queueing without limit.
Waiting jobs are kept here, in arrival order, and handed to the executor only as a
running one ends, so the executor never holds more jobs than it has threads.

    active  = running: on a worker, or leased (its provider call being opened on the
              calling thread, the rest then handed over to a worker)
    queued  = admitted, waiting for a worker      (the two never overlap)

A lease is taken only when a worker is free and nothing waits, so arrival order
holds; it saves the hand-over to a worker on the way to the first token.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from ..errors import Overloaded

log = logging.getLogger(__name__)

_Job = Callable[[], None]


class StreamPool:
    def __init__(self, workers: int, backlog: int) -> None:
        self.workers = workers
        self.backlog = backlog
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mlstream-reader")
        # Guards the counts, the waiting jobs and the closed flag: arithmetic, deque
        # operations and notify only. The executor's submit (it may start a thread) and
        # the jobs themselves run outside it; wait_until releases it while it waits.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every count change
        self._waiting: deque[_Job] = deque()
        self._closed = False
        self.active = 0
        self.queued = 0
        self.rejected = 0

    def submit(self, job: _Job) -> None:
        """Run ``job`` on a worker, or raise Overloaded if workers and backlog are full."""
        with self._lock:
            if self._closed:
                raise Overloaded("the server is shutting down")
            if self.active + self.queued >= self.workers + self.backlog:
                self.rejected += 1
                raise Overloaded(
                    f"the stream pool is full ({self.workers} running, {self.backlog} waiting); "
                    "try again later")
            if self.active < self.workers:
                self.active += 1
                run_now = True
            else:
                self._waiting.append(job)
                self.queued += 1
                run_now = False
            self._changed.notify_all()
        if run_now:
            self._start(job)

    def lease(self) -> bool:
        """Count one job as running now, on the caller's thread, if a worker is free
        and none waits; False otherwise (then ``submit`` it). End with ``hand_over``
        or ``end_lease``."""
        with self._lock:
            if self._closed or self.active + self.queued >= self.workers:
                return False
            self.active += 1
            self._changed.notify_all()
        return True

    def hand_over(self, job: _Job) -> None:
        """Run the rest of a leased job on a worker; it stays counted as running until
        it ends. On shutdown the lease ends and Overloaded is raised."""
        with self._lock:
            closed = self._closed
        if closed:
            self.end_lease()
            raise Overloaded("the server is shutting down")
        self._start(job)

    def end_lease(self) -> None:
        """A running job ended: the next waiting one takes its worker, else the count drops."""
        with self._lock:
            following = self._waiting.popleft() if self._waiting else None
            if following is None:
                self.active -= 1
            else:
                self.queued -= 1
            self._changed.notify_all()
        if following is not None:
            try:
                self._start(following)
            except Overloaded:  # shut down meanwhile: the drain has cancelled its stream
                log.debug("a waiting stream was dropped at shutdown")

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no job runs or waits; False if some still do at ``timeout``."""
        return self.wait_until(lambda pool: pool.active + pool.queued == 0, timeout)

    def wait_until(self, predicate: Callable[["StreamPool"], bool], timeout: float) -> bool:
        """Wait until ``predicate(pool)`` holds; False if it still does not at ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def shutdown(self) -> None:
        """Refuse new jobs and drop the waiting ones; running jobs finish on their own."""
        with self._lock:
            self._closed = True
            self.queued -= len(self._waiting)
            self._waiting.clear()
            self._changed.notify_all()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _start(self, job: _Job) -> None:
        """Give a job counted as running to the executor (a thread is always free for it);
        Overloaded (and the count released) if the executor was shut down meanwhile."""
        try:
            future = self._executor.submit(self._run, job)
        except RuntimeError:
            self.end_lease()
            raise Overloaded("the server is shutting down") from None
        future.add_done_callback(self._end_if_cancelled)

    def _end_if_cancelled(self, future: Future) -> None:
        if future.cancelled():  # dropped by the executor's shutdown: never ran
            self.end_lease()

    def _run(self, job: _Job) -> None:
        try:
            job()
        except Exception:  # a bug in a reader must not kill the worker thread
            log.exception("stream reader failed")
        finally:
            self.end_lease()
