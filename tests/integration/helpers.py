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

from .conftest import HANG_GUARD, Client, stream_body

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
    return channel._items.qsize()


def poll_until(predicate, timeout: float, interval: float = 0.01) -> bool:
    """For state nothing signals (a queue's length, the kernel's socket queues): check
    every ``interval`` until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
