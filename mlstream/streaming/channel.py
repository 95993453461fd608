"""One stream's bounded hand-over from its provider reader to its client writer.

    reader (pool worker)                       writer (HTTP handler thread)
      put(item) --blocks while full-->  deque  --get(timeout)--> SSE event
                                        ^
                 cancel(error) wakes both sides and shuts the upstream down

Backpressure lives here: with ``capacity`` items queued the reader blocks in
``put``, stops reading the upstream socket, and TCP pushes back on the provider.
One lock and one condition serve both sides: the deque is never full and empty
at once, so at most one side waits at a time and ``notify()`` wakes the right one;
``cancel`` uses ``notify_all``.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from ..errors import MLStreamError
from .events import Failure, StreamItem


class Channel:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: deque[StreamItem] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._cancelled = False
        self._error: MLStreamError | None = None
        self._upstream: Any = None  # the urllib3 response being read, if any

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def put(self, item: StreamItem, timeout: float | None = None) -> bool:
        """Queue ``item``, waiting while full; False if cancelled or still full at ``timeout``."""
        with self._cond:
            if len(self._items) >= self._capacity and not self._cancelled:
                if not self._cond.wait_for(self._has_room_or_cancelled, timeout):
                    return False
            if self._cancelled:
                return False
            self._items.append(item)
            self._cond.notify()
            return True

    def get(self, timeout: float | None = None) -> StreamItem | None:
        """The next item; None if nothing came within ``timeout`` (a heartbeat is due).

        After ``cancel(error)`` it returns ``Failure(error)`` at once.
        """
        with self._cond:
            if not self._items and not self._cancelled:
                self._cond.wait_for(self._has_item_or_cancelled, timeout)
            if self._cancelled:
                return Failure(self._error or MLStreamError("the stream was cancelled"))
            if not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify()
            return item

    def get_nowait(self) -> StreamItem | None:
        """The next item if one is queued (lets a writer batch what is ready)."""
        with self._cond:
            if self._cancelled or not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify()
            return item

    def wait_cancelled(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True as soon as the stream is cancelled."""
        with self._cond:
            return self._cond.wait_for(lambda: self._cancelled, timeout)

    def attach_upstream(self, response: Any) -> bool:
        """Remember the response being read so ``cancel`` can wake its reader.

        False (and the response is shut down) if the channel is already cancelled.
        """
        with self._cond:
            if not self._cancelled:
                self._upstream = response
                return True
        _shutdown(response)
        return False

    def detach_upstream(self) -> None:
        with self._cond:
            self._upstream = None

    def cancel(self, error: MLStreamError | None = None) -> None:
        """Stop the stream: wake both sides, unblock an upstream read. Safe twice."""
        with self._cond:
            if self._cancelled:
                return
            self._cancelled = True
            self._error = error
            self._items.clear()
            upstream, self._upstream = self._upstream, None
            self._cond.notify_all()
        if upstream is not None:
            _shutdown(upstream)  # outside the lock: it may block briefly on the socket

    def _has_room_or_cancelled(self) -> bool:
        return self._cancelled or len(self._items) < self._capacity

    def _has_item_or_cancelled(self) -> bool:
        return self._cancelled or bool(self._items)


def _shutdown(response: Any) -> None:
    try:
        response.shutdown()
    except Exception:  # noqa: BLE001 - best effort: the reader closes it properly
        pass
