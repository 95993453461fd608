"""Router models' values and per-process state, without sockets: the ``routing`` field's
checks, cycles, which failures move on, the strategies' order, cooldowns on a fake clock,
nested routers, and the health counts under threads."""

from __future__ import annotations

import sys
import threading
from collections import Counter

import pytest

from mlstream.errors import BadRequest, Overloaded, RateLimited, UpstreamError, UpstreamOverloaded, UpstreamTimeout
from mlstream.models.routing import (RouterHealth, Routing, Target, candidates, check_families, check_graph, parse_routing,
                              retry_class)

from ..support.clocks import FakeClock
from ..support.timeouts import HANG_GUARD


def routing(**fields: object) -> Routing:
    return parse_routing({"targets": [{"model_id": "a"}, {"model_id": "b"}], **fields})


# --- the routing field ------------------------------------------------------------------

def test_defaults_and_the_stored_form():
    parsed = parse_routing({"targets": ["a", {"model_id": "b", "weight": 2.5}]})
    assert parsed == Routing("round_robin", (Target("a", 1.0), Target("b", 2.5)))
    assert parsed.to_doc() == {"strategy": "round_robin",
                               "targets": [{"model_id": "a", "weight": 1}, {"model_id": "b", "weight": 2.5}],
                               "fallbacks": [], "retry_on": ["connect", "timeout", "429", "5xx"],
                               "allowed_fails": 3, "cooldown_s": 30, "mixed_providers": False}
    assert parse_routing(parsed.to_doc()) == parsed  # the stored form reads back the same


@pytest.mark.parametrize("value, words", [
    ("x", "must be a JSON object"),
    ({}, "[routing.targets] must be a non-empty list"),
    ({"targets": []}, "[routing.targets] must be a non-empty list"),
    ({"targets": ["a"], "strategy": "random"}, "[routing.strategy] must be one of round_robin, weighted, least_busy"),
    ({"targets": [{"model_id": "a", "weight": 0}]}, "weight must be a number above 0"),
    ({"targets": [{"model_id": "a", "weight": True}]}, "weight must be a number above 0"),
    ({"targets": [{"id": "a"}]}, "[routing.targets][0] must be"),
    ({"targets": [{"model_id": "a", "extra": 1}]}, "unknown field [extra] in [routing.targets][0]"),
    ({"targets": ["a"], "fallbacks": "b"}, "[routing.fallbacks] must be a list"),
    ({"targets": ["a"], "fallbacks": ["a"]}, "names model [a] more than once"),
    ({"targets": ["a"], "retry_on": ["4xx"]}, "[routing.retry_on] must be a list of connect, timeout, 429, 5xx"),
    ({"targets": ["a"], "allowed_fails": 0}, "[routing.allowed_fails] must be a whole number from 1"),
    ({"targets": ["a"], "cooldown_s": -1}, "[routing.cooldown_s] must be a number of seconds"),
    ({"targets": ["a"], "mixed_providers": "yes"}, "[routing.mixed_providers] must be true or false"),
    ({"targets": ["a"], "retries": 3}, "unknown field [retries] in [routing]"),
    ({"targets": ["a"] * 65}, "a router takes at most 64"),
])
def test_a_bad_routing_field_names_what_is_wrong(value, words):
    with pytest.raises(BadRequest) as refused:
        parse_routing(value)
    assert words in refused.value.reason


def test_cycles_and_self_targets_are_refused_with_their_path():
    stored = {"r2": parse_routing({"targets": ["m", "r3"]}), "r3": parse_routing({"targets": ["r1"]})}
    with pytest.raises(BadRequest, match=r"forms a cycle: r1 -> r1"):
        check_graph("r1", parse_routing({"targets": ["r1"]}), stored.get)
    with pytest.raises(BadRequest, match=r"forms a cycle: r1 -> r2 -> r3 -> r1"):
        check_graph("r1", parse_routing({"targets": ["m", "r2"]}), stored.get)
    check_graph("r1", parse_routing({"targets": ["m", "r3x"]}), stored.get)  # no cycle: passes


def test_members_of_different_known_families_are_refused_unless_mixed():
    check_families(routing(), {"a": "openai", "b": "openai"})
    check_families(routing(), {"a": "openai"})  # b's family is not known
    with pytest.raises(BadRequest, match=r"different provider APIs \(a: openai, b: bedrock\)"):
        check_families(routing(), {"a": "openai", "b": "bedrock"})
    check_families(routing(mixed_providers=True), {"a": "openai", "b": "bedrock"})


@pytest.mark.parametrize("error, kind", [
    (UpstreamError("refused", kind="connection"), "connect"),
    (UpstreamTimeout("slow"), "timeout"),
    (UpstreamError("busy", upstream_status=429), "429"),
    (RateLimited("the target's own rate limit"), "429"),
    (UpstreamError("down", upstream_status=500), "5xx"),
    (UpstreamError("down", upstream_status=503), "5xx"),
    (UpstreamOverloaded("anthropic 529", upstream_status=529), "5xx"),
    (UpstreamError("bad request", upstream_status=400), None),
    (UpstreamError("bad key", upstream_status=401), None),
    (UpstreamError("forbidden", upstream_status=403), None),
    (UpstreamError("no such model", upstream_status=404), None),
    (UpstreamError("too large", upstream_status=413), None),
    (UpstreamError("unprocessable", upstream_status=422), None),
    (UpstreamError("a malformed stream"), None),
    (Overloaded("our own pool is full"), None),
    (BadRequest("the request's own fault"), None),
])
def test_which_failures_another_target_may_serve(error, kind):
    assert retry_class(error) == kind


# --- strategies -------------------------------------------------------------------------

def test_round_robin_turns_through_the_targets_then_the_fallbacks():
    health = RouterHealth()
    spec = parse_routing({"targets": ["a", "b", "c"], "fallbacks": ["f"]})
    assert [health.order("r", spec) for _ in range(4)] == [
        ["a", "b", "c", "f"], ["b", "c", "a", "f"], ["c", "a", "b", "f"], ["a", "b", "c", "f"]]


def test_weighted_leads_in_proportion_to_the_weights_evenly_spread():
    health = RouterHealth()
    spec = parse_routing({"strategy": "weighted", "targets": [{"model_id": "a", "weight": 3}, "b"]})
    firsts = [health.order("r", spec)[0] for _ in range(400)]
    assert Counter(firsts) == {"a": 300, "b": 100}
    assert all(window.count("b") == 1 for window in (firsts[i:i + 4] for i in range(0, 400, 4)))
    assert health.order("r", spec)[1:] in (["b"], ["a"])  # the other target follows


def test_least_busy_leads_with_the_fewest_in_flight():
    health = RouterHealth()
    spec = parse_routing({"strategy": "least_busy", "targets": ["a", "b", "c"]})
    health.begin("a")
    health.begin("a")
    health.begin("b")
    assert health.order("r", spec) == ["c", "b", "a"]
    health.end("a")
    health.end("a")
    assert health.order("r", spec) == ["a", "c", "b"]


# --- cooldowns ------------------------------------------------------------------------

def test_a_target_cools_down_after_allowed_fails_in_a_row_and_comes_back():
    clock = FakeClock(100.0)
    health = RouterHealth(clock.monotonic)
    spec = routing(allowed_fails=2, cooldown_s=30)
    assert health.failed("a", spec) is False
    health.succeeded("a")  # a success breaks the row
    assert health.failed("a", spec) is False
    assert health.failed("a", spec) is True  # two in a row
    assert [health.order("r", spec) for _ in range(2)] == [["b"], ["b"]]
    clock.now += 29.9
    assert health.order("r", spec) == ["b"]
    clock.now += 0.2
    assert sorted(health.order("r", spec)) == ["a", "b"]


def test_when_every_member_cools_they_are_all_tried_rather_than_none():
    clock = FakeClock(100.0)
    health = RouterHealth(clock.monotonic)
    spec = routing(allowed_fails=1)
    health.failed("a", spec)
    health.failed("b", spec)
    assert sorted(health.order("r", spec)) == ["a", "b"]


# --- nested routers ---------------------------------------------------------------------

def test_a_router_member_is_expanded_in_place_and_each_model_tried_once():
    health = RouterHealth()
    inner = parse_routing({"targets": ["x", "a"]})
    outer = parse_routing({"targets": ["inner", "a"], "fallbacks": ["z"]})
    order = list(candidates("outer", outer, health, {"inner": inner}.get))
    assert [(router, model) for router, model, _ in order] == [("inner", "x"), ("inner", "a"), ("outer", "z")]
    assert order[0][2] is inner and order[2][2] is outer  # each model under its own router's rules


# --- the health table under threads ---------------------------------------------------

def test_in_flight_counts_stay_exact_under_threads():
    health = RouterHealth()
    spec = parse_routing({"strategy": "least_busy", "targets": ["a", "b"]})
    rounds = 2_000

    def worker() -> None:
        for _ in range(rounds):
            chosen = health.order("r", spec)[0]
            health.begin(chosen)
            if health.failed(chosen, spec):
                health.succeeded(chosen)
            health.end(chosen)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # as many thread switches inside the counting as CPython allows
    try:
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG_GUARD)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads)
    assert health.in_flight("a") == 0 and health.in_flight("b") == 0
