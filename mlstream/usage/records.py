"""Usage values: one provider call's record, a model's pricing, budget periods, and the
usage query's filters. Pure: no store, no clock read that a caller cannot pass in.

    UsageRecord   what one call used (tokens, time, cost), written by ``usage_recorder``
    Pricing       a model's prices per million tokens (an mlstream extension of the model)
    UsageQuery    the filters and grouping of ``GET /_plugins/_mlstream/usage``
    period_bounds where a key's budget period (UTC day, ISO week, month) starts and ends

Token names are normalized whatever the provider calls them: ``input_tokens`` counts
every input token, the cached ones included; ``cached_input_tokens`` is the part of it
the provider served from its cache. ``estimated`` says the counts were made from the
relayed chunks because the provider sent none (a stream the client cut, an OpenAI
stream without ``include_usage``).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from ..errors import BadRequest

OUTCOMES = ("ok", "error", "client_gone")
NO_KEY = "-"  # the key id and name of a call made while no API key exists
DEFAULT_TENANT = "default"  # the tenant of a key that names none (and of calls made while no key exists)
GROUP_FIELDS = ("key", "tenant", "model", "interface", "outcome", "day", "hour")
BUDGET_PERIODS = ("day", "week", "month")
DEFAULT_WINDOW_MS = 24 * 3600 * 1000  # a query without ``from`` covers the last 24 hours
MAX_RECORDS = 1000                    # the most single records one query lists
DEFAULT_RECORDS = 100
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One provider call as it ended. Times are epoch milliseconds (UTC)."""

    time_ms: int
    key_id: str
    key_name: str
    model_id: str
    interface: str          # the ``_llm_interface`` served, e.g. "openai/v1/chat/completions"
    route: str              # the route template, e.g. "/_plugins/_ml/models/{model_id}/_predict/stream"
    status: int             # the HTTP status answered (a stream cut mid-way: 200, outcome client_gone)
    outcome: str            # one of OUTCOMES
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    estimated: bool = False
    first_token_ms: float | None = None  # request start to the first content event (streams)
    duration_ms: float = 0.0
    cost: float | None = None            # None: the model has no pricing (never 0 for "unknown")
    request_id: str = ""
    tenant: str = DEFAULT_TENANT
    # Answered from the response cache: no provider call, tokens and cost 0; what the
    # provider call it replaced used is in the saved_* fields.
    cache_hit: bool = False
    saved_input_tokens: int = 0
    saved_output_tokens: int = 0
    saved_cost: float | None = None
    # The budget reservations this call took (``tables.reserve``): released as the record is
    # written, in the same transaction. Not a column.
    reservations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    @property
    def tokens(self) -> int:
        """What a key's ``tpm`` counts: input and output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def scopes(self) -> tuple[str, ...]:
        """The ids its cost and tokens are charged to: its key's, and its tenant's."""
        return () if self.key_id == NO_KEY else (self.key_id, tenant_scope(self.tenant))

    def to_body(self) -> dict[str, Any]:
        """The record as ``GET /_plugins/_mlstream/usage/records`` lists it."""
        return {"time": iso_ms(self.time_ms), "time_ms": self.time_ms, "request_id": self.request_id,
                "key": self.key_name, "key_id": self.key_id, "tenant": self.tenant, "model": self.model_id,
                "interface": self.interface, "route": self.route, "status": self.status,
                "outcome": self.outcome, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cached_input_tokens": self.cached_input_tokens,
                "estimated": self.estimated, "time_to_first_token_ms": self.first_token_ms,
                "duration_ms": self.duration_ms, "cost": self.cost, "cache_hit": self.cache_hit,
                "saved_input_tokens": self.saved_input_tokens, "saved_output_tokens": self.saved_output_tokens,
                "saved_cost": self.saved_cost}

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        del row["reservations"]
        return row


def tenant_scope(tenant: str) -> str:
    """A tenant's id in the spend and window tables, beside its keys' ids (8 hex digits:
    never this)."""
    return "tenant:" + tenant


# --- prices ---------------------------------------------------------------------

_PRICE_FIELDS = ("input_per_1m", "output_per_1m", "cached_input_per_1m")


@dataclass(frozen=True, slots=True)
class Pricing:
    """Prices per million tokens, in the deployment's own currency."""

    input_per_1m: float
    output_per_1m: float
    cached_input_per_1m: float | None = None  # None: cached input costs the input price

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        """Uncached input × input price + cached input × cached price + output × output price.
        ``input_tokens`` includes the cached ones (the normalized count)."""
        cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
        cached_price = self.input_per_1m if self.cached_input_per_1m is None else self.cached_input_per_1m
        return ((max(input_tokens, 0) - cached) * self.input_per_1m + cached * cached_price
                + max(output_tokens, 0) * self.output_per_1m) / 1_000_000

    def to_doc(self) -> dict[str, float]:
        doc = {"input_per_1m": self.input_per_1m, "output_per_1m": self.output_per_1m}
        if self.cached_input_per_1m is not None:
            doc["cached_input_per_1m"] = self.cached_input_per_1m
        return doc


def parse_pricing(raw: Any, *, embedding: bool = False) -> Pricing | None:
    """A model's ``pricing`` from a register or update body; None for null (no pricing).

    The update-model route (``PUT /_plugins/_ml/models/<id>``) calls this on the body's
    ``pricing`` too: a new price applies to the calls after it, never to recorded ones.
    ``embedding``: the model is an embedding model (``model_fields.is_embedding_model``),
    whose calls have no output tokens: a missing ``output_per_1m`` is 0.
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequest("[pricing] must be an object {input_per_1m, output_per_1m, cached_input_per_1m}")
    unknown = sorted(set(raw) - set(_PRICE_FIELDS))
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in [pricing]; it takes "
                         f"{', '.join(_PRICE_FIELDS)}")
    prices: dict[str, float | None] = {}
    for name in _PRICE_FIELDS:
        value = raw.get(name)
        if value is None:
            if name == "output_per_1m" and embedding:
                prices[name] = 0.0
                continue
            if name != "cached_input_per_1m":
                raise BadRequest(f"[pricing.{name}] is required (a price per million tokens; 0 for free)")
            prices[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise BadRequest(f"[pricing.{name}] must be a number of 0 or more, got [{value}]")
        prices[name] = float(value)
    return Pricing(prices["input_per_1m"], prices["output_per_1m"], prices["cached_input_per_1m"])  # type: ignore[arg-type]


def cost_of(pricing: Pricing | None, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0
            ) -> float | None:
    """A call's cost, or None when its model has no pricing (cost unknown, not free)."""
    return None if pricing is None else pricing.cost(input_tokens, output_tokens, cached_input_tokens)


# --- budget periods ---------------------------------------------------------------

def period_bounds(period: str, now_ms: int) -> tuple[int, int]:
    """(start, end) in epoch ms of the UTC calendar day, ISO week (Monday to Monday) or
    month holding ``now_ms``."""
    now = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = day, day + timedelta(days=1)
    elif period == "week":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    else:
        raise ValueError(f"unknown budget period {period!r}")
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)


# --- the query ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class UsageQuery:
    """Which records a usage query covers: ``from_ms`` <= time < ``to_ms``, optionally one
    key (by name, or by id for a user key's own view) and one model."""

    from_ms: int
    to_ms: int
    key_name: str | None = None
    key_id: str | None = None
    model_id: str | None = None
    group_by: tuple[str, ...] = ()
    size: int = DEFAULT_RECORDS
    tenant: str | None = None


_EPOCH_MS = re.compile(r"^\d{1,15}$")


def parse_time(value: str, name: str) -> int:
    """ISO-8601 (a naive time is UTC; a bare date is its midnight) or epoch millis."""
    text = value.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadRequest(f"[{name}] must be an ISO-8601 time or epoch milliseconds, got [{value}]") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1000)


def parse_usage_query(params: Mapping[str, str], now_ms: int, *, records: bool = False) -> UsageQuery:
    """The query of a usage request's URL parameters (strings, as a query string gives them)."""
    # [to] is excluded: without it, up to now with this millisecond's records (a call just
    # answered is in the usage asked for right after it)
    to_ms = parse_time(params["to"], "to") if params.get("to") else now_ms + 1
    from_ms = parse_time(params["from"], "from") if params.get("from") else to_ms - DEFAULT_WINDOW_MS
    if from_ms >= to_ms:
        raise BadRequest(f"[from] must be before [to], got {iso_ms(from_ms)} and {iso_ms(to_ms)}")
    group_by: tuple[str, ...] = ()
    if not records and params.get("group_by"):
        group_by = tuple(dict.fromkeys(part.strip() for part in params["group_by"].split(",") if part.strip()))
        unknown = [part for part in group_by if part not in GROUP_FIELDS]
        if unknown:
            raise BadRequest(f"[group_by] takes {', '.join(GROUP_FIELDS)}; got [{', '.join(unknown)}]")
    size = DEFAULT_RECORDS
    if records and params.get("size"):
        try:
            size = int(params["size"])
        except ValueError:
            raise BadRequest(f"[size] must be a whole number, got [{params['size']}]") from None
        if not 1 <= size <= MAX_RECORDS:
            raise BadRequest(f"[size] must be between 1 and {MAX_RECORDS}, got [{size}]")
    return UsageQuery(from_ms, to_ms, params.get("key") or None, None, params.get("model") or None,
                      group_by, size, params.get("tenant") or None)


def iso_ms(ms: int) -> str:
    """Epoch ms as ISO-8601 UTC with milliseconds and a ``Z``."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def group_value(field: str, raw: Any) -> Any:
    """A group field as answered: days as ``YYYY-MM-DD``, hours as ``YYYY-MM-DDTHH:00Z``
    (both UTC; the store groups them as epoch ms), the others as stored."""
    if field == "day":
        return datetime.fromtimestamp(int(raw) / 1000, timezone.utc).strftime("%Y-%m-%d")
    if field == "hour":
        return datetime.fromtimestamp(int(raw) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:00Z")
    return raw


@dataclass(frozen=True, slots=True)
class UsageSums:
    """What a group of records (or all of them) adds up to."""

    requests: int = 0
    errors: int = 0  # records whose outcome is "error"
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost: float | None = None  # None when no record in the group had a cost
    cache_hits: int = 0  # requests answered from the response cache
    saved_cost: float | None = None  # what those would have cost (None: none had a price)

    def to_body(self) -> dict[str, Any]:
        return {"requests": self.requests, "errors": self.errors, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cached_input_tokens": self.cached_input_tokens,
                "cost": None if self.cost is None else round(self.cost, 10), "cache_hits": self.cache_hits,
                "saved_cost": None if self.saved_cost is None else round(self.saved_cost, 10)}


def usage_body(query: UsageQuery, rows: list[tuple[dict[str, Any], UsageSums]], totals: UsageSums
               ) -> dict[str, Any]:
    """The answer of ``GET /_plugins/_mlstream/usage``."""
    return {"from": iso_ms(query.from_ms), "to": iso_ms(query.to_ms), "group_by": list(query.group_by),
            "rows": [{**groups, **sums.to_body()} for groups, sums in rows], "totals": totals.to_body()}


# --- a key's limits -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KeyLimits:
    """What an API key may consume: ``budget`` (cost per ``budget_period``), ``tpm`` (tokens)
    and ``rpm`` (requests) per sliding 60 s. None: no limit of that kind."""

    budget: float | None = None
    budget_period: str = "month"
    tpm: int | None = None
    rpm: int | None = None

    @property
    def any(self) -> bool:
        return self.budget is not None or self.tpm is not None or self.rpm is not None

    def to_doc(self) -> dict[str, Any]:
        return {"budget": self.budget, "budget_period": self.budget_period, "tpm": self.tpm, "rpm": self.rpm}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "KeyLimits":
        return cls(doc.get("budget"), doc.get("budget_period") or "month", doc.get("tpm"), doc.get("rpm"))


LIMIT_FIELDS = ("budget", "budget_period", "tpm", "rpm")


def parse_key_limits(body: Mapping[str, Any], current: KeyLimits = KeyLimits()) -> KeyLimits:
    """``current`` with the limit fields ``body`` names changed (null removes a limit);
    the fields it does not name stay as they are."""
    values = current.to_doc()
    for name in LIMIT_FIELDS:
        if name not in body:
            continue
        value = body[name]
        if name == "budget_period":
            if value is None:
                value = "month"
            if not isinstance(value, str) or value.lower() not in BUDGET_PERIODS:
                raise BadRequest(f"[budget_period] must be one of {', '.join(BUDGET_PERIODS)}, got [{value}]")
            value = value.lower()
        elif value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise BadRequest(f"[{name}] must be a number, got [{value}]")
            if name == "budget":
                if value < 0:
                    raise BadRequest(f"[budget] must be 0 or more, got [{value}]")
                value = float(value)
            else:
                if value != int(value) or value < 1:
                    raise BadRequest(f"[{name}] must be a whole number of 1 or more, got [{value}]")
                value = int(value)
        values[name] = value
    return KeyLimits(**values)
