"""mlstream servers as tests run them: what they trust, and ``mlstream`` as a child
process (``serve``, ``keys``)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .timeouts import HANG_GUARD

# trusted_endpoints for a server whose providers are fakes on loopback.
LOOPBACK_TRUST = r"^http://127\.0\.0\.1:\d+/.*$"
MLSTREAM = [sys.executable, "-m", "mlstream"]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any MLSTREAM_* setting that could change what is tested,
    plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MLSTREAM_")}
    env.update(extra)
    return env


def first_stdout_line(process: subprocess.Popen) -> str:
    """The first stdout line of ``process``, or a failure after the hang guard."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=HANG_GUARD)
    except queue.Empty:
        process.kill()
        pytest.fail(f"mlstream serve printed nothing within {HANG_GUARD} s: {process.communicate()[1]}")


def start_serve(data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``mlstream serve`` on a free port, ``env`` added to its (clean) environment."""
    process = subprocess.Popen([*MLSTREAM, "serve", "--port", "0", "--data-dir", str(data_dir), *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(**(env or {})))
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


def keys_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MLSTREAM, "keys", *args, "--data-dir", str(data_dir)], capture_output=True,
                          text=True, timeout=HANG_GUARD, env=clean_env())


def create_key(data_dir: Path, role: str, name: str) -> str:
    """`mlstream keys create`; returns the key, which is the last line of stdout, alone."""
    result = keys_cli(data_dir, "create", "--role", role, "--name", name)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    key = lines[-1]
    assert key and key == key.strip() and " " not in key, result.stdout
    assert result.stdout.count(key) == 1, result.stdout  # shown once
    assert key not in result.stderr
    return key
