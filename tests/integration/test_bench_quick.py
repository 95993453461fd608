"""The benchmark harness never rots: ``python -m bench --quick`` runs and writes its JSON.

This checks that the harness works end to end (every scenario ran, every figure
is there), not what the figures are: a benchmark's numbers are not a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ("relay_throughput", "added_latency", "slow_streams", "backpressure", "cancellation", "admission")


@pytest.mark.slow
def test_bench_quick_runs_every_scenario_and_writes_its_json(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--name", "pytest-quick", "--results-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]

    results = json.loads((tmp_path / "pytest-quick.json").read_text())
    assert results["mode"] == "quick"
    assert results["machine"]["cores"] >= 1 and results["machine"]["python"]
    for name in SCENARIOS:
        assert "error" not in results["scenarios"][name], results["scenarios"][name]
    relay = results["scenarios"]["relay_throughput"]["concurrency"]["16"]
    assert relay["direct"]["chunks_per_s"] > 0 and relay["mlstream"]["chunks_per_s"] > 0
    assert relay["mlstream"]["streams_ok"] == relay["mlstream"]["streams_total"] > 0
    assert results["scenarios"]["backpressure"]["mlstream"]["resumed_whole"] is True
    assert results["scenarios"]["admission"]["mlstream"]["refused_429"] > 0
    assert results["generator"]["cpu_seconds"] > 0
    assert {goal["figure"] for goal in results["goals"]}  # the goals table was evaluated
    # everything it started has stopped, cleanly
    assert all(code == 0 for code in results["exit_codes"].values()), results["exit_codes"]

    assert "| scenario | figure | direct | mlstream |" in result.stdout
    assert "| goal | target (2 cores) | measured | met |" in result.stdout
