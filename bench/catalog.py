"""Every scenario by name, in the order a full run takes them: the one module that knows
them all, so the scenario modules import only what they share (scenarios.py), never
each other or this table."""

from __future__ import annotations

from typing import Any, Callable

from .cache import cache_cost
from .fronts import new_fronts
from .paced import paced
from .router import router_cost
from .scenarios import (Env, added_latency, admission, backpressure, cancellation, churn, embedding_predict,
                        openai_front, provider_relay, relay_throughput, slow_streams)

SCENARIOS: dict[str, Callable[[Env], dict[str, Any]]] = {
    "relay_throughput": relay_throughput,
    "added_latency": added_latency,
    "slow_streams": slow_streams,
    "backpressure": backpressure,
    "cancellation": cancellation,
    "admission": admission,
    "churn": churn,
    "embedding_predict": embedding_predict,
    "provider_relay": provider_relay,
    "openai_front": openai_front,
    "new_fronts": new_fronts,
    "router": router_cost,
    "paced": paced,
    "cache": cache_cost,
}
