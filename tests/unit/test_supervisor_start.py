"""The ``--workers`` supervisor's start-up: the store made once before any worker, a
worker failing at start-up started again (with a log line) rather than taking the
others down, and a slot that never starts ending the start-up after START_ATTEMPTS.

The workers here are stand-in processes (a few lines of Python that print the
listening line, or exit), so these tests need no network and no real server.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

from mlstream.app import workers
from mlstream.settings.server import ServerSettings
from mlstream.store.sqlite import SQLiteStore

from ..support.timeouts import SUBPROCESS_HANG_GUARD as HANG_GUARD

# A stand-in worker: the slots named in FAIL_SLOTS exit with status 3 at start until
# their marker file exists (made by the first failure: FAIL_ONCE), or always.
_WORKER = r"""
import os, signal, sys
from pathlib import Path
slot = os.environ["MLSTREAM_WORKER_SLOT"]
marker = Path(sys.argv[1]) / f"failed-{slot}"
starts = Path(sys.argv[1]) / f"starts-{slot}"
with starts.open("a") as f:
    f.write("x")
if slot in sys.argv[2].split(",") and (sys.argv[3] == "always" or not marker.exists()):
    marker.touch()
    sys.exit(3)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("mlstream listening on http://127.0.0.1:1", flush=True)
while os.read(0, 4096):
    pass
"""


class StandInSupervisor(workers.Supervisor):
    def __init__(self, settings: ServerSettings, directory: Path, fail_slots: str, mode: str) -> None:
        super().__init__(settings, [])
        self._stand_in = [sys.executable, "-c", _WORKER, str(directory), fail_slots, mode]
        self.all_up = threading.Event()

    def _command(self) -> list[str]:
        return self._stand_in

    def _write_status(self) -> int:
        up = super()._write_status()
        if up == self.count:
            self.all_up.set()
        return up


def _settings(data_dir: Path) -> ServerSettings:
    return ServerSettings(host="127.0.0.1", port=0, data_dir=data_dir, workers="2", drain_timeout=5)


def _run_until_up(supervisor: StandInSupervisor) -> tuple[int, bool]:
    """Run the supervisor on this (the main) thread; stop it once every worker is up."""
    def stop_when_up() -> None:
        supervisor.all_up.wait(HANG_GUARD)
        supervisor._on_signal(0, None)

    stopper = threading.Thread(target=stop_when_up, daemon=True)
    stopper.start()
    code = supervisor.run()
    was_up = supervisor.all_up.is_set()
    supervisor.all_up.set()  # release the stopper if the run ended on its own
    stopper.join(HANG_GUARD)
    return code, was_up


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "RESTART_INTERVAL", 0.05)


def test_the_store_is_made_before_any_worker_starts(tmp_path: Path) -> None:
    supervisor = StandInSupervisor(_settings(tmp_path / "data"), tmp_path, "", "once")
    code, _ = _run_until_up(supervisor)
    assert code == 0
    # The stand-ins never touch the store: what is there, the supervisor made.
    with sqlite3.connect(tmp_path / "data" / SQLiteStore.FILENAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        ids = {row[0] for row in db.execute("SELECT id FROM meta")}
    assert "master_key_check" in ids and len(ids) == 2  # and the cluster's identity
    assert (tmp_path / "data" / "master.key").exists()


def test_a_worker_failing_at_start_up_is_started_again_and_the_others_stay(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=workers.__name__)
    supervisor = StandInSupervisor(_settings(tmp_path / "data"), tmp_path, "1", "once")
    code, up = _run_until_up(supervisor)
    assert up and code == 0
    assert (tmp_path / "starts-0").read_text() == "x"   # never restarted
    assert (tmp_path / "starts-1").read_text() == "xx"  # failed once, started again
    assert "worker 1" in caplog.text and "exited with status 3 during start-up; starting it again " \
        f"(attempt 2 of {workers.START_ATTEMPTS})" in caplog.text


def test_a_worker_that_never_starts_ends_the_start_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=workers.__name__)
    supervisor = StandInSupervisor(_settings(tmp_path / "data"), tmp_path, "1", "always")
    code, up = _run_until_up(supervisor)
    assert code == 2 and not up
    assert (tmp_path / "starts-1").read_text() == "x" * workers.START_ATTEMPTS
    assert f"exited during start-up {workers.START_ATTEMPTS} times; stopping the others" in caplog.text
