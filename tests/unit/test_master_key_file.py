"""The master key file when processes start together (``serve --workers``): one key for all."""

from __future__ import annotations

import threading

from mlstream.access.credentials import load_master_key
from mlstream.settings.server import MASTER_KEY_ENV, MASTER_KEY_FILE

from ..support.timeouts import HANG_GUARD


def test_processes_starting_together_all_read_the_one_key(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(MASTER_KEY_ENV, raising=False)
    for attempt in range(20):
        data_dir = tmp_path / str(attempt)
        start = threading.Barrier(8)
        keys: list[bytes] = []
        errors: list[BaseException] = []

        def load(data_dir=data_dir, start=start, keys=keys, errors=errors) -> None:
            start.wait(HANG_GUARD)
            try:
                keys.append(load_master_key(data_dir)[0])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=load) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG_GUARD)
        assert not errors, errors
        assert len(keys) == 8 and len(set(keys)) == 1
        assert sorted(path.name for path in data_dir.iterdir()) == [MASTER_KEY_FILE]  # no drafts left
        assert (data_dir / MASTER_KEY_FILE).stat().st_mode & 0o777 == 0o600
