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

import psutil
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


class Deployment:
    """A supervisor started with ``--workers``; its stderr goes to a file (never a full pipe)."""

    def __init__(self, tmp_path: Path, workers: int, *extra: str) -> None:
        self.log = tmp_path / "stderr.log"
        with self.log.open("w") as stderr:
            self.process = subprocess.Popen(
                [*MLSTREAM, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--workers", str(workers),
                 "--allow-private-endpoints", "--trusted-endpoint", LOOPBACK_TRUST, "--drain-timeout", "10",
                 "--stream-workers", "8", *extra],
                stdout=subprocess.PIPE, stderr=stderr, text=True, env=clean_env())
        line = self.process.stdout.readline()
        assert line.startswith("mlstream listening on http://"), (line, self.log.read_text())
        self.url = line.split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1])

    def workers(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children()

    def listening(self) -> set[int]:
        """Pids of the processes with a listening socket on the port."""
        return {worker.pid for worker in self.workers()
                for conn in worker.net_connections("tcp")
                if conn.status == psutil.CONN_LISTEN and conn.laddr.port == self.port}

    def serving(self) -> set[int]:
        """Pids of the workers holding a client connection on the port."""
        return {worker.pid for worker in self.workers()
                for conn in worker.net_connections("tcp")
                if conn.status == psutil.CONN_ESTABLISHED and conn.laddr.port == self.port}

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(HANG_GUARD * 3)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(HANG_GUARD)
