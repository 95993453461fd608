"""The single binary (``dist/mlstream``, PyInstaller --onefile) as a user runs it.

The session fixture builds it with ``packaging/build_binary.sh`` when it is missing or
older than the sources, so CI always tests a binary of the commit under test. Every run
gets an empty environment (no PYTHONPATH, no virtualenv, no site-packages to lean on)
and another working directory: what the binary needs, it must carry.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
import urllib3

from mlstream import __version__
from mlstream.testing.fake_bedrock import FakeBedrock
from mlstream.testing.fake_collector import FakeCollector
from mlstream.testing.fake_openai import DEFAULT_TEXT as OPENAI_TEXT

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import stream_body
from ..support.timeouts import SUBPROCESS_HANG_GUARD
from ..support.wire import raw_request

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "dist" / "mlstream"
BUILD_SCRIPT = ROOT / "packaging" / "build_binary.sh"
BUILD_TIMEOUT = 900.0  # seconds; a build takes well under a minute here
TRUST_LOOPBACK = r"^http://127\.0\.0\.1:.*$"


def _sources() -> Iterator[Path]:
    # the modules and the package data the binary carries (the console's files)
    yield from (path for path in (ROOT / "mlstream").rglob("*")
                if path.is_file() and "__pycache__" not in path.parts)
    yield from (path for path in (ROOT / "packaging").iterdir() if path.is_file())
    yield from (ROOT / name for name in ("setup.cfg", "pyproject.toml") if (ROOT / name).exists())


def _stale() -> bool:
    if not BINARY.exists():
        return True
    built = BINARY.stat().st_mtime
    return any(source.stat().st_mtime > built for source in _sources())


@pytest.fixture(scope="session")
def binary() -> Path:
    if _stale():
        result = subprocess.run(["bash", str(BUILD_SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                                timeout=BUILD_TIMEOUT, env={**os.environ, "PYTHON": sys.executable})
        assert result.returncode == 0, f"build failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert BINARY.is_file() and os.access(BINARY, os.X_OK), BINARY
    return BINARY


@pytest.fixture
def bare(tmp_path: Path) -> dict[str, str]:
    """An environment with nothing Python in it; the onefile unpacks under TMPDIR."""
    home, unpack = tmp_path / "home", tmp_path / "unpack"
    home.mkdir()
    unpack.mkdir()
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(unpack)}


def run(binary: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=SUBPROCESS_HANG_GUARD)


def assert_cleaned_up(env: dict[str, str]) -> None:
    """The onefile bootloader removes what it unpacked (``_MEI*``) when Python exits."""
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def test_version(binary, bare, tmp_path):
    result = run(binary, "--version", env=bare, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"mlstream {__version__}"
    assert_cleaned_up(bare)


def test_demo_once_streams_the_answer(binary, bare, tmp_path):
    result = run(binary, "demo", "--once", env=bare, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert OPENAI_TEXT in result.stdout
    assert "Traceback" not in result.stderr
    assert_cleaned_up(bare)


class Served:
    """``dist/mlstream serve`` in its own process; stderr goes to a file."""

    def __init__(self, binary: Path, data_dir: Path, env: dict[str, str], cwd: Path, *extra: str) -> None:
        self.stderr_path = cwd / "serve.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [str(binary), "serve", "--port", "0", "--data-dir", str(data_dir),
                 "--trusted-endpoint", TRUST_LOOPBACK, "--allow-private-endpoints", "--drain-timeout", "5", *extra],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd)
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.process.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=SUBPROCESS_HANG_GUARD).decode()
        except queue.Empty:
            line = ""
        prefix = "mlstream listening on http://127.0.0.1:"
        if not line.startswith(prefix):
            self.process.kill()
            self.process.wait(timeout=SUBPROCESS_HANG_GUARD)
            pytest.fail(f"no listening line: {line!r}\n{self.stderr()}")
        self.url = line.split()[-1]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=SUBPROCESS_HANG_GUARD)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=SUBPROCESS_HANG_GUARD)
            self.process.stdout.close()


def is_last(event: dict) -> bool:
    return event["inference_results"][0]["output"][0]["dataAsMap"]["is_last"]


def contents(events: list[dict]) -> str:
    return "".join(event["inference_results"][0]["output"][0]["dataAsMap"]["content"] for event in events)


def bedrock_connector(fake: FakeBedrock) -> dict:
    """The ml-commons Bedrock Converse blueprint, verbatim but for the host (the fake)."""
    return {
        "name": "Amazon Bedrock Converse",
        "description": "Connector for Amazon Bedrock Converse",
        "version": 1,
        "protocol": "aws_sigv4",
        "credential": {"access_key": fake.access_key, "secret_key": fake.secret_key,
                       "session_token": fake.session_token},
        "parameters": {"region": fake.region, "service_name": "bedrock",
                       "model": "anthropic.claude-3-haiku-20240307-v1:0",
                       "endpoint": fake.url.removeprefix("http://")},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/converse",
            "request_body": "{ \"messages\": [ { \"role\": \"user\", \"content\": [ { \"text\": \"${parameters.inputs}\" } ] } ] }",
        }],
    }


def test_serve_streams_and_stops_cleanly_on_sigterm(binary, bare, tmp_path, fake):
    served = Served(binary, tmp_path / "data", bare, tmp_path)
    try:
        client = Client(served.url)
        connector_id = client.create_connector(openai_connector(fake))
        model_id = client.register(connector_id, deploy=True)
        streamed = raw_request(served.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                               json.dumps(stream_body()).encode(), timeout=SUBPROCESS_HANG_GUARD)
        assert streamed.status == 200, streamed.body
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = streamed.events()
        assert len(events) > 2 and is_last(events[-1]) and not any(is_last(e) for e in events[:-1])
        assert contents(events) == OPENAI_TEXT

        # The console's files, carried as package data.
        static = ROOT / "mlstream" / "fronts" / "console" / "static"
        for path, name in (("/_console", "index.html"), ("/_console/app.js", "app.js")):
            page = urllib3.request("GET", served.url + path, timeout=SUBPROCESS_HANG_GUARD, retries=False)
            assert page.status == 200 and page.data == (static / name).read_bytes(), (path, page.status)
            assert "default-src 'self'" in page.headers["Content-Security-Policy"]

        # Bedrock: botocore's SigV4 signer and event-stream decoder, from inside the binary.
        with FakeBedrock(session_token="fake-session-token") as bedrock:
            bedrock_model = client.model_for(bedrock_connector(bedrock))
            answer = raw_request(served.url, "POST", f"/_plugins/_ml/models/{bedrock_model}/_predict/stream",
                                 json.dumps({"parameters": {"inputs": "Who is Hamlet?"}}).encode(),
                                 timeout=SUBPROCESS_HANG_GUARD)
            assert answer.status == 200, answer.body
            bedrock_events = answer.events()
            assert len(bedrock_events) > 2 and is_last(bedrock_events[-1]), bedrock_events[-3:]
            assert bedrock.stats.signature_failures == 0
            assert bedrock.stats.requests[-1].path.endswith("/converse-stream")
    finally:
        code = served.terminate()
    stderr = served.stderr()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert fake.api_key not in stderr
    assert_cleaned_up(bare)
    assert (tmp_path / "data").is_dir()


def test_serve_exports_traces_from_the_binary(binary, bare, tmp_path, fake):
    """OpenTelemetry's SDK and exporter, carried: spans reach a collector over OTLP/HTTP."""
    with FakeCollector(decode=True) as collector:
        served = Served(binary, tmp_path / "data", {**bare, "OTEL_BSP_SCHEDULE_DELAY": "20"}, tmp_path,
                        "--otel-endpoint", collector.url)
        try:
            client = Client(served.url)
            model_id = client.model_for(openai_connector(fake))
            streamed = raw_request(served.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                                   json.dumps(stream_body()).encode(), timeout=SUBPROCESS_HANG_GUARD)
            assert streamed.status == 200, streamed.body
            assert collector.stats.wait_for(lambda s: any(span.kind == "client" for span in s.spans),
                                            SUBPROCESS_HANG_GUARD), served.stderr()
        finally:
            code = served.terminate()
    assert code == 0, served.stderr()
    assert "Traceback" not in served.stderr()
    [call] = [span for span in collector.stats.spans if span.kind == "client"]
    assert call.name == "chat gpt-3.5-turbo" and call.attributes["gen_ai.provider.name"] == "openai"
    assert_cleaned_up(bare)


def test_serve_with_workers_starts_them_from_the_binary_itself(binary, bare, tmp_path, fake):
    """The supervisor re-runs the binary for each worker: no Python on the host needed."""
    served = Served(binary, tmp_path / "data", bare, tmp_path, "--workers", "2")
    try:
        client = Client(served.url)
        assert client.call("GET", "/readyz").status == 200
        model_id = client.register(client.create_connector(openai_connector(fake)))
        for _ in range(4):  # new connections, spread over both workers
            assert Client(served.url).call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                                           stream_body()).status == 200
    finally:
        code = served.terminate()
    stderr = served.stderr()
    assert code == 0, stderr
    assert "2 workers up" in stderr and "Traceback" not in stderr
    assert_cleaned_up(bare)
