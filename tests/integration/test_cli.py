"""The command line as a user runs it: separate processes, real signals."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from mlstream import __version__
from mlstream.testing.embeddings import fake_vector

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST, MLSTREAM
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request



def start_serve(data_dir: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [*MLSTREAM, "serve", "--port", "0", "--data-dir", str(data_dir), "--trusted-endpoint", LOOPBACK_TRUST,
         "--allow-private-endpoints", "--drain-timeout", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.startswith("mlstream listening on http://127.0.0.1:"), (line, process.stderr.read())
    return process, line.split()[-1]


def stop_serve(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, stderr
    return stderr


def test_version():
    result = subprocess.run([*MLSTREAM, "--version"], capture_output=True, text=True, timeout=HANG_GUARD)
    assert result.returncode == 0 and result.stdout.strip() == f"mlstream {__version__}"


def test_state_survives_a_restart(tmp_path, fake):
    process, url = start_serve(tmp_path)
    try:
        client = Client(url)
        model_id = client.model_for(openai_connector(fake))
        client.ok("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.stream_enabled": True}})
    finally:
        stderr = stop_serve(process)
    assert fake.api_key not in stderr

    process, url = start_serve(tmp_path)
    try:
        client = Client(url)
        whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})
        assert whole["inference_results"][0]["status_code"] == 200
        streamed = raw_request(url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                               json.dumps(stream_body()).encode())
        assert streamed.status == 200 and streamed.events()[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"]
        settings = client.ok("GET", "/_cluster/settings")
        assert settings["persistent"]["plugins"]["ml_commons"]["stream_enabled"] is True
    finally:
        stop_serve(process)


def test_port_in_use_is_a_clear_error(tmp_path):
    process, url = start_serve(tmp_path / "a")
    try:
        port = url.rsplit(":", 1)[1]
        result = subprocess.run([*MLSTREAM, "serve", "--port", port, "--data-dir", str(tmp_path / "b")],
                                capture_output=True, text=True, timeout=HANG_GUARD)
        assert result.returncode != 0
        assert "cannot start" in result.stderr and "Traceback" not in result.stderr
    finally:
        stop_serve(process)


def test_demo_once_streams_an_answer():
    result = subprocess.run([*MLSTREAM, "demo", "--once"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Hamlet, the Prince of Denmark" in result.stdout
    first = ", ".join(f"{v:.4f}" for v in fake_vector("What is the meaning of life?", 1536)[:3])
    assert f"sentence_embedding FLOAT32 shape [1536] [{first}, ...]" in result.stdout
    assert "Traceback" not in result.stderr
