"""Prometheus text exposition of the server's counters (no client library needed).

Counters are updated once per request or stream, never per chunk under a lock:
a stream adds its chunk count when it ends.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from typing import TYPE_CHECKING

from .errors import MLStreamError, UpstreamError

if TYPE_CHECKING:
    from .streaming.pool import StreamPool

# Time to first chunk: from the request's arrival to the first event written.
TTFC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, pool: "StreamPool") -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._chunks = 0
        self._streams = Counter[str]()
        self._upstream_errors = Counter[str]()
        self._upstream_retries = Counter[str]()
        self._ttfc_counts = [0] * (len(TTFC_BUCKETS) + 1)
        self._ttfc_sum = 0.0

    def stream_finished(self, outcome: str, chunks: int, first_chunk_seconds: float | None) -> None:
        with self._lock:
            self._streams[outcome] += 1
            self._chunks += chunks
            if first_chunk_seconds is not None:
                self._ttfc_counts[bisect.bisect_left(TTFC_BUCKETS, first_chunk_seconds)] += 1
                self._ttfc_sum += first_chunk_seconds

    def upstream_failure(self, error: MLStreamError) -> None:
        """Count a provider failure: by its HTTP status, or by kind when it never answered."""
        if isinstance(error, UpstreamError):
            with self._lock:
                self._upstream_errors[error.kind] += 1

    def upstream_retry(self, status: int) -> None:
        with self._lock:
            self._upstream_retries[str(status)] += 1

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP mlstream_streams_active Streams running on a pool worker.",
                "# TYPE mlstream_streams_active gauge",
                f"mlstream_streams_active {self._pool.active}",
                "# HELP mlstream_streams_queued Streams admitted and waiting for a worker.",
                "# TYPE mlstream_streams_queued gauge",
                f"mlstream_streams_queued {self._pool.queued}",
                "# HELP mlstream_streams_rejected_total Streams refused with 429: pool and backlog full.",
                "# TYPE mlstream_streams_rejected_total counter",
                f"mlstream_streams_rejected_total {self._pool.rejected}",
                "# HELP mlstream_streams_total Streams ended, by outcome.",
                "# TYPE mlstream_streams_total counter",
                *(f'mlstream_streams_total{{outcome="{k}"}} {v}' for k, v in sorted(self._streams.items())),
                "# HELP mlstream_chunks_total Content events relayed to clients.",
                "# TYPE mlstream_chunks_total counter",
                f"mlstream_chunks_total {self._chunks}",
                "# HELP mlstream_upstream_errors_total Provider failures: its HTTP status, or connection/timeout/stream.",
                "# TYPE mlstream_upstream_errors_total counter",
                *(f'mlstream_upstream_errors_total{{status="{k}"}} {v}'
                  for k, v in sorted(self._upstream_errors.items())),
                "# HELP mlstream_upstream_retries_total Provider calls retried, by the status that was retried.",
                "# TYPE mlstream_upstream_retries_total counter",
                *(f'mlstream_upstream_retries_total{{status="{k}"}} {v}'
                  for k, v in sorted(self._upstream_retries.items())),
                "# HELP mlstream_time_to_first_chunk_seconds From request to first content event.",
                "# TYPE mlstream_time_to_first_chunk_seconds histogram",
            ]
            cumulative = 0
            for bound, count in zip((*TTFC_BUCKETS, float("inf")), self._ttfc_counts):
                cumulative += count
                label = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'mlstream_time_to_first_chunk_seconds_bucket{{le="{label}"}} {cumulative}')
            lines.append(f"mlstream_time_to_first_chunk_seconds_sum {self._ttfc_sum}")
            lines.append(f"mlstream_time_to_first_chunk_seconds_count {cumulative}")
        return "\n".join(lines) + "\n"
