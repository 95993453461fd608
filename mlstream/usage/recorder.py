"""Writes usage records off the request path: a bounded queue and one writer thread.

    request threads                          writer thread ("mlstream-usage")
    ---------------                          --------------------------------
    record(r): append r to the queue,        wait for work, then gather for up to
      add r's cost and tokens to the           GATHER_SECONDS (a flush or a full batch
      pending charges; wake the writer         ends it sooner); take up to BATCH_RECORDS
      only for the first (no I/O)              records and every pending charge (moved
                                               to "in flight"); write them in one
                                               transaction; then forget the in-flight
    pending(key): pending + in-flight          charges and count the records committed
      charges, for a budget check
                                             on a store error: put the batch back in
    close(): wait for the queue to empty       front, merge the charges back, retry
      (bounded), stop the thread               after a pause (backing off to 2 s)

Nothing a request thread does here blocks: the lock guards deque and dict updates
only. A record and its charges are separate on purpose: when the queue is full
(the store has been failing or slow for ``QUEUE_RECORDS`` calls), the *record* is
dropped and counted (``mlstream_usage_records_dropped_total``, and a warning at
most every 10 s) but its *charges* are still kept, since they are a few numbers per
key: budgets and ``tpm`` stay right while the detail rows are lost. A record
accepted before ``close()`` is written before it returns, unless the store stays
unwritable for the whole ``CLOSE_TIMEOUT``: so a call answered before SIGTERM is in
the records (the server drains its requests before closing the recorder).

A charge is visible to this process's budget checks at once (``pending``) and to
other processes once its batch commits: within GATHER_SECONDS and a commit, unless the
store is slow. Gathering keeps the writer off the request path: one wake-up and one
commit for a burst of calls, not one per call while the next call is being served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Protocol

from ..errors import MLStreamError
from .records import DAY_MS, UsageRecord
from .tables import UsageTables

log = logging.getLogger(__name__)

# Records waiting to be written. A record is about 0.5 KB, so the queue holds at most a few
# MB; 10 000 calls is minutes of a busy server's traffic while the store is failing.
QUEUE_RECORDS = 10_000
# Records per transaction: large enough that a burst costs few commits, small enough
# that one batch's transaction stays short.
BATCH_RECORDS = 500
# How long close() waits for the queue to be written (the store may be down).
CLOSE_TIMEOUT = 10.0
# How long the writer gathers records after the first before it writes them.
GATHER_SECONDS = 0.2
RETRY_MAX_SECONDS = 2.0
DROP_WARNING_SECONDS = 10.0


class DropCounter(Protocol):
    def usage_dropped(self) -> None: ...


class UsageRecorder:
    def __init__(self, tables: UsageTables, drops: DropCounter | None = None) -> None:
        self._tables = tables
        self._drops = drops
        # Guards everything below: deque and dict updates only, never I/O or a wait on
        # another thread (the writer waits on the condition with the lock released).
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[UsageRecord] = deque()
        self._spend: dict[tuple[str, int], float] = {}  # (key id, UTC day ms) -> cost not yet written
        self._tokens: dict[str, int] = {}                # key id -> tokens not yet in the tpm window
        self._inflight_spend: dict[tuple[str, int], float] = {}
        self._inflight_tokens: dict[str, int] = {}
        self._accepted = 0   # records accepted into the queue, ever
        self._written = 0    # records committed, ever
        self._generation = 0  # bumped at every commit (budget checks detect a commit mid-read)
        self._closing = False
        self._hurry = False  # a flush waits: stop gathering
        self._dropped = 0
        self._last_drop_warning = 0.0
        self._thread = threading.Thread(target=self._run, name="mlstream-usage", daemon=True)
        self._thread.start()

    # --- request threads ---------------------------------------------------------------

    def record(self, record: UsageRecord) -> bool:
        """Queue ``record`` and charge its cost and tokens to its key. Never blocks.
        False when the queue was full: the record is dropped (counted), its charges kept."""
        warn = False
        with self._cond:
            accepted = len(self._queue) < QUEUE_RECORDS and not self._closing
            if accepted:
                self._queue.append(record)
                self._accepted += 1
            else:
                self._dropped += 1
                now = time.monotonic()
                if now - self._last_drop_warning >= DROP_WARNING_SECONDS:
                    self._last_drop_warning, warn = now, True
            day = (record.time_ms // DAY_MS) * DAY_MS
            for scope in record.scopes:  # its key and its tenant
                if record.cost:
                    self._spend[(scope, day)] = self._spend.get((scope, day), 0.0) + record.cost
                if record.tokens:
                    self._tokens[scope] = self._tokens.get(scope, 0) + record.tokens
            if len(self._queue) <= 1 or len(self._queue) >= BATCH_RECORDS:
                self._cond.notify()  # the writer starts gathering, or has a batch
        if not accepted:
            if self._drops is not None:
                self._drops.usage_dropped()
            if warn:
                log.warning("usage records are being dropped: %d records wait to be written and the store "
                            "is not keeping up (budgets and tpm still count them)", QUEUE_RECORDS)
        return accepted

    def pending(self, key_id: str, from_ms: int, to_ms: int) -> tuple[float, int, int]:
        """(spend in [from_ms, to_ms), tokens) charged to ``key_id`` (a key's or a tenant's
        scope id) and not yet committed, and the commit generation they were read at."""
        with self._cond:
            spend = sum(cost for (key, day), cost in (*self._spend.items(), *self._inflight_spend.items())
                        if key == key_id and from_ms <= day < to_ms)
            tokens = self._tokens.get(key_id, 0) + self._inflight_tokens.get(key_id, 0)
            return spend, tokens, self._generation

    def generation(self) -> int:
        with self._cond:
            return self._generation

    @property
    def dropped(self) -> int:
        with self._cond:
            return self._dropped

    def flush(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Wait until every record accepted so far is written (their charges go with them, in
        the same batch or an earlier one); False on timeout. Records accepted meanwhile are
        not waited for, so a busy server answers a flush as soon as the earlier ones are in."""
        with self._cond:
            target = self._accepted
            self._hurry = True
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write what is queued (for up to ``timeout``), then stop the writer. Safe twice."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._cond:
                lost = len(self._queue)
            log.error("the usage recorder could not write %d records before shutting down", lost)

    # --- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        delay = 0.05
        deadline: float | None = None
        while True:
            with self._cond:
                while not (self._queue or self._spend or self._tokens or self._closing):
                    self._cond.wait()
                gather_until = time.monotonic() + GATHER_SECONDS
                while not (self._closing or self._hurry) and len(self._queue) < BATCH_RECORDS:
                    remaining = gather_until - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                self._hurry = False
                if self._closing and not (self._queue or self._spend or self._tokens):
                    return
                if self._closing and deadline is None:
                    deadline = time.monotonic() + CLOSE_TIMEOUT
                batch = [self._queue.popleft() for _ in range(min(BATCH_RECORDS, len(self._queue)))]
                self._inflight_spend, self._spend = self._spend, {}
                self._inflight_tokens, self._tokens = self._tokens, {}
                spend, tokens = self._inflight_spend, self._inflight_tokens
            try:
                self._tables.write(batch, spend, tokens,
                                   released=[r for record in batch for r in record.reservations])
            except (MLStreamError, OSError) as exc:
                with self._cond:
                    self._queue.extendleft(reversed(batch))
                    for k, v in self._inflight_spend.items():
                        self._spend[k] = self._spend.get(k, 0.0) + v
                    for k, n in self._inflight_tokens.items():
                        self._tokens[k] = self._tokens.get(k, 0) + n
                    self._inflight_spend, self._inflight_tokens = {}, {}
                    waiting = len(self._queue)
                log.warning("cannot write %d usage records (%s); retrying in %.1f s", waiting,
                            getattr(exc, "reason", exc), delay)
                if deadline is not None and time.monotonic() >= deadline:
                    return  # close() reports what is lost
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                continue
            delay = 0.05
            with self._cond:
                self._inflight_spend, self._inflight_tokens = {}, {}
                self._written += len(batch)
                self._generation += 1
                self._cond.notify_all()
