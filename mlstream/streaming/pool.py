"""The bounded pool of provider readers, with admission control.

ThreadPoolExecutor's own work queue is unbounded, so admission is counted here:
at most ``workers`` jobs run and at most ``backlog`` wait; one more is refused at
once with ``Overloaded`` (429 + Retry-After) instead of queueing without limit.
Jobs start in arrival order (the executor's queue is FIFO).

    active  = running on a worker
    queued  = admitted, waiting for a worker      (the two never overlap)
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from ..errors import Overloaded

log = logging.getLogger(__name__)


class StreamPool:
    def __init__(self, workers: int, backlog: int) -> None:
        self.workers = workers
        self.backlog = backlog
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mlstream-reader")
        # Guards the counts: arithmetic and notify only. The executor's submit and the
        # job itself run outside it; wait_until releases it while it waits.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every count change
        self.active = 0
        self.queued = 0
        self.rejected = 0

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a worker, or raise Overloaded if workers and backlog are full."""
        with self._lock:
            if self.active + self.queued >= self.workers + self.backlog:
                self.rejected += 1
                raise Overloaded(
                    f"the stream pool is full ({self.workers} running, {self.backlog} waiting); "
                    "try again later")
            self.queued += 1
            self._changed.notify_all()
        try:
            future = self._executor.submit(self._run, job)
        except RuntimeError:  # the executor was shut down
            with self._lock:
                self.queued -= 1
                self._changed.notify_all()
            raise Overloaded("the server is shutting down") from None
        future.add_done_callback(self._forget_if_cancelled)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no job runs or waits; False if some still do at ``timeout``."""
        return self.wait_until(lambda pool: pool.active + pool.queued == 0, timeout)

    def wait_until(self, predicate: Callable[["StreamPool"], bool], timeout: float) -> bool:
        """Wait until ``predicate(pool)`` holds; False if it still does not at ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _forget_if_cancelled(self, future: Future) -> None:
        """A job dropped by shutdown (cancel_futures) never runs: it waits no more."""
        if future.cancelled():
            with self._lock:
                self.queued -= 1
                self._changed.notify_all()

    def _run(self, job: Callable[[], None]) -> None:
        with self._lock:
            self.queued -= 1
            self.active += 1
            self._changed.notify_all()
        try:
            job()
        except Exception:  # a bug in a reader must not kill the worker thread
            log.exception("stream reader failed")
        finally:
            with self._lock:
                self.active -= 1
                self._changed.notify_all()
