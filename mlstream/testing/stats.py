"""What a fake provider did, counted so tests wait on effects instead of sleeping.

Both fakes keep their counters in a ``CounterStats``: every update happens under one
``threading.Condition`` and notifies it, and :meth:`CounterStats.wait_for` blocks on
that condition until a predicate over the counters holds.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

# How many requests a fake remembers: a long benchmark must not grow without bound.
MAX_RECORDED_REQUESTS = 10_000

Stats = TypeVar("Stats", bound="CounterStats")


class CounterStats:
    """Counters named in ``COUNTERS`` (zeroed by ``reset``) plus the gauges
    ``connections_open`` and ``requests_in_flight`` (left alone by ``reset``, so they
    stay true), ``peak_requests_in_flight`` (the most requests ever being answered at
    once; zeroed by ``reset``), and the requests received, oldest first."""

    COUNTERS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._requests: list[Any] = []
        self.connections_open = 0
        self.requests_in_flight = 0
        self.peak_requests_in_flight = 0
        for name in self.COUNTERS:
            setattr(self, name, 0)

    @property
    def requests(self) -> list[Any]:
        """A snapshot of the requests received so far, oldest first."""
        with self._cond:
            return list(self._requests)

    def wait_for(self: Stats, predicate: Callable[[Stats], bool], timeout: float = 10.0) -> bool:
        """Block until ``predicate(self)`` is true (True) or ``timeout`` passes (False).

        The predicate runs under the stats lock, so it sees consistent counters.
        """
        with self._cond:
            return bool(self._cond.wait_for(lambda: predicate(self), timeout))

    def reset(self) -> None:
        """Forget the requests and zero the counters (``connections_open`` excepted)."""
        with self._cond:
            self._requests.clear()
            for name in self.COUNTERS:
                setattr(self, name, 0)
            self.peak_requests_in_flight = self.requests_in_flight
            self._reset_extra()
            self._cond.notify_all()

    def __repr__(self) -> str:
        with self._cond:
            counts = ", ".join(f"{name}={getattr(self, name)}"
                               for name in (*self.COUNTERS, "connections_open"))
            return f"{type(self).__name__}(requests={len(self._requests)}, {counts})"

    # Updates, called by the fake's handler threads.

    def _record(self, request: Any) -> None:
        with self._cond:
            if len(self._requests) >= MAX_RECORDED_REQUESTS:
                del self._requests[: len(self._requests) - MAX_RECORDED_REQUESTS + 1]
            self._requests.append(request)
            self._cond.notify_all()

    def _request_started(self) -> None:
        with self._cond:
            self.requests_in_flight += 1
            self.peak_requests_in_flight = max(self.peak_requests_in_flight, self.requests_in_flight)
            self._cond.notify_all()

    def _request_ended(self) -> None:
        with self._cond:
            self.requests_in_flight -= 1
            self._cond.notify_all()

    def _add(self, **deltas: int) -> None:
        with self._cond:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)
            self._cond.notify_all()

    def _reset_extra(self) -> None:
        """Subclasses clear their own non-counter state here (the lock is held)."""
