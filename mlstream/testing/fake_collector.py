"""A fake OpenTelemetry collector on loopback: OTLP/HTTP (protobuf) in, for tests and the benchmark.

    POST /v1/traces     an ExportTraceServiceRequest    -> 200, an empty ExportTraceServiceResponse
    POST /v1/metrics    an ExportMetricsServiceRequest  -> 200, an empty ExportMetricsServiceResponse
    GET  /stats         the counters, as JSON (the benchmark reads them from another process)

``FakeCollector(decode=True)`` (tests; needs ``opentelemetry-proto``, in mlstream[otel]) keeps
every span and every histogram point it receives as plain values (``ReceivedSpan``,
``ReceivedPoint``), and ``stats.wait_for`` waits for a condition on them: a test waits
for the spans it expects, never for a time. Without decoding (the benchmark, whose
collector must cost little) exports are only counted. Each export's path and headers are
recorded (``stats.requests``); a gzip-coded body is decoded.

    with FakeCollector(decode=True) as collector:
        ...  # mlstream serve --otel-endpoint {collector.url}
        assert collector.stats.wait_for(lambda s: s.named("chat gpt-4o"), HANG_GUARD)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from typing import Any

from .fake_server import BadBody, FakeHandler, FakeServer, serve_until_signalled
from .stats import CounterStats

__all__ = ["FakeCollector", "CollectorStats", "RecordedExport", "ReceivedPoint", "ReceivedSpan"]

TRACES, METRICS = "/v1/traces", "/v1/metrics"
_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_STATUS = {0: "unset", 1: "ok", 2: "error"}


@dataclass(frozen=True)
class RecordedExport:
    path: str
    headers: dict[str, str]  # lower-cased names
    size: int                # bytes of the (decoded) body


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: str                 # server, client, internal, ...
    trace_id: str             # hex
    span_id: str
    parent_span_id: str       # "" for a root span
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    status: str               # unset, ok, error
    status_message: str
    resource: dict[str, Any]
    scope: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReceivedPoint:
    """One histogram data point of one export (cumulative: a later one supersedes it)."""

    metric: str
    unit: str
    attributes: dict[str, Any]
    count: int
    sum: float
    bounds: tuple[float, ...]
    bucket_counts: tuple[int, ...]
    resource: dict[str, Any]


class CollectorStats(CounterStats):
    COUNTERS = ("trace_exports", "metric_exports", "bytes_received", "spans_received", "connections_closed",
                "client_disconnects")

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[ReceivedSpan] = []
        self.points: list[ReceivedPoint] = []

    def named(self, name: str) -> list[ReceivedSpan]:
        """The spans received with ``name`` (call it under ``wait_for``, or after)."""
        return [span for span in self.spans if span.name == name]

    def latest_points(self, metric: str) -> list[ReceivedPoint]:
        """``metric``'s points of its latest export, one per attribute set."""
        latest: dict[str, ReceivedPoint] = {}
        for point in self.points:
            if point.metric == metric:
                latest[json.dumps(point.attributes, sort_keys=True)] = point
        return list(latest.values())

    def _received(self, spans: list[ReceivedSpan], points: list[ReceivedPoint]) -> None:
        with self._cond:
            self.spans += spans
            self.points += points
            self.spans_received += len(spans)
            self._cond.notify_all()

    def _reset_extra(self) -> None:
        self.spans = []
        self.points = []

    def counters(self) -> dict[str, int]:
        with self._cond:
            return {name: getattr(self, name) for name in self.COUNTERS}


class _Handler(FakeHandler):
    fake: FakeCollector

    def serve(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.command == "GET" and path == "/stats":
            self._answer(200, json.dumps(self.fake.stats.counters()).encode(), "application/json")
            return
        if self.command != "POST" or path not in (TRACES, METRICS):
            self._answer(404, b"", "text/plain")
            return
        try:
            body = self.read_body()
        except BadBody as exc:
            self._answer(exc.status, b"", "text/plain")
            return
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        stats = self.fake.stats
        stats._record(RecordedExport(path, {name.lower(): value for name, value in self.headers.items()}, len(body)))
        stats._add(bytes_received=len(body), **{"trace_exports" if path == TRACES else "metric_exports": 1})
        if self.fake.decode and path == TRACES:
            stats._received(_decode_spans(body), [])
        elif self.fake.decode:
            stats._received([], _decode_points(body))
        # An empty Export*ServiceResponse: nothing rejected.
        self._answer(200, b"", "application/x-protobuf")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.send(body)


class FakeCollector(FakeServer):
    handler = _Handler
    stats: CollectorStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, decode: bool = False) -> None:
        self.decode = decode
        super().__init__(host=host, port=port, stats=CollectorStats())


def _decode_spans(body: bytes) -> list[ReceivedSpan]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    span.name, _KINDS.get(span.kind, str(span.kind)), span.trace_id.hex(), span.span_id.hex(),
                    span.parent_span_id.hex(), _attributes(span.attributes),
                    tuple((event.name, _attributes(event.attributes)) for event in span.events),
                    _STATUS.get(span.status.code, str(span.status.code)), span.status.message, resource,
                    scope_spans.scope.name, span.start_time_unix_nano, span.end_time_unix_nano))
    return spans


def _decode_points(body: bytes) -> list[ReceivedPoint]:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    points = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.WhichOneof("data") != "histogram":
                    continue
                for point in metric.histogram.data_points:
                    points.append(ReceivedPoint(metric.name, metric.unit, _attributes(point.attributes), point.count,
                                                point.sum, tuple(point.explicit_bounds), tuple(point.bucket_counts),
                                                resource))
    return points


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def main(argv: list[str] | None = None) -> int:
    """``python -m mlstream.testing.fake_collector``: serve until SIGINT/SIGTERM; the URL on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--decode", action="store_true", help="decode what arrives (needs opentelemetry-proto)")
    args = parser.parse_args(argv)
    return serve_until_signalled(FakeCollector(port=args.port, decode=args.decode))


if __name__ == "__main__":
    sys.exit(main())
