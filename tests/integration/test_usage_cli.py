"""`mlstream keys` limit flags and `mlstream usage`, on the data directory a server uses."""

from __future__ import annotations

import subprocess

from mlstream.access.keys import KeyStore
from mlstream.store.sqlite import SQLiteStore
from mlstream.usage.records import KeyLimits, UsageRecord
from mlstream.usage.recorder import UsageRecorder
from tests.support.servers import MLSTREAM, clean_env

T0 = 1_764_633_600_000  # 2025-12-02T00:00:00Z


def cli(*args: str) -> subprocess.CompletedProcess:
    """``mlstream`` in a process of its own (its logging set up as a user's would be)."""
    return subprocess.run([*MLSTREAM, *args], capture_output=True, text=True, env=clean_env(), timeout=60)


def test_keys_create_and_update_take_the_limit_flags(tmp_path):
    data = str(tmp_path)
    created = cli("keys", "create", "--role", "user", "--name", "alice", "--budget", "5", "--budget-period", "month",
                  "--tpm", "100000", "--rpm", "60", "--data-dir", data)
    assert created.returncode == 0, created.stderr
    assert "budget 5/month, tpm 100000, rpm 60" in created.stdout
    assert cli("keys", "update", "alice", "--rpm", "10", "--no-tpm", "--budget-period", "week",
               "--data-dir", data).returncode == 0
    store = SQLiteStore(tmp_path)
    try:
        assert KeyStore(store).get("alice").limits == KeyLimits(5.0, "week", None, 10)
    finally:
        store.close()
    assert cli("keys", "update", "nobody", "--rpm", "1", "--data-dir", data).returncode == 2
    taken = cli("keys", "create", "--role", "user", "--name", "alice", "--data-dir", data)
    assert taken.returncode == 2 and "already exists" in taken.stderr


def test_usage_prints_the_grouped_table(tmp_path):
    store = SQLiteStore(tmp_path)
    recorder = UsageRecorder(store.usage())
    for key, model, cost in (("k1", "m1", 0.5), ("k1", "m1", 0.25), ("k2", "m2", None)):
        recorder.record(UsageRecord(T0 + 1000, key, f"name-{key}", model, "openai/v1/chat/completions", "/r", 200,
                                    "ok", 10, 5, 0, False, None, 1.0, cost))
    recorder.close()
    store.close()
    result = cli("usage", "--group-by", "key,model", "--from", "2025-12-02", "--to", "2025-12-03",
                 "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "usage from 2025-12-02T00:00:00.000Z to 2025-12-03T00:00:00.000Z"
    assert lines[1].split() == ["KEY", "MODEL", "REQUESTS", "ERRORS", "INPUT_TOKENS", "OUTPUT_TOKENS",
                                "CACHED_INPUT_TOKENS", "COST"]
    assert lines[2].split() == ["name-k1", "m1", "2", "0", "20", "10", "0", "0.75"]
    assert lines[3].split() == ["name-k2", "m2", "1", "0", "10", "5", "0", "-"]  # no pricing: no cost
    assert lines[4].split() == ["TOTAL", "3", "0", "30", "15", "0", "0.75"]
    assert cli("usage", "--group-by", "colour", "--data-dir", str(tmp_path)).returncode == 2
