"""Plain helpers shared by the integration tests: constants and functions, no fixtures
(those live in ``conftest.py``). Test modules import from here, never from each other.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3

from mlstream.streaming.channel import Channel
from mlstream.testing.fake_bedrock import FakeBedrock

from .conftest import HANG_GUARD, Client, raw_request, stream_body

MLSTREAM = [sys.executable, "-m", "mlstream"]


# --- a real `mlstream serve` subprocess ----------------------------------------------------

def clean_env() -> dict[str, str]:
    """The environment without any MLSTREAM_* setting that could change what is tested."""
    return {name: value for name, value in os.environ.items() if not name.startswith("MLSTREAM_")}


def first_stdout_line(process: subprocess.Popen) -> str:
    """The first stdout line of ``process``, or a failure after the hang guard."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=HANG_GUARD)
    except queue.Empty:
        process.kill()
        pytest.fail(f"mlstream serve printed nothing within {HANG_GUARD} s: {process.communicate()[1]}")


def start_serve(data_dir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([*MLSTREAM, "serve", "--port", "0", "--data-dir", str(data_dir), *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    line = first_stdout_line(process)
    if not line.startswith("mlstream listening on http://"):
        process.kill()
        pytest.fail(f"mlstream serve did not start: {line!r} {process.communicate()[1]}")
    return process, line.split()[-1]


def terminate(process: subprocess.Popen) -> None:
    """SIGTERM, then wait for the exit; killed (and reaped) if it does not come."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=HANG_GUARD)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=HANG_GUARD)


def stop_serve(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("mlstream serve did not stop on SIGTERM")
    assert process.returncode == 0, stderr
    return stderr


def loopback_url(url: str) -> str:
    """A URL the server printed (maybe http://0.0.0.0:PORT) as one to reach it on loopback."""
    port = url.rsplit(":", 1)[1]
    return f"http://127.0.0.1:{port}"


# --- API keys ------------------------------------------------------------------------------

def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def client_with(url: str, headers: dict[str, str] | None = None) -> Client:
    """A Client whose every request carries ``headers`` (e.g. the API key)."""
    client = Client(url)
    client.http = urllib3.PoolManager(retries=False, timeout=HANG_GUARD, headers=headers or {})
    return client


def assert_401(reply: Any, *, presented: str | None = None) -> dict:
    assert reply.status == 401, (reply.status, reply.body)
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    challenge = reply.headers.get("WWW-Authenticate", "")
    assert "Bearer" in challenge or "Basic" in challenge, reply.headers
    body = reply.body
    assert isinstance(body, dict) and body["status"] == 401, body
    assert body["error"]["type"] == "security_exception", body
    assert isinstance(body["error"]["reason"], str) and body["error"]["reason"], body
    if presented:
        assert presented not in json.dumps(body)
    return body


# --- one stream, white-box where nothing else tells ----------------------------------------

def post_stream(url: str, model_id: str, body: dict | None = None, rcvbuf: int | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(HANG_GUARD)
    sock.connect((host, int(port)))
    payload = json.dumps(body or stream_body()).encode()
    sock.sendall(f"POST /_plugins/_ml/models/{model_id}/_predict/stream HTTP/1.1\r\nHost: x\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def stream_channel(server) -> Channel:
    """The one open stream's channel (registered before its reader starts, so there once
    the pool counts it running). White-box: InFlight only exposes a count."""
    assert server.app.pool.wait_until(lambda pool: pool.active == 1, HANG_GUARD)
    channels = list(server.app.in_flight._channels)
    assert len(channels) == 1, channels
    return channels[0]


def held_in_channel(channel: Channel) -> int:
    """Items put by the reader and not yet taken by the writer (white-box)."""
    return channel.held


def poll_until(predicate, timeout: float, interval: float = 0.01) -> bool:
    """For state nothing signals (a queue's length, the kernel's socket queues): check
    every ``interval`` until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


# --- AWS: botocore sees only what a test gives it -------------------------------------------

AWS_ENVIRONMENT = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL_STS",
    "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
)


def isolate_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS setting of the machine's reaches botocore: no keys, profiles, endpoints,
    proxies, config files or instance metadata."""
    for name in AWS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# --- Bedrock: the ml-commons Converse blueprint at the fake --------------------------------

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
# The ml-commons Bedrock Converse blueprint, verbatim but for the host (the fake on
# loopback) and a pass-through for the fake's knobs; inferenceConfig shows that the
# whole body reaches ConverseStream.
REQUEST_BODY = ('{ "messages": [ { "role": "user", "content": [ { "text": "${parameters.inputs}" } ] } ], '
                '"inferenceConfig": {"maxTokens": 512, "temperature": 0.2}, '
                '"additionalModelRequestFields": {"fake": ${parameters.fake}} }')


def bedrock_connector(fake: FakeBedrock, **credential_overrides: Any) -> dict[str, Any]:
    credential = {"access_key": fake.access_key, "secret_key": fake.secret_key}
    if fake.session_token:
        credential["session_token"] = fake.session_token
    credential.update(credential_overrides)
    return {
        "name": "Amazon Bedrock Converse",
        "description": "Connector for Amazon Bedrock Converse",
        "version": 1,
        "protocol": "aws_sigv4",
        "credential": credential,
        "parameters": {"region": fake.region, "service_name": "bedrock", "model": MODEL,
                       "endpoint": fake.url.removeprefix("http://"), "fake": {}},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/converse",
            "request_body": REQUEST_BODY,
        }],
    }


def bedrock_stream(client: Client, model_id: str, interface: str | None = "bedrock/converse/claude", **fake: Any):
    parameters: dict[str, Any] = {"inputs": "Who is Hamlet?", "fake": fake}
    if interface:
        parameters["_llm_interface"] = interface
    return raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                       json.dumps({"parameters": parameters}).encode())


def maps(response) -> list[dict[str, Any]]:
    return [e["inference_results"][0]["output"][0]["dataAsMap"] for e in response.events()]
