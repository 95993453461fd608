"""Logging set-up and the access log (one line per request, text or JSON lines).

Access lines never carry a secret or a prompt: only the request's method, path,
model id, sizes, timings, statuses and request id.

A log line is never written by the thread that logs it. A handler's stream lock
is held across its write, so with stderr on a pipe nobody drains (a stopped
log shipper, a full terminal), every request logging its access line would stop
on that lock. Lines instead go through a bounded queue to one writer thread;
when the queue is full a line is dropped and counted (``dropped_lines``), and
the request goes on.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

access_log = logging.getLogger("mlstream.access")

# Lines waiting for the writer thread; past this, lines are dropped (and counted).
MAX_QUEUED_LINES = 10_000
# At exit, how long the writer gets to flush what is queued.
FLUSH_SECONDS = 2.0


@dataclass(slots=True)
class AccessRecord:
    client: str
    method: str
    path: str
    request_id: str
    status: int = 0
    bytes_out: int = 0
    duration_ms: float = 0.0
    model_id: str | None = None
    upstream_status: int | None = None
    first_event_ms: float | None = None  # streams only: request start to first content event
    events: int | None = None            # streams only: content events relayed
    target: str | None = None            # a router model's call: the target that served (or last tried)

    def emit(self) -> None:
        if access_log.isEnabledFor(logging.INFO):
            access_log.info("%s", self.text(), extra={"access": asdict(self)})

    def text(self) -> str:
        parts = [self.client, self.method, self.path, str(self.status), f"{self.bytes_out}B",
                 f"{self.duration_ms:.1f}ms", f"model={self.model_id or '-'}",
                 f"upstream={self.upstream_status or '-'}", f"id={self.request_id}"]
        if self.target is not None:
            parts.insert(7, f"target={self.target}")
        if self.events is not None:
            first = "-" if self.first_event_ms is None else f"{self.first_event_ms:.1f}ms"
            parts += [f"first_event={first}", f"events={self.events}"]
        return " ".join(parts)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and access fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        access = getattr(record, "access", None)
        if access:
            line.update(access)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class QueuedLines(logging.Handler):
    """Takes a line in the caller's thread without waiting; one writer thread writes it."""

    def __init__(self, target: logging.Handler, capacity: int = MAX_QUEUED_LINES) -> None:
        super().__init__()
        self._target = target
        self._lines: queue.Queue[logging.LogRecord | None] = queue.Queue(capacity)
        # Guards nothing but the count; put_nowait never waits.
        self._dropped_lock = threading.Lock()
        self.dropped = 0
        self._thread = threading.Thread(target=self._write, name="mlstream-log-writer", daemon=True)
        self._thread.start()

    def createLock(self) -> None:  # noqa: N802 - logging's name
        self.lock = None  # emit() only enqueues: no lock held across it, none needed

    def emit(self, record: logging.LogRecord) -> None:
        # The message is merged now, as logging.handlers.QueueHandler does: its
        # arguments may change once the caller goes on.
        record.msg, record.args = record.getMessage(), None
        try:
            self._lines.put_nowait(record)
        except queue.Full:
            with self._dropped_lock:
                self.dropped += 1

    def close(self) -> None:
        """Let the writer flush what is queued, for at most FLUSH_SECONDS."""
        try:
            self._lines.put(None, timeout=FLUSH_SECONDS)
        except queue.Full:
            pass
        self._thread.join(FLUSH_SECONDS)
        super().close()

    def _write(self) -> None:
        while True:
            record = self._lines.get()
            if record is None:
                return
            self._target.handle(record)


_queued: QueuedLines | None = None


def dropped_lines() -> int:
    """Log lines dropped because the log's destination did not keep up."""
    return _queued.dropped if _queued is not None else 0


def configure_logging(level: str, log_format: str) -> None:
    """Send every log line to stderr in ``log_format`` ("text" or "json")."""
    global _queued
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    if _queued is None:
        atexit.register(_flush_at_exit)
    else:
        _queued.close()
    _queued = QueuedLines(handler)
    root.addHandler(_queued)
    root.setLevel(level.upper())


def _flush_at_exit() -> None:
    if _queued is not None:
        _queued.close()
