"""RateLimiter: a token bucket per model, on a fake clock. No sleeps."""

from __future__ import annotations

import threading

import pytest

from mlstream.usage import limits
from mlstream.errors import Overloaded
from mlstream.usage.limits import RateLimit, RateLimiter

from ..support.clocks import FakeClock
from ..support.timeouts import HANG_GUARD


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock(500.0)
    monkeypatch.setattr(limits, "time", fake)
    return fake


def passes(limiter: RateLimiter, model: str, limit: RateLimit | None) -> bool:
    try:
        limiter.acquire(model, limit)
    except Overloaded:
        return False
    return True


def refusal(limiter: RateLimiter, model: str, limit: RateLimit) -> Overloaded:
    with pytest.raises(Overloaded) as refused:
        limiter.acquire(model, limit)
    return refused.value


def test_no_limit_never_refuses(clock):
    limiter = RateLimiter()
    assert all(passes(limiter, "m", None) for _ in range(1000))


def test_a_full_bucket_passes_limit_calls_then_refuses(clock):
    limiter, limit = RateLimiter(), RateLimit(3, "MINUTES")
    assert [passes(limiter, "m", limit) for _ in range(4)] == [True, True, True, False]


def test_the_refusal_is_a_429_with_the_seconds_to_the_next_token(clock):
    limiter, limit = RateLimiter(), RateLimit(3, "MINUTES")  # one token every 20 s
    for _ in range(3):
        limiter.acquire("m", limit)
    error = refusal(limiter, "m", limit)
    assert error.http_status == 429
    assert error.headers["Retry-After"] == "20"
    assert "model m" in error.reason and "3 per minutes" in error.reason
    clock.now += 15.5  # 4.5 s left: rounded up
    assert refusal(limiter, "m", limit).headers["Retry-After"] == "5"


def test_retry_after_is_at_least_one_second(clock):
    limiter, limit = RateLimiter(), RateLimit(10, "SECONDS")  # a token every 0.1 s
    for _ in range(10):
        limiter.acquire("m", limit)
    assert refusal(limiter, "m", limit).headers["Retry-After"] == "1"


def test_tokens_refill_at_the_limit_rate(clock):
    limiter, limit = RateLimiter(), RateLimit(3, "MINUTES")
    for _ in range(3):
        limiter.acquire("m", limit)
    clock.now += 19.9
    assert not passes(limiter, "m", limit)
    clock.now += 0.1
    assert passes(limiter, "m", limit)
    assert not passes(limiter, "m", limit)
    clock.now += 40  # two more tokens
    assert [passes(limiter, "m", limit) for _ in range(3)] == [True, True, False]


def test_an_idle_bucket_holds_no_more_than_its_capacity(clock):
    limiter, limit = RateLimiter(), RateLimit(2, "SECONDS")
    limiter.acquire("m", limit)
    clock.now += 3600
    assert [passes(limiter, "m", limit) for _ in range(3)] == [True, True, False]


def test_a_fractional_limit_still_lets_one_call_through(clock):
    limiter, limit = RateLimiter(), RateLimit(0.5, "SECONDS")  # capacity 1, a token per 2 s
    assert passes(limiter, "m", limit)
    assert refusal(limiter, "m", limit).headers["Retry-After"] == "2"
    clock.now += 2
    assert passes(limiter, "m", limit)


def test_models_have_separate_buckets(clock):
    limiter, limit = RateLimiter(), RateLimit(1, "HOURS")
    assert passes(limiter, "a", limit)
    assert not passes(limiter, "a", limit)
    assert passes(limiter, "b", limit)


def test_a_changed_limit_starts_a_full_bucket(clock):
    limiter = RateLimiter()
    for _ in range(2):
        limiter.acquire("m", RateLimit(2, "HOURS"))
    assert not passes(limiter, "m", RateLimit(2, "HOURS"))
    raised = RateLimit(5, "HOURS")
    assert [passes(limiter, "m", raised) for _ in range(6)] == [True] * 5 + [False]
    # a change of unit alone is a change too
    assert passes(limiter, "m", RateLimit(5, "MINUTES"))


def test_concurrent_calls_take_exactly_the_tokens_there_are(clock):
    """Bounded stress on a frozen clock: 8 threads x 40 calls share 50 tokens."""
    limiter, limit = RateLimiter(), RateLimit(50, "DAYS")
    results: list[bool] = []
    start = threading.Barrier(8)

    def caller():
        start.wait(HANG_GUARD)
        mine = [passes(limiter, "m", limit) for _ in range(40)]
        results.extend(mine)

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
        assert not thread.is_alive()
    assert len(results) == 320 and results.count(True) == 50


def test_a_call_overtaken_between_clock_read_and_lock_is_not_refused_wrongly(monkeypatch):
    # Capacity 2, bucket full at t=10. Call A reads the clock (t=10.0); call B, in another
    # thread, reads t=10.5 and takes a token. Two tokens were there for the two calls, so
    # both must pass. Were A's clock read outside the limiter's lock, B would finish first
    # and A would "refill" by (10.0 - 10.5) s and find half a token. With the read under
    # the lock, B waits for A (the short wait below then simply expires).
    limiter, limit = RateLimiter(), RateLimit(2, "SECONDS")
    b_result: list[bool] = []
    b_done = threading.Event()

    def call_b() -> None:
        b_result.append(passes(limiter, "m", limit))
        b_done.set()

    class OvertakingClock:
        def __init__(self):
            self.times = iter([0.0, 10.0, 10.5])

        def monotonic(self):
            now = next(self.times)
            if now == 10.0:
                threading.Thread(target=call_b, daemon=True).start()
                b_done.wait(0.2)  # B overtakes here if nothing stops it
            return now

    monkeypatch.setattr(limits, "time", OvertakingClock())
    limiter.acquire("m", limit)  # t=0: creates the bucket (2 tokens), takes one
    assert passes(limiter, "m", limit)  # call A, at t=10.0
    assert b_done.wait(HANG_GUARD) and b_result == [True]
