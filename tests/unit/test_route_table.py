"""The routing table's remembered matches: the same answers as a search, each request its own params."""

from __future__ import annotations

import pytest

from mlstream.errors import MethodNotAllowed, NotFound
from mlstream.server import routing
from mlstream.server.routing import Front, Reply, Request, Router

FRONT = Front("test", lambda exc, trace: Reply(500, {}))


def handler(req: Request) -> Reply:
    return Reply(200, {})


def table() -> Router:
    router = Router(FRONT)
    router.add("GET", "/models/{model_id}", handler)
    router.add("POST", "/models/{model_id}/_predict", handler, role="user")
    router.add("POST", "/models/_search", handler)
    return router


def test_a_remembered_match_is_the_searched_one_with_params_of_its_own():
    router = table()
    first_route, first = router.match("POST", "/models/abc/_predict")
    first["model_id"] = "changed by the first request"
    again_route, again = router.match("POST", "/models/abc/_predict")
    assert again_route is first_route and again == {"model_id": "abc"}
    assert again is not first
    assert router.match("HEAD", "/models/abc")[0].template == "/models/{model_id}"  # HEAD is served by GET


def test_misses_are_searched_every_time_and_never_remembered():
    router = table()
    for _ in range(2):
        with pytest.raises(NotFound):
            router.match("GET", "/nothing/here")
        with pytest.raises(MethodNotAllowed) as refused:
            router.match("DELETE", "/models/abc/_predict")
        assert refused.value.headers["Allow"] == "POST"
    assert router._matches == {}


def test_a_route_added_later_is_found_for_a_path_seen_before():
    router = table()
    with pytest.raises(NotFound):
        router.match("GET", "/late/1")
    router.match("GET", "/models/abc")
    router.add("GET", "/late/{id}", handler)
    assert router.match("GET", "/late/1")[1] == {"id": "1"}
    assert router.match("GET", "/models/abc")[1] == {"model_id": "abc"}


def test_the_memory_is_bounded_in_entries_and_path_length(monkeypatch):
    monkeypatch.setattr(routing, "MAX_REMEMBERED_MATCHES", 8)
    router = table()
    for index in range(50):
        assert router.match("GET", f"/models/m{index}")[1] == {"model_id": f"m{index}"}
        assert len(router._matches) <= 8
    long_id = "x" * (routing.MAX_REMEMBERED_PATH + 1)
    assert router.match("GET", f"/models/{long_id}")[1] == {"model_id": long_id}
    assert all(len(path) <= routing.MAX_REMEMBERED_PATH for _, path in router._matches)


def test_a_paths_front_is_the_longest_claiming_prefix_before_and_after_a_claim():
    router = table()
    other, inner = Front("other", FRONT.error_reply), Front("inner", FRONT.error_reply)
    assert router.front_of("/v1/messages") is FRONT
    router.claim_prefix("/v1", other)
    assert router.front_of("/v1/messages") is other and router.front_of("/v1x") is FRONT
    router.claim_prefix("/v1/messages/", inner)
    assert [router.front_of("/v1/messages") for _ in range(2)] == [inner, inner]
    assert router.front_of("/v1/models") is other
