"""send_with_retries and RetryPolicy with stub responses and a fake clock. No sockets, no sleeps."""

from __future__ import annotations

import email.utils
import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlstream.upstream import retry
from mlstream.models.connectors import ClientConfig
from mlstream.upstream.retry import RETRYABLE_STATUSES, RetryCancelled, RetryPolicy, send_with_retries

from ..support.clocks import FakeClock
from ..support.responses import StubResponse


class Script:
    """``send`` answering the given responses in turn, and a ``wait`` that advances the clock."""

    def __init__(self, clock: FakeClock, *responses: StubResponse, wait_result: bool = True) -> None:
        self.clock = clock
        self.responses = list(responses)
        self.sent = 0
        self.waits: list[float] = []
        self.retried: list[int] = []
        self.wait_result = wait_result

    def send(self) -> StubResponse:
        response = self.responses[self.sent]
        self.sent += 1
        return response

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.clock.now += seconds
        return self.wait_result

    def on_retry(self, status: int) -> None:
        self.retried.append(status)

    def run(self, policy: RetryPolicy) -> StubResponse:
        return send_with_retries(self.send, policy, self.wait, self.on_retry)


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock(1000.0)
    monkeypatch.setattr(retry, "time", fake)
    return fake


def policy(**overrides) -> RetryPolicy:
    values = dict(max_retries=3, backoff_millis=500, timeout_seconds=30.0, policy="constant")
    return RetryPolicy(**{**values, **overrides})


# --- the policy -----------------------------------------------------------------------


def test_from_config_maps_the_connector_settings():
    config = ClientConfig(max_retry_times=4, retry_backoff_millis=250, retry_timeout_seconds=12,
                          retry_backoff_policy="exponential_full_jitter")
    assert RetryPolicy.from_config(config) == RetryPolicy(4, 250, 12.0, "exponential_full_jitter")


def test_constant_backoff_is_the_base_every_time():
    constant = policy(backoff_millis=300)
    assert [constant.backoff(n, random.Random(1)) for n in range(5)] == [0.3] * 5


@pytest.mark.parametrize("name", ["exponential_equal_jitter", "exponential_full_jitter"])
def test_jittered_backoff_is_reproducible_with_a_seeded_rng(name):
    jittered = policy(backoff_millis=100, policy=name)
    first = [jittered.backoff(n, random.Random(7)) for n in range(6)]
    assert first == [jittered.backoff(n, random.Random(7)) for n in range(6)]
    assert first != [jittered.backoff(n, random.Random(8)) for n in range(6)]


def test_equal_jitter_is_half_the_ceiling_plus_a_random_half():
    rng, expected_rng = random.Random(3), random.Random(3)
    jittered = policy(backoff_millis=200, policy="exponential_equal_jitter")
    for n in range(5):
        ceiling = 0.2 * 2 ** n
        assert jittered.backoff(n, rng) == ceiling / 2 + expected_rng.uniform(0, ceiling / 2)


@settings(max_examples=200, deadline=None)
@given(retry_index=st.integers(0, 12), seed=st.integers(0, 2 ** 32), base=st.integers(1, 5000),
       name=st.sampled_from(["constant", "exponential_equal_jitter", "exponential_full_jitter"]))
def test_backoff_stays_within_its_bounds(retry_index, seed, base, name):
    delay = policy(backoff_millis=base, policy=name).backoff(retry_index, random.Random(seed))
    ceiling = base / 1000 * 2 ** retry_index
    if name == "constant":
        assert delay == base / 1000
    elif name == "exponential_equal_jitter":
        assert ceiling / 2 <= delay <= ceiling
    else:
        assert 0 <= delay <= ceiling


# --- send_with_retries ------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 400, 401, 403, 404, 422, 501])
def test_answers_not_worth_retrying_are_returned_at_once(clock, status):
    script = Script(clock, StubResponse(status=status))
    assert script.run(policy()) is script.responses[0]
    assert script.sent == 1 and script.waits == [] and script.responses[0].calls == []


@pytest.mark.parametrize("status", sorted(RETRYABLE_STATUSES))
def test_retryable_statuses_are_retried_until_success(clock, status):
    failed, failed_again, ok = StubResponse(status=status), StubResponse(status=status), StubResponse(status=200)
    script = Script(clock, failed, failed_again, ok)
    assert script.run(policy()) is ok
    assert script.waits == [0.5, 0.5]
    assert script.retried == [status, status]
    # a retried answer's connection goes back to the pool; the final one is the caller's
    for response in (failed, failed_again):
        assert response.calls == ["drain_conn", "release_conn"]
    assert ok.calls == []


def test_no_retries_by_default(clock):
    script = Script(clock, StubResponse(status=503))
    assert script.run(RetryPolicy()).status == 503
    assert script.sent == 1 and script.waits == []


def test_when_the_retries_are_spent_the_last_answer_is_returned(clock):
    responses = [StubResponse(status=503) for _ in range(3)]
    script = Script(clock, *responses)
    assert script.run(policy(max_retries=2)) is responses[-1]
    assert script.sent == 3 and len(script.waits) == 2
    assert responses[-1].calls == []  # not drained: the caller reads the provider's error


def test_jittered_waits_come_from_the_policy(clock, monkeypatch):
    monkeypatch.setattr(retry, "_RNG", random.Random(42))
    jittered = policy(max_retries=4, backoff_millis=100, policy="exponential_full_jitter")
    script = Script(clock, *[StubResponse(status=500) for _ in range(4)], StubResponse(status=200))
    assert script.run(jittered).status == 200
    expected_rng = random.Random(42)
    assert script.waits == [jittered.backoff(n, expected_rng) for n in range(4)]


def test_no_retry_is_started_that_would_end_past_the_timeout(clock):
    # 3 s backoff within a 10 s bound measured from the first call: waits end at 3, 6, 9;
    # a fourth would end at 12, so the fourth answer is returned instead.
    responses = [StubResponse(status=502) for _ in range(10)]
    script = Script(clock, *responses)
    result = script.run(policy(max_retries=9, backoff_millis=3000, timeout_seconds=10))
    assert script.waits == [3.0, 3.0, 3.0]
    assert result is responses[3] and result.calls == []


def test_a_backoff_longer_than_the_timeout_is_not_waited(clock):
    script = Script(clock, StubResponse(status=503), StubResponse(status=200))
    assert script.run(policy(backoff_millis=5000, timeout_seconds=1)).status == 503
    assert script.waits == []


def test_wait_returning_false_cancels(clock):
    first = StubResponse(status=429)
    script = Script(clock, first, StubResponse(status=200), wait_result=False)
    with pytest.raises(RetryCancelled):
        script.run(policy())
    assert script.sent == 1
    assert first.calls == ["drain_conn", "release_conn"]  # released before waiting


# --- Retry-After ----------------------------------------------------------------------


def test_retry_after_seconds_replaces_the_backoff(clock):
    script = Script(clock, StubResponse(status=429, headers={"Retry-After": "7"}), StubResponse(status=200))
    assert script.run(policy(backoff_millis=100)).status == 200
    assert script.waits == [7.0]


def test_retry_after_past_the_timeout_passes_the_answer_on(clock):
    refused = StubResponse(status=429, headers={"Retry-After": "120"})
    script = Script(clock, refused, StubResponse(status=200))
    assert script.run(policy(timeout_seconds=30)) is refused
    assert script.waits == [] and refused.calls == []  # its Retry-After reaches the caller


def test_retry_after_as_an_http_date_replaces_the_backoff(clock):
    # urllib3 reads a date against the wall clock; a date 20 s ahead is 19-20 s away
    date = email.utils.formatdate(time.time() + 20, usegmt=True)
    script = Script(clock, StubResponse(status=503, headers={"Retry-After": date}), StubResponse(status=200))
    assert script.run(policy(backoff_millis=100)).status == 200
    assert len(script.waits) == 1 and 18 <= script.waits[0] <= 20


def test_retry_after_as_a_date_in_the_past_retries_at_once(clock):
    script = Script(clock, StubResponse(status=503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
                    StubResponse(status=200))
    assert script.run(policy(backoff_millis=100)).status == 200
    assert script.waits == [0.0]


def test_retry_after_as_a_far_date_passes_the_answer_on(clock):
    date = email.utils.formatdate(time.time() + 3600, usegmt=True)
    refused = StubResponse(status=429, headers={"Retry-After": date})
    script = Script(clock, refused, StubResponse(status=200))
    assert script.run(policy(timeout_seconds=30)) is refused
    assert script.waits == []


@pytest.mark.parametrize("value", ["soon", "", "1.5", "-3", "Wed, 99 Foo 2015", "5, 6",
                                   "Mon, 1 Jan 99999999 00:00:00 GMT", "\x1d4"])
def test_an_invalid_retry_after_falls_back_to_the_backoff(clock, value):
    script = Script(clock, StubResponse(status=503, headers={"Retry-After": value}), StubResponse(status=200))
    assert script.run(policy(backoff_millis=250)).status == 200
    assert script.waits == [0.25]


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(
    st.text(max_size=40),
    st.integers(-10, 10 ** 6).map(str),
    st.datetimes().map(lambda moment: email.utils.format_datetime(moment) + " GMT"),
))
def test_any_retry_after_value_gives_a_finite_wait_or_the_backoff(value):
    clock = FakeClock(1000.0)
    original, retry.time = retry.time, clock  # hypothesis forbids function-scoped fixtures
    try:
        script = Script(clock, StubResponse(status=503, headers={"Retry-After": value}), StubResponse(status=200))
        result = script.run(policy(backoff_millis=250, timeout_seconds=10 ** 9))
    finally:
        retry.time = original
    # with a bound of 10**9 s every value is retried: after its own delay (capped at six
    # hours by urllib3) or, if unreadable, after the backoff
    assert result.status == 200 and len(script.waits) == 1
    assert math.isfinite(script.waits[0]) and 0 <= script.waits[0] <= 6 * 3600
