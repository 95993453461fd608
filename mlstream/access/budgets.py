"""What the request path asks before and after a provider call: ``admit`` and ``record``.

    admission = accountant.admit(caller, model_id, estimate)   before the provider call
        raises BudgetExceeded (429 budget_exceeded, its ``scope``; Retry-After: the period's end),
               RateLimited   (429 rate_limited: an rpm or tpm, its ``scope``),
               Overloaded    (429: the model controller's limit for this key's name)
    ... the call ...
    accountant.record(admission.usage(...))         after it, before its last byte is written

``record`` never blocks (``usage_recorder``); calling it before the response's last byte
means the client's next call already sees what this one spent.

Every call is charged to two scopes: its key and its key's tenant (``tenants``). Each
check runs for each scope that has that limit, the key's first:

* **budget** — spend in the scope's current period (UTC day, ISO week or month): the
  committed spend in the store (one row per scope and day), what this process has charged
  and not yet written, and the **reservations** of calls in flight. A call about to be
  made reserves its estimated cost (input tokens from its request's size, output tokens
  from its request's cap: ``estimate``) in the same transaction that checks, serialised
  per scope in the store; the reservation is released in the transaction that writes the
  call's record. So concurrent calls, in any worker or host on one database, overrun a
  budget by at most what one call costs beyond its estimate. At or past the budget, refused
  until the period ends.
* **tpm** — tokens of the last 60 s, counted as reported (a call's tokens are known only
  when it ends, so concurrent calls can together go past the limit; the next ones are
  refused until the window has room).
* **controller** — ml-commons' per-user limit on the model (``controllers``).
* **rpm** — requests of the last 60 s: one row per admitted request, counted and
  inserted in one transaction serialised per scope in the store, so exact under
  concurrency, across workers and instances.

The admission carries what OpenAI's ``x-ratelimit-*`` headers say (``RateState``): the
tightest scope's requests and tokens left in the window.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass, replace
from typing import Callable

from .keys import Caller
from .controllers import Controllers
from ..errors import BudgetExceeded, RateLimited
from ..metrics import Metrics
from ..usage.records import DEFAULT_TENANT, NO_KEY, KeyLimits, UsageRecord, period_bounds, tenant_scope
from ..usage.recorder import UsageRecorder
from ..usage.tables import WINDOW_SECONDS, UsageTables


@dataclass(frozen=True, slots=True)
class RateState:
    """What OpenAI's ``x-ratelimit-*`` headers tell a client: the requests and tokens left in
    the 60 s window of the tightest scope that limits them (None: nothing limits them)."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float = 0.0
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float = 0.0

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.limit_requests is not None:
            out["x-ratelimit-limit-requests"] = str(self.limit_requests)
            out["x-ratelimit-remaining-requests"] = str(max(0, self.remaining_requests or 0))
            out["x-ratelimit-reset-requests"] = _duration(self.reset_requests_s)
        if self.limit_tokens is not None:
            out["x-ratelimit-limit-tokens"] = str(self.limit_tokens)
            out["x-ratelimit-remaining-tokens"] = str(max(0, self.remaining_tokens or 0))
            out["x-ratelimit-reset-tokens"] = _duration(self.reset_tokens_s)
        return out


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``20ms``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(int(math.ceil(seconds)), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


@dataclass(frozen=True, slots=True)
class Admission:
    """A call let through: who makes it, to which model, from when (for its record)."""

    key_id: str
    key_name: str
    model_id: str
    started_ms: int
    tenant: str = DEFAULT_TENANT
    reservations: tuple[str, ...] = ()   # released when its record is written
    rate: RateState = RateState()

    def usage(self, *, interface: str, route: str, status: int, outcome: str, input_tokens: int = 0,
              output_tokens: int = 0, cached_input_tokens: int = 0, estimated: bool = False,
              first_token_ms: float | None = None, duration_ms: float = 0.0, cost: float | None = None,
              request_id: str = "", cache_hit: bool = False, saved_input_tokens: int = 0,
              saved_output_tokens: int = 0, saved_cost: float | None = None) -> UsageRecord:
        """This call's record (``usage.cost_of(model.pricing, ...)`` gives ``cost``)."""
        return UsageRecord(self.started_ms, self.key_id, self.key_name, self.model_id, interface, route, status,
                           outcome, input_tokens, output_tokens, cached_input_tokens, estimated, first_token_ms,
                           duration_ms, cost, request_id, self.tenant, cache_hit, saved_input_tokens,
                           saved_output_tokens, saved_cost, self.reservations)


@dataclass(frozen=True, slots=True)
class _Scope:
    kind: str       # "key" or "tenant": what a refusal names
    scope_id: str   # its id in the usage tables
    label: str      # "API key [a]", "tenant [t]"
    limits: KeyLimits


def _scopes(caller: Caller) -> tuple[_Scope, ...]:
    key, tenant = caller.key, caller.tenant
    return (_Scope("key", key.key_id, f"API key [{key.name}]", key.limits),
            _Scope("tenant", tenant_scope(tenant.name), f"tenant [{tenant.name}]", tenant.limits))


class Accountant:
    def __init__(self, tables: UsageTables, recorder: UsageRecorder, metrics: Metrics,
                 controllers: Controllers, clock: Callable[[], float] = time.time) -> None:
        self._tables = tables
        self._recorder = recorder
        self._metrics = metrics
        self._controllers = controllers
        self._clock = clock

    def admit(self, caller: Caller | None, model_id: str, estimate: float = 0.0, *,
              cached: bool = False, requests: bool = True) -> Admission:
        """Let a call by ``caller`` (None while no key exists) to ``model_id`` through, or raise
        the 429 that says why not (see the module docstring). ``estimate``: the call's cost as
        far as it is known before it is made (0: unknown, nothing reserved). Reads the store
        only for a scope with a budget or tpm; writes it only for a budget with an estimate,
        an rpm, or a model controller naming the key. ``cached``: answered from the response
        cache, so only the controller and rpm apply (it spends no tokens and no budget).
        ``requests`` False: a call made for a request already admitted (a semantic cache's
        embedding): it takes no place of the rpm."""
        now = self._clock()
        now_ms = int(now * 1000)
        if caller is None:
            return Admission(NO_KEY, NO_KEY, model_id, now_ms)
        key = caller.key
        admission = Admission(key.key_id, key.name, model_id, now_ms, caller.tenant.name)
        if not cached:
            admission = self.reserve(admission, caller, estimate, now)
        try:
            rate = RateState()
            for scope in _scopes(caller) if not cached else ():
                if scope.limits.tpm is not None:
                    tokens, oldest_leaves = self._tables.window_tokens(scope.scope_id, now)
                    tokens += self._recorder.pending(scope.scope_id, 0, 0)[1]
                    wait = (oldest_leaves - now) if oldest_leaves is not None else 1.0
                    if tokens >= scope.limits.tpm:
                        raise RateLimited(f"{scope.label} used {tokens} tokens in the last 60 s, its tpm is "
                                          f"{scope.limits.tpm}", retry_after_seconds=math.ceil(wait), scope=scope.kind)
                    left = scope.limits.tpm - tokens
                    if rate.remaining_tokens is None or left < rate.remaining_tokens:
                        rate = replace(rate, limit_tokens=scope.limits.tpm, remaining_tokens=left,
                                       reset_tokens_s=max(0.0, wait))
            self._controllers.check(model_id, key.name)
            for scope in _scopes(caller) if requests else ():
                if scope.limits.rpm is not None:
                    wait, count = self._tables.take(scope.scope_id, scope.limits.rpm, now)
                    if wait > 0:
                        raise RateLimited(f"{scope.label} made {scope.limits.rpm} requests in the last 60 s, its rpm",
                                          retry_after_seconds=math.ceil(wait), scope=scope.kind)
                    left = scope.limits.rpm - count
                    if rate.remaining_requests is None or left < rate.remaining_requests:
                        rate = replace(rate, limit_requests=scope.limits.rpm, remaining_requests=left,
                                       reset_requests_s=WINDOW_SECONDS / scope.limits.rpm)
        except BaseException:
            self._tables.release(admission.reservations)  # refused: it will write no record
            raise
        return replace(admission, rate=rate)

    def reserve(self, admission: Admission, caller: Caller | None, estimate: float,
                now: float | None = None) -> Admission:
        """Check each budget of the caller's scopes, reserving ``estimate`` of it (a router's
        target, once its price is known, reserves on the router's admission). BudgetExceeded
        names the first scope that is spent; nothing stays reserved then."""
        if caller is None or admission.reservations:
            return admission
        now = self._clock() if now is None else now
        now_ms = int(now * 1000)
        taken: list[str] = []
        try:
            for scope in _scopes(caller):
                limits = scope.limits
                if limits.budget is None:
                    continue
                start, end = period_bounds(limits.budget_period, now_ms)
                reservation = secrets.token_hex(8)
                if estimate > 0:
                    pending = self._pending_spend(scope.scope_id, start, end)
                    spent = self._tables.reserve(scope.scope_id, limits.budget, start, end, pending, estimate,
                                                 reservation, now)
                    if spent is None:
                        taken.append(reservation)
                else:
                    spent = self.spent(scope.scope_id, start, end) + self._tables.reserved(scope.scope_id, now)
                    spent = spent if spent >= limits.budget else None
                if spent is not None:
                    raise BudgetExceeded(
                        f"{scope.label} has spent {spent:.6g} of its budget of {limits.budget:g} for this "
                        f"{limits.budget_period} (calls in flight included); it renews at the start of the next "
                        f"{limits.budget_period} (UTC)", retry_after_seconds=math.ceil((end - now_ms) / 1000),
                        scope=scope.kind)
        except BaseException:
            self._tables.release(taken)
            raise
        return replace(admission, reservations=tuple(taken))

    def _pending_spend(self, scope_id: str, from_ms: int, to_ms: int) -> float:
        return self._recorder.pending(scope_id, from_ms, to_ms)[0]

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
