"""Stored responses written off the stream's path: a writer thread writes them in batches,
and what it has not written yet is kept in memory so that this process reads it at once.

    request threads                            writer thread ("mlstream-responses")
    ---------------                            ------------------------------------
    keep(id, doc, expires): put it with the    wait for work, then gather for up to
      waiting ones, wake the writer (no I/O;     GATHER_SECONDS (a flush or a full batch
      past MAX_WAITING the caller writes it      ends it sooner); take up to BATCH
      itself: the store is not keeping up)       waiting responses (moved to "in
    get(id): waiting or in flight first,         flight"), write them in one
      else the store                             transaction, then forget them and
    delete(id): forget a waiting one; wait       wake whoever waits for them
      for one in flight; then the store
    close(): write everything (bounded), stop

The end of a Responses stream used to wait for its write: a SQLite commit (150 µs of CPU
under load, more on a slow disk) or a PostgreSQL round trip. Now the client has its last
event while the writer writes, and a batch of responses costs one commit (about half the
CPU per response at four a batch).

This process reads a response the moment it is kept. Other processes on the same store
(``--workers``, a shared PostgreSQL) read it once its batch is written: within
GATHER_SECONDS and a commit, unless the store is slow. So that a follow-up reaching another
process at once still finds it, a keeper on a shared store looks again after each of
RECHECK_PAUSES before it answers that a response is not there. Keeping stays best effort,
as it was: a write that fails is logged and those responses are not kept.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ...errors import StoreError
from ...store.sqlite import Store

log = logging.getLogger(__name__)

# How long the writer gathers responses after the first before it writes them.
GATHER_SECONDS = 0.02
# Responses per transaction, at most.
BATCH = 100
# Responses waiting to be written, at most: past it the store is not keeping up, and the
# request thread writes its own (so a slow store slows the streams, and memory stays bounded).
MAX_WAITING = 1_000
# A shared store's miss is looked up again after each of these pauses (0.18 s in all): a
# batch another process gathers is written within GATHER_SECONDS and a commit, later only
# when its store or its machine is slow. Only a response that is not there pays them.
RECHECK_PAUSES = (0.03, 0.05, 0.1)
# How long close() waits for the waiting responses to be written.
CLOSE_TIMEOUT = 10.0

Entry = tuple[dict[str, Any], float]  # the doc, and when it expires (Unix seconds)


class ResponseKeeper:
    def __init__(self, store: Store, *, shared: bool = False) -> None:
        self._store = store
        self._shared = shared  # other processes keep responses in the same store
        # Guards the dicts and flags below: dict updates only, never I/O (the writer and
        # delete wait on the condition with the lock released).
        self._cond = threading.Condition(threading.Lock())
        self._waiting: dict[str, Entry] = {}
        self._in_flight: dict[str, Entry] = {}
        self._flushes = 0  # flushes waiting: the writer stops gathering
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="mlstream-responses", daemon=True)
        self._thread.start()

    # --- request threads ---------------------------------------------------------------

    def keep(self, response_id: str, doc: dict[str, Any], expires_at: float) -> None:
        with self._cond:
            queued = len(self._waiting) < MAX_WAITING and not self._closing
            if queued:
                self._waiting[response_id] = (doc, expires_at)
                if len(self._waiting) == 1 or len(self._waiting) >= BATCH:
                    self._cond.notify_all()  # the writer starts gathering, or has a batch
        if not queued:
            self._write([(response_id, doc, expires_at)])

    def get(self, response_id: str) -> dict[str, Any] | None:
        with self._cond:
            entry = self._waiting.get(response_id) or self._in_flight.get(response_id)
        if entry is not None:
            doc, expires_at = entry
            return doc if expires_at > time.time() else None
        found = self._store.get_response(response_id)
        for pause in RECHECK_PAUSES if self._shared else ():
            if found is not None:
                break
            time.sleep(pause)  # another process may be writing it in a batch
            found = self._store.get_response(response_id)
        return found

    def delete(self, response_id: str) -> bool:
        """Remove a kept response; False when there was none (or it had expired)."""
        with self._cond:
            entry = self._waiting.pop(response_id, None)
            # One being written would be written after a delete of the store's row.
            while response_id in self._in_flight:
                self._cond.wait()
        deleted = self._store.delete_response(response_id)
        return deleted or (entry is not None and entry[1] > time.time())

    def flush(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Wait until every response kept so far is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._flushes += 1
            self._cond.notify_all()
            try:
                while self._waiting or self._in_flight:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        return False
                    self._cond.wait(left)
            finally:
                self._flushes -= 1
        return True

    def close(self) -> None:
        """Write what waits (bounded by CLOSE_TIMEOUT), then stop the writer."""
        if not self.flush():
            log.warning("stored responses not written at shutdown: the store did not take them within %.0f s",
                        CLOSE_TIMEOUT)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(CLOSE_TIMEOUT)

    # --- the writer ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closing:
                    self._cond.wait()
                if not self._waiting:  # closing, and nothing left
                    return
                gather_until = time.monotonic() + GATHER_SECONDS
                while len(self._waiting) < BATCH and not (self._flushes or self._closing):
                    left = gather_until - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = [(response_id, *entry) for response_id, entry in list(self._waiting.items())[:BATCH]]
                for response_id, *_ in batch:
                    self._in_flight[response_id] = self._waiting.pop(response_id)
            self._write(batch)
            with self._cond:
                self._in_flight = {}
                self._cond.notify_all()

    def _write(self, batch: list[tuple[str, dict[str, Any], float]]) -> None:
        try:
            self._store.put_responses(batch)
        except StoreError as error:
            log.warning("%s not stored: %s", _named(batch), error.reason)
        except Exception:  # the writer must outlive any one batch
            log.exception("%s not stored", _named(batch))


def _named(batch: list[tuple[str, dict[str, Any], float]]) -> str:
    ids = ", ".join(response_id for response_id, _, _ in batch[:5])
    return f"response {ids} was" if len(batch) == 1 else f"{len(batch)} responses ({ids}, ...) were"
