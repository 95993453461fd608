"""One stream's bounded hand-over from its provider reader to its client writer.

    reader (pool worker)                                writer (HTTP handler thread)
      credit = credits.get(stall timeout)   <-- credits.put() after each get
      items.put(item)                       --> items.get(heartbeat timeout) -> SSE event

      cancel(error): flag set, a wake-up token put on both queues, upstream shut down

A reader started on the writer's own thread (``reader.start_stream``) leaves the
channel its hand-over to a worker (``defer_reader``): it runs when the writer first
finds the channel empty, or at cancel. Until then the writer sends the first token
with no other thread awake to take the GIL from it.

Backpressure lives here: the reader needs a credit for every item, and there are
``capacity`` credits. With that many items unread it blocks for a credit, stops
reading the upstream socket, and TCP pushes back on the provider.

Both queues are ``queue.SimpleQueue`` (C, one lock each): this hand-over runs
once per relayed token, and a ``threading.Condition`` costs a fresh lock
allocation and several Python-level lock operations per wait. Only one reader
and one writer ever use a channel, so a single wake-up token per queue is enough
for ``cancel`` to release whichever side is blocked.

Items cross in batches: ``put_many`` puts every item of a read that has a credit
free as one list, and the writer takes a list in one queue operation and hands out
its items from its own deque. One wake-up of the writer per read of the provider,
not one per token (and no GIL hand-over to it between the tokens of a burst). A
credit is still one item, so the bound is the same.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import MLStreamError
from ..providers.events import Failure, StreamItem

log = logging.getLogger(__name__)

_WAKE = object()  # put by cancel(): "look at the cancelled flag"


class Channel:
    def __init__(self, capacity: int) -> None:
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()  # lists of items, or _WAKE
        self._batch: deque[Any] = deque()  # the writer's: what is left of the list it took last
        # Credits: ``_fresh`` never used yet (the reader's own count: only the thread that
        # puts touches it), then those the writer gave back, on a queue the reader can
        # wait on. Filling the queue with ``capacity`` credits up front was a Python loop
        # on every stream's way to its first token.
        self._fresh = capacity
        self._credits: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._capacity = capacity
        self._cancelled = threading.Event()
        self._error: MLStreamError | None = None
        # Guards _upstream, _deferred and the cancel transition: attribute swaps only;
        # the response's shutdown (a socket call) and the deferred start run after it is
        # released.
        self._lock = threading.Lock()
        self._upstream: Any = None  # the urllib3 response being read, if any
        self._deferred: Callable[[], None] | None = None  # see defer_reader
        self._taken: threading.Event | None = None  # set by get() while hand_over waits
        self._credit_waiter: Callable[[], None] | None = None  # see when_credit (swapped under _lock)

    @property
    def held(self) -> int:
        """Items the reader put (or is putting) that the writer has not taken yet (a
        snapshot: exact when neither side is between operations)."""
        return max(0, self._capacity - self._fresh - self._credits.qsize())

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def put(self, item: StreamItem, timeout: float | None = None) -> bool:
        """Queue ``item``, waiting while ``capacity`` items are unread.

        False if the channel is cancelled, or still full at ``timeout`` (a stall).
        """
        if self._cancelled.is_set():
            return False
        if self._fresh:
            self._fresh -= 1
        else:
            try:
                credit = self._credits.get(timeout=timeout)
            except queue.Empty:
                return False
            if credit is _WAKE or self._cancelled.is_set():
                return False
        self._items.put((item,))
        return True

    def put_many(self, items: list[StreamItem], timeout: float | None = None) -> bool:
        """Queue ``items`` in order, each with its credit: those whose credit is free go
        over together, then the reader waits (at most ``timeout`` each time) for the
        next credit. False as ``put``."""
        credits = self._credits
        count = len(items)
        start = 0
        while start < count:
            if self._cancelled.is_set():
                return False
            end = start + min(self._fresh, count - start)
            self._fresh -= end - start
            try:
                while end < count:
                    if credits.get_nowait() is _WAKE:
                        return False
                    end += 1
            except queue.Empty:
                pass
            if end == start:  # no room: wait for the writer to take one
                try:
                    credit = credits.get(timeout=timeout)
                except queue.Empty:
                    return False
                if credit is _WAKE or self._cancelled.is_set():
                    return False
                end += 1
            self._items.put(items if start == 0 and end == count else items[start:end])
            start = end
        return True

    def put_now(self, items: list[StreamItem]) -> int:
        """Queue as many of ``items`` (from the first) as have a credit free, never
        waiting; how many went (0 when cancelled). For a reader on a pool worker, which
        must not sleep: what did not fit waits for ``when_credit``."""
        if self._cancelled.is_set():
            return 0
        count = len(items)
        end = min(self._fresh, count)
        self._fresh -= end
        credits = self._credits
        try:
            while end < count:
                if credits.get_nowait() is _WAKE:
                    return 0
                end += 1
        except queue.Empty:
            pass
        if end:
            self._items.put(items if end == count else items[:end])
        return end

    def when_credit(self, callback: Callable[[], None]) -> bool:
        """Call ``callback`` once, when the writer next frees a credit or the channel is
        cancelled; False (and it is not kept) if a credit is free already or the channel
        is cancelled: then put again now."""
        with self._lock:
            if self._cancelled.is_set():
                return False
            self._credit_waiter = callback
        if self._fresh or not self._credits.empty():  # freed while it was being kept
            with self._lock:
                kept, self._credit_waiter = self._credit_waiter, None
            if kept is callback:
                return False
            # Taken already by the writer's get: it runs (or ran) the callback.
        return True

    def forget_credit_waiter(self) -> bool:
        """Take back the ``when_credit`` callback; True if it was still kept."""
        with self._lock:
            kept, self._credit_waiter = self._credit_waiter, None
        return kept is not None

    def _credit_freed(self) -> None:
        with self._lock:
            waiter, self._credit_waiter = self._credit_waiter, None
        if waiter is not None:
            waiter()

    def hand_over(self, item: StreamItem, timeout: float | None, wait: float) -> bool:
        """``put`` the item, then wait (at most ``wait`` seconds) until the writer took it.

        For a stream's first token: a reader that goes on decoding the rest of a burst
        keeps the GIL, and the woken writer waits for it; blocking here lets the
        writer send the first token first. False as ``put``.
        """
        taken = threading.Event()
        self._taken = taken
        try:
            if not self.put(item, timeout):
                return False
            taken.wait(wait)
            return True
        finally:
            self._taken = None

    def defer_reader(self, start: Callable[[], None]) -> None:
        """Run ``start`` (the reader's hand-over to a worker) once: when the writer would
        first wait on an empty channel, or at cancel (the reader then finds the channel
        cancelled and closes its response); at once if already cancelled."""
        with self._lock:
            if not self._cancelled.is_set():
                self._deferred = start
                return
        start()

    def _start_deferred(self) -> None:
        with self._lock:
            start, self._deferred = self._deferred, None
        if start is None:
            return
        try:
            start()
        except Exception:  # noqa: BLE001 - it may run on the hang-up watcher's thread, which must live on
            log.exception("starting a stream's reader failed")

    def get(self, timeout: float | None = None) -> StreamItem | None:
        """The next item; None if nothing came within ``timeout`` (a heartbeat is due).

        After ``cancel(error)`` it returns ``Failure(error)`` at once.
        """
        batch = self._batch
        if not batch:
            if self._deferred is not None and self._items.empty():
                self._start_deferred()
            if not self._cancelled.is_set():
                try:
                    items = self._items.get(timeout=timeout)
                except queue.Empty:
                    return None
                if items is not _WAKE:
                    batch.extend(items)
        if batch and not self._cancelled.is_set():
            self._credits.put(True)
            if self._taken is not None:
                self._taken.set()
            if self._credit_waiter is not None:
                self._credit_freed()
            return batch.popleft()
        return Failure(self._error or MLStreamError("the stream was cancelled"))

    def get_nowait(self) -> StreamItem | None:
        """The next item if one is queued (lets a writer batch what is ready)."""
        if self._cancelled.is_set():
            return None
        batch = self._batch
        if not batch:
            try:
                items = self._items.get_nowait()
            except queue.Empty:
                return None
            if items is _WAKE:
                return None
            batch.extend(items)
        self._credits.put(True)
        if self._credit_waiter is not None:
            self._credit_freed()
        return batch.popleft()

    @property
    def cancel_reason(self) -> MLStreamError | None:
        """What the stream was cancelled with (None: not cancelled, or cancelled without a
        reason: its writer gave up on the client)."""
        return self._error

    def wait_cancelled(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True as soon as the stream is cancelled."""
        return self._cancelled.wait(timeout)

    def attach_upstream(self, response: Any) -> bool:
        """Remember the response being read so ``cancel`` can wake its reader.

        False (and the response is shut down) if the channel is already cancelled.
        """
        with self._lock:
            if not self._cancelled.is_set():
                self._upstream = response
                return True
        _shutdown(response)
        return False

    def detach_upstream(self) -> None:
        with self._lock:
            self._upstream = None

    def cancel(self, error: MLStreamError | None = None) -> None:
        """Stop the stream: wake both sides, unblock an upstream read. Safe twice."""
        with self._lock:
            if self._cancelled.is_set():
                return
            self._error = error
            self._cancelled.set()
            upstream, self._upstream = self._upstream, None
        self._items.put(_WAKE)
        self._credits.put(_WAKE)
        if upstream is not None:
            _shutdown(upstream)  # outside the lock: it may block briefly on the socket
        self._start_deferred()
        self._credit_freed()


def _shutdown(response: Any) -> None:
    try:
        response.shutdown()
    except Exception:  # noqa: BLE001 - best effort: the reader closes it properly
        pass
