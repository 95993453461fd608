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

from .errors import Overloaded
from .registry import RateLimit


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

