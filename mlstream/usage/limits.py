"""Per-model rate limits (a model's ``rate_limiter``), as ml-commons enforces them.

A token bucket per model holding at most ``limit`` tokens, refilled at ``limit``
per ``unit``; a predict takes one token or is refused with 429 and the seconds
until the next token as ``Retry-After``.

One process keeps its buckets in memory. A deployment of several processes
(``--workers``, or instances on one PostgreSQL) passes a ``SharedBuckets``: the
store's bucket rows, updated atomically, so a limit holds for the deployment.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import BadRequest, Overloaded


TIME_UNITS = ("NANOSECONDS", "MICROSECONDS", "MILLISECONDS", "SECONDS", "MINUTES", "HOURS", "DAYS")


@dataclass(frozen=True, slots=True)
class RateLimit:
    limit: float
    unit: str

    @property
    def per_second(self) -> float:
        seconds = {"NANOSECONDS": 1e-9, "MICROSECONDS": 1e-6, "MILLISECONDS": 1e-3, "SECONDS": 1.0,
                   "MINUTES": 60.0, "HOURS": 3600.0, "DAYS": 86400.0}[self.unit]
        return self.limit / seconds

    @property
    def capacity(self) -> float:
        """Tokens the bucket holds when full (at least one, so a fractional limit can pass)."""
        return max(self.limit, 1.0)

    @property
    def limit_text(self) -> str:
        """The limit as ml-commons stores it: a string, without a needless ".0"."""
        return str(int(self.limit)) if self.limit == int(self.limit) else str(self.limit)


def parse_rate_limiter(raw: Any) -> RateLimit | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequest("[rate_limiter] must be an object {limit, unit}")
    limit, unit = raw.get("limit"), raw.get("unit")
    try:
        value = float(limit)  # ml-commons stores the limit as a string
    except (TypeError, ValueError):
        raise BadRequest("[rate_limiter.limit] must be a positive number") from None
    if isinstance(limit, bool) or not value > 0 or value != value or value == float("inf"):
        raise BadRequest("[rate_limiter.limit] must be a positive number")
    if not isinstance(unit, str) or unit.upper() not in TIME_UNITS:
        raise BadRequest(f"[rate_limiter.unit] must be one of {', '.join(TIME_UNITS)}")
    return RateLimit(value, unit.upper())


def take(tokens: float, elapsed: float, capacity: float, per_second: float) -> tuple[bool, float, float]:
    """One bucket step: refill for ``elapsed`` seconds, then take a token if there is one.
    Returns (taken, tokens left, seconds until the next token when not taken)."""
    tokens = min(capacity, tokens + max(elapsed, 0.0) * per_second)
    if tokens >= 1.0:
        return True, tokens - 1.0, 0.0
    return False, tokens, (1.0 - tokens) / per_second


class SharedBuckets(Protocol):
    """Buckets every process of a deployment shares (``Store.take_token``)."""

    def take_token(self, key: str, capacity: float, per_second: float) -> float:
        """Take a token from bucket ``key`` (created full); 0.0, or the seconds to wait."""


@dataclass(slots=True)
class _Bucket:
    limit: RateLimit
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, shared: SharedBuckets | None = None) -> None:
        self._shared = shared
        # Guards the in-memory buckets: arithmetic only, never a wait (a refusal is raised outside).
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, model_id: str, limit: RateLimit | None) -> None:
        """Take one token for ``model_id``, or raise Overloaded."""
        if limit is None:
            return
        if self._shared is not None:
            # The limit is part of the key: a changed limit starts a fresh, full bucket.
            wait = self._shared.take_token(f"{model_id}|{limit.limit_text}|{limit.unit}",
                                           limit.capacity, limit.per_second)
            if wait > 0:
                raise _throttled(model_id, limit, wait)
            return
        with self._lock:
            # Read under the lock: a call that read the clock earlier but locked later
            # would refill by a negative interval.
            now = time.monotonic()
            bucket = self._buckets.get(model_id)
            if bucket is None or bucket.limit != limit:  # new model or a changed limit
                bucket = self._buckets[model_id] = _Bucket(limit, limit.capacity, now)
            taken, bucket.tokens, wait = take(bucket.tokens, now - bucket.updated, limit.capacity,
                                              limit.per_second)
            bucket.updated = now
            if taken:
                return
        raise _throttled(model_id, limit, wait)


def _throttled(model_id: str, limit: RateLimit, wait: float) -> Overloaded:
    return Overloaded(f"Request is throttled at model level: the rate limit of model {model_id} "
                      f"({limit.limit_text} per {limit.unit.lower()}) is used up",
                      retry_after_seconds=math.ceil(wait))

