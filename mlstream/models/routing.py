"""Router models: a model that serves each call from one of its targets, and moves on to
the next when one fails before answering (issue 27, an mlstream extension of ml-commons'
model: ``"routing"`` in a register or update request, no connector).

    "routing": {"strategy": "round_robin" | "weighted" | "least_busy",
                "targets": [{"model_id": A, "weight": 3}, {"model_id": B}],
                "fallbacks": [C, D],
                "retry_on": ["connect", "timeout", "429", "5xx"],
                "allowed_fails": 3, "cooldown_s": 30}

A call tries the targets in the strategy's order, then the fallbacks in theirs, skipping
those cooling down (all cooling: tried anyway, rather than failing closed). A failure of a
kind in ``retry_on`` moves on; any other error is the answer. A target that failed
``allowed_fails`` times in a row cools down for ``cooldown_s``. A target may be a router
itself (``candidates`` expands it in place); register and update refuse cycles.

Here: the routing value (parsed, checked, stored) and ``RouterHealth``, the per-process
state the strategies and cooldowns keep (each process its own, as ``--workers`` run).
Pure of I/O: the predictor (``predict``) makes the calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest, MLStreamError, RateLimited, UpstreamError

STRATEGIES = ("round_robin", "weighted", "least_busy")
RETRY_CLASSES = ("connect", "timeout", "429", "5xx")
ALLOWED_FAILS = 3
COOLDOWN_SECONDS = 30.0
MAX_TARGETS = 64      # targets and fallbacks of one router, each
MAX_DEPTH = 8         # routers within routers: deeper is refused at register time
_FIELDS = frozenset({"strategy", "targets", "fallbacks", "retry_on", "allowed_fails", "cooldown_s",
                     "mixed_providers"})
# The connector parameter naming its provider API (as ``providers.LLM_INTERFACE``): a
# member's family is its first part (openai, bedrock, anthropic, gemini, sagemaker).
LLM_INTERFACE = "_llm_interface"


@dataclass(frozen=True, slots=True)
class Target:
    model_id: str
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Routing:
    strategy: str
    targets: tuple[Target, ...]
    fallbacks: tuple[str, ...] = ()
    retry_on: frozenset[str] = frozenset(RETRY_CLASSES)
    allowed_fails: int = ALLOWED_FAILS
    cooldown_s: float = COOLDOWN_SECONDS
    # Its members speak different provider APIs (OpenAI and Bedrock, say): served through the
    # /v1 fronts only, which translate a request per target; _predict refuses it.
    mixed_providers: bool = False

    @property
    def members(self) -> tuple[str, ...]:
        """Every model it may call directly: targets, then fallbacks."""
        return tuple(t.model_id for t in self.targets) + self.fallbacks

    def to_doc(self) -> dict[str, Any]:
        return {"strategy": self.strategy,
                "targets": [{"model_id": t.model_id, "weight": _number(t.weight)} for t in self.targets],
                "fallbacks": list(self.fallbacks),
                "retry_on": [kind for kind in RETRY_CLASSES if kind in self.retry_on],
                "allowed_fails": self.allowed_fails, "cooldown_s": _number(self.cooldown_s),
                "mixed_providers": self.mixed_providers}


def parse_routing(value: Any) -> Routing:
    """The ``routing`` field checked (the ids' existence and cycles are the registry's)."""
    if not isinstance(value, dict):
        raise BadRequest("[routing] must be a JSON object")
    unknown = sorted(set(value) - _FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in [routing]: it takes "
                         f"[{', '.join(sorted(_FIELDS))}]")
    strategy = value.get("strategy", "round_robin")
    if strategy not in STRATEGIES:
        raise BadRequest(f"[routing.strategy] must be one of {', '.join(STRATEGIES)}, got [{strategy}]")
    raw_targets = value.get("targets")
    if not isinstance(raw_targets, list) or not raw_targets:
        raise BadRequest("[routing.targets] must be a non-empty list of {\"model_id\": ..., \"weight\": ...}")
    if len(raw_targets) > MAX_TARGETS:
        raise BadRequest(f"[routing.targets] has {len(raw_targets)} entries; a router takes at most {MAX_TARGETS}")
    targets = tuple(_target(entry, index) for index, entry in enumerate(raw_targets))
    fallbacks = value.get("fallbacks", [])
    if (not isinstance(fallbacks, list) or len(fallbacks) > MAX_TARGETS
            or not all(isinstance(f, str) and f for f in fallbacks)):
        raise BadRequest(f"[routing.fallbacks] must be a list of at most {MAX_TARGETS} model ids")
    members = [t.model_id for t in targets] + fallbacks
    repeated = sorted({m for m in members if members.count(m) > 1})
    if repeated:
        raise BadRequest(f"[routing] names model [{repeated[0]}] more than once among its targets and fallbacks")
    retry_on = value.get("retry_on", list(RETRY_CLASSES))
    if not isinstance(retry_on, list) or not all(kind in RETRY_CLASSES for kind in retry_on):
        raise BadRequest(f"[routing.retry_on] must be a list of {', '.join(RETRY_CLASSES)}")
    allowed_fails = value.get("allowed_fails", ALLOWED_FAILS)
    if isinstance(allowed_fails, bool) or not isinstance(allowed_fails, int) or not 1 <= allowed_fails <= 1_000_000:
        raise BadRequest("[routing.allowed_fails] must be a whole number from 1")
    cooldown = value.get("cooldown_s", COOLDOWN_SECONDS)
    if isinstance(cooldown, bool) or not isinstance(cooldown, (int, float)) or not 0 <= cooldown <= 86_400:
        raise BadRequest("[routing.cooldown_s] must be a number of seconds from 0 to 86400")
    mixed = value.get("mixed_providers", False)
    if not isinstance(mixed, bool):
        raise BadRequest("[routing.mixed_providers] must be true or false")
    return Routing(strategy, targets, tuple(fallbacks), frozenset(retry_on), allowed_fails, float(cooldown), mixed)


def _target(entry: Any, index: int) -> Target:
    if isinstance(entry, str):  # a bare id: weight 1
        entry = {"model_id": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("model_id"), str) or not entry["model_id"]:
        raise BadRequest(f"[routing.targets][{index}] must be {{\"model_id\": ..., \"weight\": ...}}")
    unknown = sorted(set(entry) - {"model_id", "weight"})
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in [routing.targets][{index}]")
    weight = entry.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1_000_000:
        raise BadRequest(f"[routing.targets][{index}].weight must be a number above 0")
    return Target(entry["model_id"], float(weight))


def _number(value: float) -> int | float:
    return int(value) if value == int(value) else value


def check_graph(router_id: str, routing: Routing, routing_of: Callable[[str], Routing | None]) -> None:
    """Refuse a router that reaches itself through its members (or nests past MAX_DEPTH).
    ``routing_of(model_id)``: that model's routing, None for a plain model (the caller
    has checked that every id exists)."""
    def visit(routing: Routing, path: tuple[str, ...]) -> None:
        if len(path) > MAX_DEPTH:
            raise BadRequest(f"[routing] nests routers more than {MAX_DEPTH} deep: {' -> '.join(path)}")
        for member in routing.members:
            if member in path:
                raise BadRequest(f"[routing] forms a cycle: {' -> '.join((*path, member))}")
            inner = routing_of(member)
            if inner is not None:
                visit(inner, (*path, member))
    visit(routing, (router_id,))


def check_families(routing: Routing, families: dict[str, str]) -> None:
    """Refuse a router whose plain members are known to speak different provider APIs
    (``families``: member -> the first part of its connector's ``_llm_interface``, where it
    names one; a connector without one could speak anything, so nothing is known) unless it
    says ``mixed_providers``: _predict sends every target the client's parameters as they are."""
    known = sorted(set(families.values()))
    if len(known) > 1 and not routing.mixed_providers:
        named = ", ".join(f"{member}: {family}" for member, family in sorted(families.items()))
        raise BadRequest(f"[routing] targets speak different provider APIs ({named}): _predict would send each the "
                         "same parameters. Give targets of one API (OpenAI and Azure OpenAI, Bedrock in two "
                         "regions), or set [routing.mixed_providers] true to serve it through /v1 only, which "
                         "translates a request for each target")


def retry_class(error: MLStreamError) -> str | None:
    """The ``retry_on`` kind of a failure, None when no other target could do better: a
    provider's 4xx but 429 is the request's own fault (400, 401, 403, 404, 413, 422 ...),
    and our own refusals (the pool full, the key's budget) hold for every target."""
    if isinstance(error, UpstreamError):
        status = error.upstream_status
        if status is not None:
            if status == 429:
                return "429"
            return "5xx" if status >= 500 else None
        if error.kind == "timeout":
            return "timeout"
        if error.kind == "connection":
            return "connect"
        return None
    if isinstance(error, RateLimited):  # the target's own rate limit (its rate_limiter)
        return "429"
    return None


@dataclass(slots=True)
class _Health:
    fails: int = 0            # in a row
    cooling_until: float = 0.0
    in_flight: int = 0


class RouterHealth:
    """What the strategies and cooldowns remember, per process: each target's failures in a
    row, its cooldown, its calls in flight; each router's round-robin position.

    One lock, held for dict and arithmetic only (never across a call)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._models: dict[str, _Health] = {}
        self._turns: dict[str, int] = {}                    # round_robin: calls so far
        self._credit: dict[str, dict[str, float]] = {}      # weighted: smooth round-robin credit

    def order(self, router_id: str, routing: Routing) -> list[str]:
        """The members to try, in order: the targets by the strategy, then the fallbacks;
        those cooling down left out unless all are."""
        with self._lock:
            targets = self._ordered_targets(router_id, routing)
            now = self._clock()
            members = targets + list(routing.fallbacks)
            ready = [m for m in members if self._health(m).cooling_until <= now]
        return ready or members

    def _ordered_targets(self, router_id: str, routing: Routing) -> list[str]:
        ids = [t.model_id for t in routing.targets]
        if routing.strategy == "least_busy":  # fewest in flight; ties in the listed order
            return sorted(ids, key=lambda m: self._health(m).in_flight)
        if routing.strategy == "weighted":
            # Smooth weighted round-robin (nginx's): over any run of calls each target
            # leads in proportion to its weight, evenly spread; the rest follow by weight.
            credit = self._credit.setdefault(router_id, {})
            total = sum(t.weight for t in routing.targets)
            for t in routing.targets:
                credit[t.model_id] = credit.get(t.model_id, 0.0) + t.weight
            for stale in set(credit) - set(ids):  # the router was updated
                del credit[stale]
            first = max(ids, key=lambda m: credit[m])
            credit[first] -= total
            rest = sorted((t for t in routing.targets if t.model_id != first), key=lambda t: -t.weight)
            return [first] + [t.model_id for t in rest]
        turn = self._turns.get(router_id, 0)
        self._turns[router_id] = turn + 1
        start = turn % len(ids)
        return ids[start:] + ids[:start]

    def _health(self, model_id: str) -> _Health:
        health = self._models.get(model_id)
        if health is None:
            health = self._models[model_id] = _Health()
        return health

    def begin(self, model_id: str) -> None:
        with self._lock:
            self._health(model_id).in_flight += 1

    def end(self, model_id: str) -> None:
        with self._lock:
            self._health(model_id).in_flight -= 1

    def succeeded(self, model_id: str) -> None:
        with self._lock:
            health = self._health(model_id)
            health.fails, health.cooling_until = 0, 0.0

    def failed(self, model_id: str, routing: Routing) -> bool:
        """One more failure in a row; True when it starts the target's cooldown."""
        with self._lock:
            health = self._health(model_id)
            health.fails += 1
            if health.fails >= routing.allowed_fails:
                health.fails = 0
                health.cooling_until = self._clock() + routing.cooldown_s
                return True
            return False

    def in_flight(self, model_id: str) -> int:
        with self._lock:
            return self._health(model_id).in_flight


def candidates(router_id: str, routing: Routing, health: RouterHealth,
               routing_of: Callable[[str], Routing | None]) -> Iterator[tuple[str, str, Routing]]:
    """``(router, model, that router's routing)`` for each plain model to try, in order;
    a member that is a router itself is expanded in place (its own order and cooldowns)."""
    seen: set[str] = set()

    def walk(router: str, spec: Routing, depth: int) -> Iterator[tuple[str, str, Routing]]:
        for member in health.order(router, spec):
            inner = routing_of(member) if depth < MAX_DEPTH else None
            if inner is not None:
                yield from walk(member, inner, depth + 1)
            elif member not in seen:
                seen.add(member)
                yield router, member, spec
    return walk(router_id, routing, 0)
