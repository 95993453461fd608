"""Operations: access log lines, request ids, /metrics, /healthz, /readyz, Server-Timing."""

from __future__ import annotations

import http.client
import json
import logging
import re
import secrets
import subprocess
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlstream.testing.fake_openai import FakeOpenAI, Scenario

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST, MLSTREAM, terminate
from ..support.streams import open_stream, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request

PREDICT_ROUTE = "/_plugins/_ml/models/{model_id}/_predict"
STREAM_ROUTE = "/_plugins/_ml/models/{model_id}/_predict/stream"
SANE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
ACCESS_FIELDS = {"time", "client", "method", "path", "model_id", "status", "bytes_out", "duration_ms",
                 "request_id", "upstream_status", "first_event_ms", "events"}


# --- helpers -----------------------------------------------------------------------------

class AccessCapture(logging.Handler):
    """Collects ``mlstream.access`` records and lets a test wait for one (no sleeping)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def lines_for(self, request_id: str) -> list[dict[str, Any]]:
        with self._cond:
            return [r.access for r in self.records if getattr(r, "access", {}).get("request_id") == request_id]

    def wait_for(self, request_id: str, timeout: float = HANG_GUARD) -> dict[str, Any]:
        with self._cond:
            assert self._cond.wait_for(lambda: self.lines_for(request_id), timeout), \
                f"no access line for request id {request_id}"
        lines = self.lines_for(request_id)
        assert len(lines) == 1, lines
        return lines[0]


@pytest.fixture
def access() -> Iterator[AccessCapture]:
    logger = logging.getLogger("mlstream.access")
    capture = AccessCapture()
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(capture)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)
        logger.setLevel(old_level)


def start_serve(data_dir: Path, stderr_path: Path, *extra: str) -> tuple[subprocess.Popen, str, Any]:
    """``mlstream serve`` in its own process, stderr into a file (never a full pipe)."""
    stderr = stderr_path.open("w")
    process = subprocess.Popen(
        [*MLSTREAM, "serve", "--port", "0", "--data-dir", str(data_dir), "--trusted-endpoint", LOOPBACK_TRUST,
         "--allow-private-endpoints", "--drain-timeout", "5", *extra],
        stdout=subprocess.PIPE, stderr=stderr, text=True)
    line = process.stdout.readline()
    assert line.startswith("mlstream listening on http://127.0.0.1:"), (line, stderr_path.read_text())
    return process, line.split()[-1], stderr


def stop_serve(process: subprocess.Popen, stderr: Any) -> None:
    try:
        terminate(process)
    finally:
        stderr.close()
    assert process.returncode == 0


class KeepAlive:
    """One keep-alive connection: a reply on it means the server finished the request
    before it (access line written, metrics counted): one handler thread per connection."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=HANG_GUARD)

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        payload = None if body is None else json.dumps(body).encode()
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        self.conn.request(method, path, body=payload, headers=all_headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def close(self) -> None:
        self.conn.close()


def sse_events(body: bytes) -> list[dict[str, Any]]:
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if block and not block.startswith(":"):
            assert block.startswith("data: "), block
            events.append(json.loads(block[len("data: "):]))
    return events


def content_events(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if not e["inference_results"][0]["output"][0]["dataAsMap"]["is_last"])


def samples(text: str) -> dict[str, list[Any]]:
    """Every sample of the exposition, by sample name; every line must parse."""
    by_name: dict[str, list[Any]] = {}
    count = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            by_name.setdefault(sample.name, []).append(sample)
            count += 1
    sample_lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert count == len(sample_lines), "some sample lines were not parsed"
    return by_name


def server_timing(header: str) -> dict[str, float]:
    metrics = {}
    for part in header.split(","):
        name, _, params = part.strip().partition(";")
        match = re.fullmatch(r"dur=([0-9]+(?:\.[0-9]+)?)", params.strip())
        assert match, header
        metrics[name.strip()] = float(match.group(1))
    return metrics


# --- access log, from a real `mlstream serve` process -------------------------------------

def test_json_access_log_one_line_per_request_with_no_secret_or_prompt(tmp_path):
    secret = "sk-PLANTED-" + secrets.token_hex(12)
    prompt = "PROMPT-MARKER-" + secrets.token_hex(12)
    messages = [{"role": "user", "content": f"Tell me about {prompt}"}]
    with FakeOpenAI(api_key=secret) as fake:
        stderr_path = tmp_path / "stderr.log"
        process, url, stderr = start_serve(tmp_path / "data", stderr_path, "--log-format", "json")
        try:
            http_ = KeepAlive(url)
            status, _, data = http_.request("POST", "/_plugins/_ml/connectors/_create", openai_connector(fake),
                                            {"X-Request-Id": "ops-create"})
            assert status == 200, data
            connector_id = json.loads(data)["connector_id"]
            status, _, data = http_.request(
                "POST", "/_plugins/_ml/models/_register?deploy=true",
                {"name": "m", "function_name": "remote", "connector_id": connector_id},
                {"X-Request-Id": "ops-register"})
            assert status == 200, data
            model_id = json.loads(data)["model_id"]

            status, headers, predicted = http_.request(
                "POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"messages": messages}},
                {"X-Request-Id": "ops-predict"})
            assert status == 200, predicted
            status, headers, streamed = http_.request(
                "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                stream_body(messages=messages), {"X-Request-Id": "ops-stream"})
            assert status == 200 and headers["content-type"].startswith("text/event-stream"), streamed
            relayed = content_events(sse_events(streamed))
            assert relayed > 0
            status, _, not_found = http_.request("GET", "/no/such/route", None, {"X-Request-Id": "ops-404"})
            assert status == 404
            # the reply to this one proves the requests before it are logged
            status, _, _ = http_.request("GET", "/healthz", None, {"X-Request-Id": "ops-barrier"})
            assert status == 200
            http_.close()
        finally:
            stop_serve(process, stderr)
        text = stderr_path.read_text(encoding="utf-8")

    assert secret not in text
    assert prompt not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    access = [line for line in lines if line.get("logger") == "mlstream.access"]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for line in access:
        assert ACCESS_FIELDS <= set(line), set(line)
        by_id.setdefault(line["request_id"], []).append(line)
    for rid in ("ops-create", "ops-register", "ops-predict", "ops-stream", "ops-404"):
        assert len(by_id.get(rid, [])) == 1, (rid, by_id.get(rid))
    assert set(by_id) <= {"ops-create", "ops-register", "ops-predict", "ops-stream", "ops-404", "ops-barrier"}

    for line in access:
        datetime.fromisoformat(line["time"])  # an ISO-8601 timestamp
        assert line["client"] == "127.0.0.1"
        assert isinstance(line["duration_ms"], (int, float)) and line["duration_ms"] >= 0
        assert isinstance(line["bytes_out"], int) and line["bytes_out"] > 0

    create = by_id["ops-create"][0]
    assert (create["method"], create["path"], create["status"]) == ("POST", "/_plugins/_ml/connectors/_create", 200)
    assert create["model_id"] is None and create["upstream_status"] is None
    assert create["events"] is None and create["first_event_ms"] is None

    predict = by_id["ops-predict"][0]
    assert (predict["method"], predict["path"]) == ("POST", f"/_plugins/_ml/models/{model_id}/_predict")
    assert predict["status"] == 200 and predict["upstream_status"] == 200
    assert predict["model_id"] == model_id
    assert predict["bytes_out"] == len(predicted)
    assert predict["events"] is None and predict["first_event_ms"] is None

    stream = by_id["ops-stream"][0]
    assert (stream["method"], stream["path"]) == ("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream")
    assert stream["status"] == 200 and stream["upstream_status"] == 200
    assert stream["model_id"] == model_id
    assert stream["events"] == relayed
    assert isinstance(stream["first_event_ms"], (int, float))
    assert 0 <= stream["first_event_ms"] <= stream["duration_ms"]
    assert stream["bytes_out"] >= len(streamed)  # the body, with its chunk framing

    missing = by_id["ops-404"][0]
    assert (missing["method"], missing["path"], missing["status"]) == ("GET", "/no/such/route", 404)
    assert missing["model_id"] is None and missing["upstream_status"] is None
    assert missing["bytes_out"] == len(not_found)


def test_text_access_log_one_line_per_request(tmp_path):
    secret = "sk-PLANTED-" + secrets.token_hex(12)
    with FakeOpenAI(api_key=secret) as fake:
        stderr_path = tmp_path / "stderr.log"
        process, url, stderr = start_serve(tmp_path / "data", stderr_path)
        try:
            http_ = KeepAlive(url)
            assert http_.request("POST", "/_plugins/_ml/connectors/_create", openai_connector(fake),
                                 {"X-Request-Id": "txt-create"})[0] == 200
            assert http_.request("GET", "/healthz", None, {"X-Request-Id": "txt-health"})[0] == 200
            assert http_.request("GET", "/no/such/route", None, {"X-Request-Id": "txt-404"})[0] == 404
            assert http_.request("GET", "/healthz", None, {"X-Request-Id": "txt-barrier"})[0] == 200
            http_.close()
        finally:
            stop_serve(process, stderr)
    text = stderr_path.read_text(encoding="utf-8")
    assert secret not in text
    access = [line for line in text.splitlines() if " mlstream.access: " in line]
    for rid, method, path, status in (("txt-create", "POST", "/_plugins/_ml/connectors/_create", "200"),
                                      ("txt-health", "GET", "/healthz", "200"),
                                      ("txt-404", "GET", "/no/such/route", "404")):
        mine = [line for line in access if f"id={rid}" in line.split()]
        assert len(mine) == 1, (rid, access)
        words = mine[0].split(" mlstream.access: ", 1)[1].split()
        assert words[:4] == ["127.0.0.1", method, path, status], mine[0]
    with pytest.raises(ValueError):
        json.loads(access[0])  # text, not JSON


# --- request id ---------------------------------------------------------------------------

def test_a_client_request_id_round_trips(server, fake, access):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))

    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                        {"parameters": {"messages": stream_body()["parameters"]["messages"]}},
                        headers={"X-Request-Id": "test-123"})
    assert reply.status == 200
    assert reply.headers["X-Request-Id"] == "test-123"
    assert fake.stats.requests[-1].headers["x-request-id"] == "test-123"
    line = access.wait_for("test-123")
    assert line["status"] == 200 and line["upstream_status"] == 200 and line["model_id"] == model_id

    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers={"X-Request-Id": "test-456"})
    assert response.status == 200 and response.complete
    assert response.headers["x-request-id"] == "test-456"
    assert fake.stats.requests[-1].headers["x-request-id"] == "test-456"
    line = access.wait_for("test-456")
    assert line["events"] == content_events(response.events())

    # JSON error replies echo it too
    reply = client.call("GET", "/_plugins/_ml/models/no-such-model", headers={"X-Request-Id": "test-789"})
    assert reply.status == 404 and reply.headers["X-Request-Id"] == "test-789"
    assert access.wait_for("test-789")["status"] == 404


def test_without_a_request_id_one_is_generated_echoed_and_sent_upstream(server, fake, access):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    first = client.call("GET", "/healthz")
    second = client.call("GET", "/healthz")
    ids = [first.headers.get("X-Request-Id"), second.headers.get("X-Request-Id")]
    assert all(i and SANE_ID.fullmatch(i) for i in ids), ids
    assert ids[0] != ids[1]

    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                        {"parameters": {"messages": stream_body()["parameters"]["messages"]}})
    generated = reply.headers["X-Request-Id"]
    assert SANE_ID.fullmatch(generated) and generated not in ids
    assert fake.stats.requests[-1].headers["x-request-id"] == generated
    assert access.wait_for(generated)["path"] == f"/_plugins/_ml/models/{model_id}/_predict"

    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    streamed = response.headers["x-request-id"]
    assert SANE_ID.fullmatch(streamed) and streamed != generated
    assert fake.stats.requests[-1].headers["x-request-id"] == streamed


@pytest.mark.parametrize("hostile", [
    "evil\r\n injected: yes",             # obs-fold: a CRLF inside the value
    "a" * 1000,                           # far too long
    "<script>alert(1)</script>",
    "id with spaces",
])
def test_a_hostile_request_id_is_replaced_by_a_generated_one(server, fake, access, hostile):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict",
                           json.dumps({"parameters": {"messages": stream_body()["parameters"]["messages"]}}).encode(),
                           headers={"X-Request-Id": hostile})
    assert response.status == 200, response.body
    assert "injected" not in response.headers
    echoed = response.headers["x-request-id"]
    assert SANE_ID.fullmatch(echoed) and echoed != hostile and "evil" not in echoed
    sent = fake.stats.requests[-1].headers["x-request-id"]
    assert sent == echoed
    assert access.wait_for(echoed)["status"] == 200


# --- metrics -------------------------------------------------------------------------------

def test_metrics_parse_and_cover_http_and_streams(server, fake, access):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    body = {"parameters": {"messages": stream_body()["parameters"]["messages"]}}
    for n in range(2):
        assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", body,
                           headers={"X-Request-Id": f"m-predict-{n}"}).status == 200
    relayed = 0
    for n in range(2):
        response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                               json.dumps(stream_body()).encode(), headers={"X-Request-Id": f"m-stream-{n}"})
        assert response.status == 200 and response.complete
        relayed += content_events(response.events())
    assert client.call("GET", "/no/such/route", headers={"X-Request-Id": "m-404"}).status == 404
    for rid in ("m-predict-0", "m-predict-1", "m-stream-0", "m-stream-1", "m-404"):
        access.wait_for(rid)  # logged after being counted

    reply = client.call("GET", "/metrics")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
    by_name = samples(reply.body)

    requests = {(s.labels["route"], s.labels["method"], s.labels["status"]): s.value
                for s in by_name["mlstream_http_requests_total"]}
    assert all(set(s.labels) == {"front", "route", "method", "status"} and s.labels["front"] == "ml-commons"
               for s in by_name["mlstream_http_requests_total"])
    assert requests[(PREDICT_ROUTE, "POST", "200")] == 2
    assert requests[(STREAM_ROUTE, "POST", "200")] == 2
    assert requests[("/_plugins/_ml/connectors/_create", "POST", "200")] == 1
    assert requests[("/_plugins/_ml/models/_register", "POST", "200")] == 1
    assert any(status == "404" for (_, _, status) in requests)
    assert not any(model_id in route for (route, _, _) in requests)  # templates, not raw paths

    buckets: dict[str, list[tuple[float, float]]] = {}
    for s in by_name["mlstream_http_request_duration_seconds_bucket"]:
        buckets.setdefault(s.labels["route"], []).append((float(s.labels["le"]), s.value))
    counts = {s.labels["route"]: s.value for s in by_name["mlstream_http_request_duration_seconds_count"]}
    assert {PREDICT_ROUTE, STREAM_ROUTE} <= set(buckets)
    for route, series in buckets.items():
        series.sort()
        values = [v for _, v in series]
        assert values == sorted(values), (route, series)            # cumulative
        assert series[-1][0] == float("inf") and series[-1][1] == counts[route]
    assert counts[PREDICT_ROUTE] == 2 and counts[STREAM_ROUTE] == 2
    sums = {s.labels["route"]: s.value for s in by_name["mlstream_http_request_duration_seconds_sum"]}
    assert sums[PREDICT_ROUTE] > 0

    assert by_name["mlstream_streams_active"][0].value == 0
    assert by_name["mlstream_streams_queued"][0].value == 0
    assert by_name["mlstream_streams_rejected_total"][0].value == 0
    assert by_name["mlstream_chunks_total"][0].value == relayed
    assert by_name["mlstream_time_to_first_chunk_seconds_count"][0].value == 2
    ttfc = sorted((float(s.labels["le"]), s.value) for s in by_name["mlstream_time_to_first_chunk_seconds_bucket"])
    assert [v for _, v in ttfc] == sorted(v for _, v in ttfc) and ttfc[-1][1] == 2


def test_metrics_before_any_traffic_parse(server):
    reply = Client(server.url).call("GET", "/metrics")
    assert reply.status == 200
    by_name = samples(reply.body)
    for name in ("mlstream_streams_active", "mlstream_streams_queued", "mlstream_streams_rejected_total",
                 "mlstream_chunks_total", "mlstream_time_to_first_chunk_seconds_count"):
        assert name in by_name, name


# --- health and readiness ------------------------------------------------------------------

def test_healthz(server):
    reply = Client(server.url).call("GET", "/healthz")
    assert reply.status == 200 and reply.body == {"status": "ok"}


def test_readyz_follows_the_pool(make_server, fake):
    server = make_server(stream_workers=1, stream_backlog=0)
    client = Client(server.url)
    reply = client.call("GET", "/readyz")
    assert reply.status == 200 and reply.body == {"status": "ready"}

    # The readers a backlog behind: a gzip-coded stream holds the one worker for its life
    # (a compressed body is read by a worker that waits on it), a plain one's slice waits.
    held = client.model_for(openai_connector(fake, model=Scenario(chunks=50, delay_ms=200, gzip=1).to_model()))
    slow = client.model_for(openai_connector(fake, model=Scenario(chunks=50, delay_ms=200).to_model()))
    sock, reader = open_stream(server, held)
    assert server.app.pool.wait_until(lambda pool: pool.running == 1, HANG_GUARD)
    waiting, waiting_reader = open_stream(server, slow)
    try:
        assert server.app.pool.wait_until(lambda pool: pool.queued == 1, HANG_GUARD)
        reply = client.call("GET", "/readyz")
        assert reply.status == 503, reply.body
        assert reply.body["status"] != "ready"
        assert client.call("GET", "/healthz").status == 200  # alive, just not ready
    finally:
        for file in (reader, sock, waiting_reader, waiting):
            file.close()
    assert server.app.pool.wait_idle(HANG_GUARD)
    reply = client.call("GET", "/readyz")
    assert reply.status == 200 and reply.body == {"status": "ready"}


# --- Server-Timing -------------------------------------------------------------------------

def test_server_timing_on_predict_splits_upstream_from_mlstream(server, fake):
    client = Client(server.url)
    delayed = client.model_for(openai_connector(fake, model=Scenario(first_delay_ms=200).to_model()))
    reply = client.call("POST", f"/_plugins/_ml/models/{delayed}/_predict",
                        {"parameters": {"messages": stream_body()["parameters"]["messages"]}})
    assert reply.status == 200
    timing = server_timing(reply.headers["Server-Timing"])
    assert set(timing) == {"upstream", "mlstream"}
    assert timing["upstream"] >= 200
    assert 0 <= timing["mlstream"] < 200  # the gateway's own share is small

    quick = client.model_for(openai_connector(fake))
    reply = client.call("POST", f"/_plugins/_ml/models/{quick}/_predict",
                        {"parameters": {"messages": stream_body()["parameters"]["messages"]}})
    timing = server_timing(reply.headers["Server-Timing"])
    assert set(timing) == {"upstream", "mlstream"}
    assert 0 <= timing["upstream"] < 200 and 0 <= timing["mlstream"] < 200
