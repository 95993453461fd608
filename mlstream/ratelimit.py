"""Per-model rate limits (a model's ``rate_limiter``), as ml-commons enforces them.

A token bucket per model holding at most ``limit`` tokens, refilled at ``limit``
per ``unit``; a predict takes one token or is refused with 429 and the seconds
until the next token as ``Retry-After``.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import BadRequest, Overloaded


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


@dataclass(slots=True)
class _Bucket:
    limit: RateLimit
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self) -> None:
        # Guards the buckets: arithmetic only, never a wait (a refusal is raised outside).
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, model_id: str, limit: RateLimit | None) -> None:
        """Take one token for ``model_id``, or raise Overloaded."""
        if limit is None:
            return
        with self._lock:
            # Read under the lock: a call that read the clock earlier but locked later
            # would refill by a negative interval.
            now = time.monotonic()
            bucket = self._buckets.get(model_id)
            if bucket is None or bucket.limit != limit:  # new model or a changed limit
                bucket = self._buckets[model_id] = _Bucket(limit, limit.capacity, now)
            rate = limit.per_second
            bucket.tokens = min(limit.capacity, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return
            wait = (1.0 - bucket.tokens) / rate
        raise Overloaded(f"Request is throttled at model level: the rate limit of model {model_id} "
                         f"({limit.limit_text} per {limit.unit.lower()}) is used up",
                         retry_after_seconds=math.ceil(wait))

