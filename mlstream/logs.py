"""Logging set-up and the access log (one line per request, text or JSON lines).

Access lines never carry a secret or a prompt: only the request's method, path,
model id, sizes, timings, statuses and request id.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

access_log = logging.getLogger("mlstream.access")


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

    def emit(self) -> None:
        if access_log.isEnabledFor(logging.INFO):
            access_log.info("%s", self.text(), extra={"access": asdict(self)})

    def text(self) -> str:
        parts = [self.client, self.method, self.path, str(self.status), f"{self.bytes_out}B",
                 f"{self.duration_ms:.1f}ms", f"model={self.model_id or '-'}",
                 f"upstream={self.upstream_status or '-'}", f"id={self.request_id}"]
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


def configure_logging(level: str, log_format: str) -> None:
    """Send every log line to stderr in ``log_format`` ("text" or "json")."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
