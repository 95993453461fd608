"""Prometheus text exposition of the server's counters (no client library needed).

Counters are updated once per request or stream, never per chunk under a lock:
a stream adds its chunk count when it ends.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Protocol

from .errors import MLStreamError, UpstreamError
from .logs import dropped_lines


class PoolCounts(Protocol):
    """The stream pool's counts, as the gauges read them (``streaming.pool.StreamPool``)."""

    workers: int  # the pool's size (--stream-workers)
    active: int
    queued: int
    rejected: int


# Time to first chunk: from the request's arrival to the first event written.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TTFC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class PredictionCounts:
    """One model's predictions (``_predict`` and ``_predict/stream``), as mlstream answered them."""

    requests: int = 0
    failures: int = 0      # answered with an error status
    total_ms: float = 0.0  # time to answer (streams: to their end)
    min_ms: float = float("inf")
    max_ms: float = 0.0

    def add(self, failed: bool, ms: float) -> None:
        self.requests += 1
        if failed:
            self.failures += 1
        self.total_ms += ms
        if ms < self.min_ms:
            self.min_ms = ms
        if ms > self.max_ms:
            self.max_ms = ms


# Models counted one by one; only models that exist are (a request naming another is not
# counted per model, so random ids cannot take these places).
MAX_COUNTED_MODELS = 10_000


class Metrics:
    def __init__(self, pool: PoolCounts) -> None:
        self._pool = pool
        self._started = time.time()  # Unix time: the overview's uptime is a scrape's Date minus this
        # Guards the counters: only arithmetic under it (and render's formatting).
        self._lock = threading.Lock()
        self._chunks = 0
        self._streams = Counter[tuple[str, str]]()  # by (front, outcome)
        self._upstream_errors = Counter[str]()
        self._upstream_retries = Counter[str]()
        self._ttfc = Histogram(TTFC_BUCKETS)
        self._http_requests = Counter[tuple[str, str, str, int]]()  # by (front, route, method, status)
        self._http_durations: dict[str, Histogram] = {}
        self._predictions: dict[str, PredictionCounts] = {}
        self._all_predictions = PredictionCounts()
        # Usage (usage_recorder): tokens by (model, interface, direction), cost by model. No
        # key label: keys are many. Models are bounded as for the per-model counts.
        self._tokens = Counter[tuple[str, str, str]]()
        self._cost: dict[str, float] = {}
        self._usage_dropped = 0
        # Router models' attempts by (router, target, outcome): served, failed (moved on),
        # error (answered), unavailable (deleted or disabled). Bounded as the models are.
        self._routing = Counter[tuple[str, str, str]]()
        self._cache_requests = Counter[str]()  # by x-mlstream-cache status
        self._cache_semantic = Counter[str]()  # semantic look-ups: hit, miss, error
        self._cache_entries = self._cache_bytes = 0  # as the last write or delete found the cache

    def stream_finished(self, outcome: str, chunks: int, first_chunk_seconds: float | None,
                        front: str = "ml-commons") -> None:
        with self._lock:
            self._streams[(front, outcome)] += 1
            self._chunks += chunks
            if first_chunk_seconds is not None:
                self._ttfc.observe(first_chunk_seconds)

    def http_request(self, route: str, method: str, status: int, seconds: float,
                     model_id: str | None = None, front: str = "ml-commons") -> None:
        """One answered request; ``route`` is the route's template, so labels stay few;
        ``front`` the API it came through (ml-commons or openai). ``model_id``, given once a
        predict route (any front) found the model, counts the request as that model's
        prediction."""
        with self._lock:
            if model_id is not None and ("_predict" in route or front != "ml-commons"):
                self._prediction(model_id, status >= 400, seconds * 1000)
            self._http_requests[(front, route, method, status)] += 1
            histogram = self._http_durations.get(route)
            if histogram is None:
                histogram = self._http_durations[route] = Histogram(DURATION_BUCKETS)
            histogram.observe(seconds)

    def _prediction(self, model_id: str, failed: bool, ms: float) -> None:
        self._all_predictions.add(failed, ms)
        counts = self._predictions.get(model_id)
        if counts is None:
            if len(self._predictions) >= MAX_COUNTED_MODELS:
                return
            counts = self._predictions[model_id] = PredictionCounts()
        counts.add(failed, ms)

    def usage_recorded(self, model_id: str, interface: str, input_tokens: int, output_tokens: int,
                       cost: float | None) -> None:
        """One provider call's tokens and cost (``budgets.Accountant.record``)."""
        with self._lock:
            if model_id not in self._cost and len(self._cost) >= MAX_COUNTED_MODELS:
                return
            self._tokens[(model_id, interface, "input")] += input_tokens
            self._tokens[(model_id, interface, "output")] += output_tokens
            self._cost[model_id] = self._cost.get(model_id, 0.0) + (cost or 0.0)

    def routing_attempt(self, router: str, target: str, outcome: str) -> None:
        with self._lock:
            if (router, target, outcome) in self._routing or len(self._routing) < MAX_COUNTED_MODELS:
                self._routing[(router, target, outcome)] += 1

    def cache_request(self, status: str) -> None:
        """A request the response cache was asked about: HIT, MISS, REFRESH, BYPASS, DISABLED."""
        with self._lock:
            self._cache_requests[status.lower()] += 1

    def cache_semantic(self, result: str) -> None:
        """A semantic look-up of the response cache: hit, miss, or error (no embedding)."""
        with self._lock:
            self._cache_semantic[result] += 1

    def cache_size(self, entries: int, size: int) -> None:
        with self._lock:
            self._cache_entries, self._cache_bytes = entries, size

    def usage_dropped(self) -> None:
        """A usage record the recorder's full queue could not take."""
        with self._lock:
            self._usage_dropped += 1

    def predictions(self) -> tuple[PredictionCounts, dict[str, PredictionCounts]]:
        """All predictions, and each model's (copies)."""
        with self._lock:
            return (replace(self._all_predictions),
                    {model_id: replace(counts) for model_id, counts in self._predictions.items()})

    def streams(self) -> dict[str, int]:
        """Streams live now, slices waiting for a worker, streams refused for capacity, and
        streams ended by outcome."""
        with self._lock:
            ended = Counter[str]()
            for (_, outcome), count in self._streams.items():
                ended[outcome] += count
        return {"active": self._pool.active, "queued": self._pool.queued, "rejected": self._pool.rejected,
                **dict(ended)}

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
                "# HELP mlstream_start_time_seconds When this server started, in Unix time (under --workers, "
                "the earliest worker).",
                "# TYPE mlstream_start_time_seconds gauge",
                f"mlstream_start_time_seconds {self._started:.3f}",
                "# HELP mlstream_worker_processes Server processes answering (1, or the --workers up).",
                "# TYPE mlstream_worker_processes gauge",
                "mlstream_worker_processes 1",
                "# HELP mlstream_stream_workers Reader slices the stream pools may run at once (--stream-workers "
                "per process).",
                "# TYPE mlstream_stream_workers gauge",
                f"mlstream_stream_workers {self._pool.workers}",
                "# HELP mlstream_streams_active Live streams (admitted, not yet ended).",
                "# TYPE mlstream_streams_active gauge",
                f"mlstream_streams_active {self._pool.active}",
                "# HELP mlstream_streams_queued Reader slices waiting for a worker.",
                "# TYPE mlstream_streams_queued gauge",
                f"mlstream_streams_queued {self._pool.queued}",
                "# HELP mlstream_streams_rejected_total Streams refused with 429: more reader slices waiting than "
                "the backlog.",
                "# TYPE mlstream_streams_rejected_total counter",
                f"mlstream_streams_rejected_total {self._pool.rejected}",
                "# HELP mlstream_streams_total Streams ended, by front (ml-commons, openai) and outcome.",
                "# TYPE mlstream_streams_total counter",
                *(f'mlstream_streams_total{{front="{front}",outcome="{outcome}"}} {v}'
                  for (front, outcome), v in sorted(self._streams.items())),
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
                *self._ttfc.lines("mlstream_time_to_first_chunk_seconds", ""),
                "# HELP mlstream_http_requests_total HTTP requests answered, by front, route template, method "
                "and status.",
                "# TYPE mlstream_http_requests_total counter",
                *(f'mlstream_http_requests_total{{front="{front}",route="{route}",method="{method}",'
                  f'status="{status}"}} {n}'
                  for (front, route, method, status), n in sorted(self._http_requests.items())),
                "# HELP mlstream_log_lines_dropped_total Log lines dropped because the log's destination did not keep up.",
                "# TYPE mlstream_log_lines_dropped_total counter",
                f"mlstream_log_lines_dropped_total {dropped_lines()}",
                "# HELP mlstream_tokens_total Tokens of provider calls, by model, interface and direction.",
                "# TYPE mlstream_tokens_total counter",
                *(f'mlstream_tokens_total{{model="{_label(model)}",interface="{_label(interface)}",'
                  f'direction="{direction}"}} {n}'
                  for (model, interface, direction), n in sorted(self._tokens.items())),
                "# HELP mlstream_cost_total Cost of provider calls by model, from the model's pricing "
                "(calls of a model without pricing add 0).",
                "# TYPE mlstream_cost_total counter",
                *(f'mlstream_cost_total{{model="{_label(model)}"}} {_number(cost)}'
                  for model, cost in sorted(self._cost.items())),
                "# HELP mlstream_usage_records_dropped_total Usage records dropped because the queue to the "
                "store was full (their spend and tokens still counted).",
                "# TYPE mlstream_usage_records_dropped_total counter",
                f"mlstream_usage_records_dropped_total {self._usage_dropped}",
                "# HELP mlstream_routing_attempts_total Router models' calls to their targets, by outcome: served, "
                "failed (moved on to the next), error (answered), unavailable (deleted or disabled).",
                "# TYPE mlstream_routing_attempts_total counter",
                *(f'mlstream_routing_attempts_total{{router="{_label(router)}",target="{_label(target)}",'
                  f'outcome="{outcome}"}} {n}' for (router, target, outcome), n in sorted(self._routing.items())),
                "# HELP mlstream_cache_requests_total Requests the response cache was asked about, by result "
                "(hit, miss, refresh, bypass, disabled).",
                "# TYPE mlstream_cache_requests_total counter",
                *(f'mlstream_cache_requests_total{{result="{result}"}} {n}'
                  for result, n in sorted(self._cache_requests.items())),
                "# HELP mlstream_cache_semantic_lookups_total Semantic look-ups of the response cache after an "
                "exact miss, by result (error: the embedding failed, the call went on uncached).",
                "# TYPE mlstream_cache_semantic_lookups_total counter",
                *(f'mlstream_cache_semantic_lookups_total{{result="{result}"}} {n}'
                  for result, n in sorted(self._cache_semantic.items())),
                "# HELP mlstream_cache_entries Entries in the response cache (as this process last wrote it).",
                "# TYPE mlstream_cache_entries gauge",
                f"mlstream_cache_entries {self._cache_entries}",
                "# HELP mlstream_cache_bytes Bytes of the response cache's entries (as this process last wrote it).",
                "# TYPE mlstream_cache_bytes gauge",
                f"mlstream_cache_bytes {self._cache_bytes}",
                "# HELP mlstream_http_request_duration_seconds Time to answer (streams: to their end), by route.",
                "# TYPE mlstream_http_request_duration_seconds histogram",
            ]
            for route, histogram in sorted(self._http_durations.items()):
                lines += histogram.lines("mlstream_http_request_duration_seconds", f'route="{route}"')
        return "\n".join(lines) + "\n"


class Histogram:
    """Prometheus histogram buckets (callers hold the Metrics lock)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self._bounds = buckets
        self._counts = [0] * (len(buckets) + 1)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def lines(self, name: str, labels: str) -> list[str]:
        prefix = f"{labels}," if labels else ""
        out, cumulative = [], 0
        for bound, count in zip((*self._bounds, float("inf")), self._counts):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{prefix}le="{le}"}} {cumulative}')
        suffix = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{suffix} {self._sum}", f"{name}_count{suffix} {cumulative}"]
        return out


# Families merged by their minimum rather than their sum.
_EARLIEST = frozenset({"mlstream_start_time_seconds"})
_SHARED = frozenset({"mlstream_cache_entries", "mlstream_cache_bytes"})


def merge_expositions(texts: list[str]) -> str:
    """Several processes' ``render()`` output as one: each sample (name and labels) summed.

    Every series we expose is a counter, a histogram bucket/sum/count, or a gauge whose
    total is what a scrape of the deployment means (streams active, queued, worker
    processes), so a sum is right for all of them but a start time, where the earliest
    is, and the response cache's size, which every process sees whole (the largest is the
    latest one). Families keep their order and stay contiguous; a series only some processes have
    is added at the end of its family.
    """
    families: dict[str, tuple[list[str], dict[str, float]]] = {}
    for text in texts:
        family = ""
        for line in text.splitlines():
            if line.startswith("# HELP "):
                family = line.split(" ", 3)[2]
                headers, _ = families.setdefault(family, ([], {}))
                if not headers:
                    headers.append(line)
            elif line.startswith("# TYPE "):
                headers, _ = families.setdefault(family, ([], {}))
                if len(headers) < 2:
                    headers.append(line)
            elif line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                samples = families.setdefault(family, ([], {}))[1]
                if series in samples and family in _EARLIEST:
                    samples[series] = min(samples[series], float(value))
                elif series in samples and family in _SHARED:
                    samples[series] = max(samples[series], float(value))
                else:
                    samples[series] = samples.get(series, 0.0) + float(value)
    lines: list[str] = []
    for headers, samples in families.values():
        lines += headers
        lines += (f"{series} {_number(value)}" for series, value in samples.items())
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    """A label value escaped as the exposition format asks."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
