"""Retrying a provider call that was refused before any token, per ``client_config``.

Only 429 and 5xx answers are retried, and only before anything was relayed: a
retry is a new call, so once a token has gone downstream the stream cannot be
restarted without the client seeing text twice. Each attempt is signed afresh.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

import urllib3
from urllib3.exceptions import InvalidHeader
from urllib3.util.retry import Retry

from ..models.connectors import ClientConfig
from ..errors import RetryCancelled

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_RNG = random.Random()
# Only its Retry-After parser is used: seconds or an HTTP date, capped at urllib3's
# retry_after_max (6 hours), far past any retry timeout.
_RETRY_AFTER = Retry(total=False)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` retries after the first call, all within ``timeout_seconds`` of it.

    Backoff before retry ``n`` (0-based), with ``base`` = ``backoff_millis``:
    ``constant`` waits base; ``exponential_equal_jitter`` waits half of
    base * 2**n plus a random part of the other half; ``exponential_full_jitter``
    waits a random time up to base * 2**n. A provider's ``Retry-After`` replaces
    the backoff when it fits in the time left; when it does not, the answer is
    passed on (with its Retry-After) instead of waiting past the bound.
    """

    max_retries: int = 0
    backoff_millis: int = 200
    timeout_seconds: float = 30.0
    policy: str = "constant"

    @classmethod
    def from_config(cls, config: ClientConfig) -> "RetryPolicy":
        return cls(config.max_retry_times, config.retry_backoff_millis,
                   float(config.retry_timeout_seconds), config.retry_backoff_policy)

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        rng = rng or _RNG
        base = self.backoff_millis / 1000.0
        if self.policy == "constant":
            return base
        ceiling = base * (2 ** retry)
        if self.policy == "exponential_equal_jitter":
            return ceiling / 2 + rng.uniform(0, ceiling / 2)
        return rng.uniform(0, ceiling)


def send_with_retries(send: Callable[[], urllib3.BaseHTTPResponse], policy: RetryPolicy,
                      wait: Callable[[float], bool],
                      on_retry: Callable[[int], None] = lambda status: None) -> urllib3.BaseHTTPResponse:
    """Call ``send`` until it answers something not worth retrying or the policy is spent.

    ``wait(seconds)`` pauses between attempts and returns False if the caller went
    away meanwhile (then RetryCancelled is raised).
    """
    deadline = time.monotonic() + policy.timeout_seconds
    retry = 0
    while True:
        response = send()
        if response.status not in RETRYABLE_STATUSES or retry >= policy.max_retries:
            return response
        delay = _retry_after(response)
        if delay is None:
            delay = policy.backoff(retry)
        if time.monotonic() + delay > deadline:
            return response
        response.drain_conn()
        response.release_conn()
        on_retry(response.status)
        if not wait(delay):
            raise RetryCancelled("the caller went away while waiting to retry the provider")
        retry += 1


def _retry_after(response: urllib3.BaseHTTPResponse) -> float | None:
    value = response.headers.get("Retry-After")
    return None if value is None else parse_retry_after(value)


def parse_retry_after(value: str) -> float | None:
    """A Retry-After value in seconds (a date in the past is 0); None if invalid."""
    try:
        return float(_RETRY_AFTER.parse_retry_after(value))
    # InvalidHeader: neither whole seconds (RFC 9110: digits only, so not "1.5") nor a date;
    # ValueError/OverflowError: a date urllib3 cannot convert (year 99999999, odd spaces).
    except (InvalidHeader, ValueError, OverflowError):
        return None
