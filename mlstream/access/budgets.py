"""What the request path asks before and after a provider call: ``admit`` and ``record``.

    admission = accountant.admit(key, model_id)    before the provider call
        raises BudgetExceeded (429 budget_exceeded, Retry-After: the period's end),
               RateLimited   (429 rate_limited: the key's rpm or tpm),
               Overloaded    (429: the model controller's limit for this key's name)
    ... the call ...
    accountant.record(admission.usage(...))         after it, before its last byte is written

``record`` never blocks (``usage_recorder``); calling it before the response's last byte
means the client's next call already sees what this one spent.

The checks, in order, each only when the key has that limit:

* **budget** — spend in the key's current period (UTC day, ISO week or month) is the
  committed spend in the store (one row per key and day) plus what this process has
  charged and not yet written; at or past the budget, refused until the period ends.
  Other processes see a charge once its batch commits (milliseconds).
* **tpm** — tokens of the last 60 s, counted as reported (a call's tokens are known
  only when it ends, so concurrent calls can together go past the limit; the next
  ones are refused until the window has room).
* **controller** — ml-commons' per-user limit on the model (``controllers``).
* **rpm** — requests of the last 60 s: one row per admitted request, counted and
  inserted in one transaction serialised per key in the store, so exact under
  concurrency, across workers and instances.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from .keys import ApiKey
from .controllers import Controllers
from ..errors import BudgetExceeded, RateLimited
from ..metrics import Metrics
from ..usage.records import NO_KEY, UsageRecord, period_bounds
from ..usage.recorder import UsageRecorder
from ..usage.tables import UsageTables


@dataclass(frozen=True, slots=True)
class Admission:
    """A call let through: who makes it, to which model, from when (for its record)."""

    key_id: str
    key_name: str
    model_id: str
    started_ms: int

    def usage(self, *, interface: str, route: str, status: int, outcome: str, input_tokens: int = 0,
              output_tokens: int = 0, cached_input_tokens: int = 0, estimated: bool = False,
              first_token_ms: float | None = None, duration_ms: float = 0.0, cost: float | None = None,
              request_id: str = "") -> UsageRecord:
        """This call's record (``usage.cost_of(model.pricing, ...)`` gives ``cost``)."""
        return UsageRecord(self.started_ms, self.key_id, self.key_name, self.model_id, interface, route, status,
                           outcome, input_tokens, output_tokens, cached_input_tokens, estimated, first_token_ms,
                           duration_ms, cost, request_id)


class Accountant:
    def __init__(self, tables: UsageTables, recorder: UsageRecorder, metrics: Metrics,
                 controllers: Controllers, clock: Callable[[], float] = time.time) -> None:
        self._tables = tables
        self._recorder = recorder
        self._metrics = metrics
        self._controllers = controllers
        self._clock = clock

    def admit(self, key: ApiKey | None, model_id: str) -> Admission:
        """Let a call by ``key`` (None while no key exists) to ``model_id`` through, or raise
        the 429 that says why not (see the module docstring). Reads the store only for a
        key with a budget or tpm; writes it only for a key with rpm (and for a model
        controller naming the key)."""
        now = self._clock()
        now_ms = int(now * 1000)
        if key is None:
            return Admission(NO_KEY, NO_KEY, model_id, now_ms)
        limits = key.limits
        if limits.budget is not None:
            start, end = period_bounds(limits.budget_period, now_ms)
            spent = self.spent(key.key_id, start, end)
            if spent >= limits.budget:
                raise BudgetExceeded(
                    f"API key [{key.name}] has spent {spent:.6g} of its budget of {limits.budget:g} for this "
                    f"{limits.budget_period}; it renews at the start of the next {limits.budget_period} (UTC)",
                    retry_after_seconds=math.ceil((end - now_ms) / 1000))
        if limits.tpm is not None:
            tokens, oldest_leaves = self._tables.window_tokens(key.key_id, now)
            tokens += self._recorder.pending(key.key_id, 0, 0)[1]
            if tokens >= limits.tpm:
                wait = (oldest_leaves - now) if oldest_leaves is not None else 1.0
                raise RateLimited(f"API key [{key.name}] used {tokens} tokens in the last 60 s, its tpm is "
                                  f"{limits.tpm}", retry_after_seconds=math.ceil(wait))
        self._controllers.check(model_id, key.name)
        if limits.rpm is not None:
            wait = self._tables.take_request(key.key_id, limits.rpm, now)
            if wait > 0:
                raise RateLimited(f"API key [{key.name}] made {limits.rpm} requests in the last 60 s, its rpm",
                                  retry_after_seconds=math.ceil(wait))
        return Admission(key.key_id, key.name, model_id, now_ms)

    def record(self, record: UsageRecord) -> bool:
        """Count ``record`` in the metrics, charge its key, queue it for the store. Never
        blocks; False when the recorder's queue was full (the record dropped, counted)."""
        self._metrics.usage_recorded(record.model_id, record.interface, record.input_tokens,
                                     record.output_tokens, record.cost)
        return self._recorder.record(record)

    def spent(self, key_id: str, from_ms: int, to_ms: int) -> float:
        """What ``key_id`` spent in [from_ms, to_ms): committed plus this process's pending.

        Pending is read before and after the store: a batch that commits in between would
        be counted twice or not at all, so the read is repeated (once) when it did."""
        for _ in range(2):
            pending, _, generation = self._recorder.pending(key_id, from_ms, to_ms)
            committed = self._tables.spent(key_id, from_ms, to_ms)
            if self._recorder.generation() == generation:
                break
        return committed + pending
