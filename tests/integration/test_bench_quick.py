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
SCENARIOS = ("relay_throughput", "added_latency", "slow_streams", "backpressure", "cancellation", "admission",
             "churn", "embedding_predict", "provider_relay", "openai_front", "new_fronts", "paced", "cache")


@pytest.mark.slow
def test_bench_quick_runs_every_scenario_and_writes_its_json(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--name", "pytest-quick", "--results-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]

    results = json.loads((tmp_path / "pytest-quick.json").read_text())
    assert results["mode"] == "quick"
    assert results["machine"]["cores"] >= 1 and results["machine"]["python"]
    for name in SCENARIOS:
        assert "error" not in results["scenarios"][name], results["scenarios"][name]
    relay = results["scenarios"]["relay_throughput"]["concurrency"]["16"]
    assert relay["direct"]["chunks_per_s"] > 0 and relay["mlstream"]["chunks_per_s"] > 0
    assert relay["mlstream"]["streams_ok"] == relay["mlstream"]["streams_total"] > 0
    providers = results["scenarios"]["provider_relay"]["providers"]
    assert set(providers) == {"anthropic", "gemini", "sagemaker-tgi", "sagemaker-lmi"}
    for level in providers.values():
        assert level["direct"]["chunks_per_s"] > 0 and level["mlstream"]["chunks_per_s"] > 0
        assert level["mlstream"]["streams_ok"] == level["mlstream"]["streams_total"] > 0
    front = results["scenarios"]["openai_front"]
    for level in front["relay"].values():
        for side in ("ml_commons", "openai"):
            assert level[side]["mlstream"]["streams_ok"] == level[side]["mlstream"]["streams_total"] > 0
    assert front["first_token_c1"]["openai"]["ok"] == front["first_token_c1"]["openai"]["total"] > 0
    for side in ("ml_commons", "openai"):  # an Anthropic model, its stream translated by the OpenAI front
        level = front["translated"][side]
        assert level["mlstream"]["streams_ok"] == level["mlstream"]["streams_total"] > 0
        assert level["mlstream"]["chunks_per_s"] > 0 and level["direct"]["chunks_per_s"] > 0
    fronts = results["scenarios"]["new_fronts"]
    for level in fronts["relay"].values():
        for side in ("ml_commons", "messages", "responses"):
            assert level[side]["mlstream"]["streams_ok"] == level[side]["mlstream"]["streams_total"] > 0
    for side in ("messages", "responses"):
        assert fronts["first_token_c1"][side]["ok"] == fronts["first_token_c1"][side]["total"] > 0
    relayed = fronts["anthropic_relay"]["messages"]["mlstream"]
    assert relayed["streams_ok"] == relayed["streams_total"] > 0
    assert results["scenarios"]["backpressure"]["mlstream"]["resumed_whole"] is True
    for level in results["scenarios"]["paced"]["levels"].values():  # default flags: none refused, none lost
        assert level["mlstream"]["ok"] == level["mlstream"]["streams"] > 0
        assert level["mlstream"]["server"]["rejected"] == 0
    assert results["scenarios"]["admission"]["mlstream"]["refused_429"] > 0
    embeddings = results["scenarios"]["embedding_predict"]
    for docs in ("1", "16", "256"):
        entry = embeddings["docs"][docs]
        assert entry["mlstream"]["ok"] == entry["mlstream"]["total"] > 0 and entry["added_ms"]["p50"] is not None
    assert embeddings["post_process_profile"]["post_process_ms"] >= 0
    latency = results["scenarios"]["added_latency"]["stream_c1"]
    assert latency["pairs"] > 0 and latency["added_ms"]["p50"] is not None
    # the soak fails the run itself (exit 1) on errors, slow requests, a freeze or a leak;
    # here: it ran every kind of client and compared the server before and after
    churn = results["scenarios"]["churn"]
    assert churn["passed"] is True and churn["errors"] == 0
    assert all(kind["ok"] > 0 for kind in churn["kinds"].values()), churn["kinds"]
    assert churn["server"]["threads_after"] > 0 and churn["server"]["fds_after"]["total"] > 0
    assert results["generator"]["cpu_seconds"] > 0
    assert {goal["figure"] for goal in results["goals"]}  # the goals table was evaluated
    # everything it started has stopped, cleanly
    assert all(code == 0 for code in results["exit_codes"].values()), results["exit_codes"]

    assert "| scenario | figure | direct | mlstream |" in result.stdout
    assert "| goal | target (2 cores) | measured | met |" in result.stdout
