"""merge_expositions: several workers' /metrics text as one, every series summed."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from mlstream.metrics import Metrics, merge_expositions


class Pool:
    def __init__(self, active: int) -> None:
        self.workers, self.active, self.queued, self.rejected = 4, active, 0, 0


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counters_gauges_and_histograms_are_summed_and_parse() -> None:
    one, two = Metrics(Pool(2)), Metrics(Pool(3))
    one.http_request("/x", "GET", 200, 0.004)
    two.http_request("/x", "GET", 200, 0.3)
    two.http_request("/y", "POST", 429, 0.001)  # a series only the second worker has
    one.stream_finished("completed", 7, 0.02)
    merged = samples(merge_expositions([one.render(), two.render()]))
    assert merged[("mlstream_streams_active", ())] == 5
    assert merged[("mlstream_chunks_total", ())] == 7
    route_x = (("front", "ml-commons"), ("method", "GET"), ("route", "/x"), ("status", "200"))
    assert merged[("mlstream_http_requests_total", route_x)] == 2
    route_y = (("front", "ml-commons"), ("method", "POST"), ("route", "/y"), ("status", "429"))
    assert merged[("mlstream_http_requests_total", route_y)] == 1
    assert merged[("mlstream_http_request_duration_seconds_count", (("route", "/x"),))] == 2
    assert merged[("mlstream_http_request_duration_seconds_bucket", (("le", "0.005"), ("route", "/x")))] == 1
    assert merged[("mlstream_http_request_duration_seconds_bucket", (("le", "+Inf"), ("route", "/x")))] == 2
    assert abs(merged[("mlstream_http_request_duration_seconds_sum", (("route", "/x"),))] - 0.304) < 1e-9
    # what the console's overview reads: processes and readers add up, the start is the earliest
    assert merged[("mlstream_worker_processes", ())] == 2
    assert merged[("mlstream_stream_workers", ())] == 8
    starts = [samples(m.render())[("mlstream_start_time_seconds", ())] for m in (one, two)]
    assert merged[("mlstream_start_time_seconds", ())] == min(starts)


def test_one_text_comes_back_the_same() -> None:
    alone = Metrics(Pool(1))
    alone.http_request("/x", "GET", 200, 0.01)
    text = alone.render()
    assert samples(merge_expositions([text])) == samples(text)
    assert [line for line in merge_expositions([text]).splitlines() if line.startswith("#")] == \
        [line for line in text.splitlines() if line.startswith("#")]


def test_families_stay_contiguous_when_a_later_worker_adds_a_series() -> None:
    first = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"1\"} 1\n# HELP b B.\n# TYPE b gauge\nb 2\n"
    second = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"2\"} 5\n# HELP b B.\n# TYPE b gauge\nb 3\n"
    assert merge_expositions([first, second]).splitlines() == [
        "# HELP a_total A.", "# TYPE a_total counter", 'a_total{k="1"} 1', 'a_total{k="2"} 5',
        "# HELP b B.", "# TYPE b gauge", "b 5"]
