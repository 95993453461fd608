"""The load generator's samples (scenarios 3 and 7: /proc and the server's /metrics) run on
a thread of their own: a slow sample must not hold up the events the generator measures.
And finding a server's worker processes reads one file per process, not one per thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from bench.loadgen import DIRECT, LoadGenerator, User, build_request
from bench.procs import child_pids
from mlstream.testing.fake_openai import FakeOpenAI

from ..support.timeouts import HANG_GUARD, SUBPROCESS_HANG_GUARD

KEY = "sk-sampler-test"
SAMPLE_SECONDS = 0.5  # one slow sample: far longer than the 20 ms between the stream's chunks


def paced_user(provider: FakeOpenAI) -> User:
    address = (provider.host, provider.port)
    body = {"model": "gpt-fake?chunks=10&delay_ms=20", "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    request = build_request(address, "/v1/chat/completions", body, dialect=DIRECT, stream=True,
                            headers={"Authorization": f"Bearer {KEY}"})
    return User(address, request, track_gaps=True)


def test_a_slow_sample_does_not_delay_the_events_it_runs_beside() -> None:
    samples: list[float] = []
    stop_blocking = threading.Event()

    def slow_sample(now: float) -> None:
        samples.append(now)
        stop_blocking.wait(SAMPLE_SECONDS)  # a /proc read or a /metrics call that takes its time

    with FakeOpenAI(api_key=KEY) as provider:
        result = LoadGenerator().run([paced_user(provider)], timeout=HANG_GUARD, tick=(0.02, slow_sample))
    stop_blocking.set()
    (response,) = result.responses
    assert response.ok and samples  # sampled during the stream
    # In the generator's loop, the sample would have held the next event back by up to 0.5 s.
    assert max(response.gaps) < SAMPLE_SECONDS * 0.6


def test_a_sample_that_fails_fails_the_run() -> None:
    def broken_sample(now: float) -> None:
        raise RuntimeError("the server's /proc entry is gone")

    with FakeOpenAI(api_key=KEY) as provider, pytest.raises(RuntimeError, match="/proc entry"):
        LoadGenerator().run([paced_user(provider)], timeout=HANG_GUARD, tick=(0.01, broken_sample))


def test_child_pids_finds_a_child_process_and_forgets_it_once_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in child_pids(os.getpid())
        assert child.pid not in child_pids(child.pid)
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(SUBPROCESS_HANG_GUARD)
    assert child.pid not in child_pids(os.getpid())
