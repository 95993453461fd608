"""Usage, keys and controllers over real sockets, on SQLite and PostgreSQL.

These tests record calls as the request path does, through ``server.app.accountant``
(so that a record's every field is chosen), and read them back over HTTP; the records of
real calls are ``test_usage_recording``'s."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mlstream.access.keys import Caller, KeyStore
from mlstream.access.tenants import TenantStore
from mlstream.usage.records import KeyLimits
from tests.support.clients import Client, bearer, client_with
from tests.support.connectors import openai_connector
from tests.support.timeouts import HANG_GUARD, poll_until

USAGE = "/_plugins/_mlstream/usage"
KEYS = "/_plugins/_mlstream/keys"


def record_call(server, key_name: str | None, model_id: str, *, tokens: tuple[int, int] = (10, 5),
                cost: float | None = 0.01, outcome: str = "ok", status: int = 200) -> None:
    """What the request path does around one provider call."""
    caller = None
    if key_name is not None:
        key = KeyStore(server.app.store).get(key_name)
        caller = Caller(key, TenantStore(server.app.store).get(key.tenant))
    admission = server.app.accountant.admit(caller, model_id)
    server.app.accountant.record(admission.usage(
        interface="openai/v1/chat/completions", route="/_plugins/_ml/models/{model_id}/_predict/stream",
        status=status, outcome=outcome, input_tokens=tokens[0], output_tokens=tokens[1], cost=cost,
        duration_ms=12.0, request_id="r"))
    # Written before the test reads: a query waits only READ_YOUR_WRITES_SECONDS for the
    # writer, which a loaded machine can outlast.
    assert server.app.recorder.flush(HANG_GUARD)


class Setup:
    def __init__(self, server, fake) -> None:
        self.server = server
        open_client = Client(server.url)
        self.model_id = open_client.register(open_client.create_connector(openai_connector(fake)))
        keys = KeyStore(server.app.store)
        _, self.admin_secret = keys.create("admin", "ops")
        _, self.alice_secret = keys.create("user", "alice", KeyLimits(budget=1.0))
        _, self.bob_secret = keys.create("user", "bob")
        self.admin = client_with(server.url, bearer(self.admin_secret))
        self.alice = client_with(server.url, bearer(self.alice_secret))
        self.bob = client_with(server.url, bearer(self.bob_secret))


@pytest.fixture(params=["sqlite", "postgresql"])
def setup(request, make_server, fake) -> Setup:
    options: dict[str, Any] = {}
    if request.param == "postgresql":
        options["store"] = request.getfixturevalue("postgres_url")
    return Setup(make_server(**options), fake)


# --- keys over HTTP ---------------------------------------------------------------------------------

def test_keys_over_http_are_admin_only_and_never_show_a_secret_twice(setup):
    created = setup.admin.call("POST", KEYS, {"name": "carol", "role": "user", "budget": 5,
                                               "budget_period": "month", "tpm": 100000, "rpm": 60})
    assert created.status == 200, created.body
    secret = created.body["key"]
    assert secret.startswith("mls_")
    assert {k: created.body[k] for k in ("name", "role", "budget", "budget_period", "tpm", "rpm")} == {
        "name": "carol", "role": "user", "budget": 5.0, "budget_period": "month", "tpm": 100000, "rpm": 60}
    listed = setup.admin.call("GET", KEYS)
    assert sorted(k["name"] for k in listed.body["keys"]) == ["alice", "bob", "carol", "ops"]
    one = setup.admin.call("GET", f"{KEYS}/carol")
    assert one.body["spend"]["cost"] == 0 and one.body["spend"]["period"] == "month"
    assert secret not in str(listed.body) and secret not in str(one.body)
    assert "key" not in one.body and all("key" not in k for k in listed.body["keys"])
    # the new key works at once
    carol = client_with(setup.server.url, bearer(secret))
    assert carol.call("GET", f"/_plugins/_ml/models/{setup.model_id}").status == 200
    # user keys may touch no key route
    for method, path, body in (("POST", KEYS, {"name": "x"}), ("GET", KEYS, None), ("GET", f"{KEYS}/bob", None),
                               ("PUT", f"{KEYS}/bob", {"rpm": 1}), ("DELETE", f"{KEYS}/bob", None)):
        assert setup.alice.call(method, path, body).status == 403, (method, path)


def test_put_changes_only_the_fields_it_names(setup):
    assert setup.admin.ok("PUT", f"{KEYS}/alice", {"rpm": 10})["rpm"] == 10
    key = setup.admin.ok("GET", f"{KEYS}/alice")
    assert (key["budget"], key["budget_period"], key["rpm"], key["tpm"], key["role"]) == (1.0, "month", 10, None,
                                                                                       "user")
    assert setup.admin.ok("PUT", f"{KEYS}/alice", {"budget": None})["budget"] is None


@pytest.mark.parametrize("body", [{"name": "bob"}, {"name": "x", "role": "root"}, {"name": "x", "budget": -1},
                                  {"name": "x", "colour": "red"}, {"name": "x", "rpm": 0}])
def test_a_refused_create_changes_nothing(setup, body):
    before = setup.admin.ok("GET", KEYS)
    reply = setup.admin.call("POST", KEYS, body)
    assert reply.status in (400, 409), reply.body
    assert setup.admin.ok("GET", KEYS) == before


def test_a_deleted_key_is_refused_within_a_second(setup):
    assert setup.bob.call("GET", f"/_plugins/_ml/models/{setup.model_id}").status == 200
    assert setup.admin.ok("DELETE", f"{KEYS}/bob")["result"] == "deleted"
    assert poll_until(lambda: setup.bob.call("GET", f"/_plugins/_ml/models/{setup.model_id}").status == 401, 1.0)
    assert setup.admin.call("GET", f"{KEYS}/bob").status == 404


def test_a_key_deleted_on_one_instance_is_refused_by_the_other(make_server, fake, postgres_url):
    first = Setup(make_server(store=postgres_url), fake)
    second = client_with(make_server(store=postgres_url).url, bearer(first.bob_secret))
    assert second.call("GET", f"/_plugins/_ml/models/{first.model_id}").status == 200
    first.admin.ok("DELETE", f"{KEYS}/bob")
    assert poll_until(lambda: second.call("GET", f"/_plugins/_ml/models/{first.model_id}").status == 401, 1.0)


# --- the usage query -----------------------------------------------------------------------------------

def test_usage_grouped_by_key_and_model_with_totals(setup):
    for _ in range(3):
        record_call(setup.server, "alice", setup.model_id, tokens=(100, 20), cost=0.1)
    record_call(setup.server, "bob", setup.model_id, tokens=(7, 3), cost=None, outcome="error", status=502)
    body = setup.admin.ok("GET", f"{USAGE}?group_by=key,model")
    assert body["group_by"] == ["key", "model"]
    assert body["rows"] == [
        {"key": "alice", "model": setup.model_id, "requests": 3, "errors": 0, "input_tokens": 300,
         "output_tokens": 60, "cached_input_tokens": 0, "cost": pytest.approx(0.3), "cache_hits": 0,
         "saved_cost": None},
        {"key": "bob", "model": setup.model_id, "requests": 1, "errors": 1, "input_tokens": 7, "output_tokens": 3,
         "cached_input_tokens": 0, "cost": None, "cache_hits": 0, "saved_cost": None}]
    assert body["totals"]["requests"] == 4 and body["totals"]["cost"] == pytest.approx(0.3)
    by_day = setup.admin.ok("GET", f"{USAGE}?group_by=day,outcome")
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert {(row["day"], row["outcome"]) for row in by_day["rows"]} <= {(today, "ok"), (today, "error")} | {
        (time.strftime("%Y-%m-%d", time.gmtime(time.time() - 60)), o) for o in ("ok", "error")}
    # an interval before any call
    empty = setup.admin.ok("GET", f"{USAGE}?from=2020-01-01&to=2020-01-02")
    assert empty["rows"] == [] and empty["totals"]["requests"] == 0 and empty["totals"]["cost"] is None
    assert empty["from"] == "2020-01-01T00:00:00.000Z"


def test_a_user_key_sees_only_its_own_usage(setup):
    record_call(setup.server, "alice", setup.model_id)
    record_call(setup.server, "bob", setup.model_id)
    own = setup.alice.ok("GET", f"{USAGE}?group_by=key")
    assert [row["key"] for row in own["rows"]] == ["alice"]
    assert setup.alice.ok("GET", f"{USAGE}?key=alice")["totals"]["requests"] == 1
    refused = setup.alice.call("GET", f"{USAGE}?key=bob")
    assert refused.status == 403 and refused.body["error"]["type"] == "security_exception"
    assert setup.alice.call("GET", f"{USAGE}/records?key=bob").status == 403
    records = setup.alice.ok("GET", f"{USAGE}/records")["records"]
    assert [r["key"] for r in records] == ["alice"]
    assert len(setup.admin.ok("GET", f"{USAGE}/records")["records"]) == 2


def test_records_list_every_field_newest_first(setup):
    for tokens in ((1, 1), (2, 2), (3, 3)):
        record_call(setup.server, "bob", setup.model_id, tokens=tokens)
    records = setup.admin.ok("GET", f"{USAGE}/records?size=2&model={setup.model_id}")["records"]
    assert [r["input_tokens"] for r in records] == [3, 2]
    assert set(records[0]) == {"time", "time_ms", "request_id", "key", "key_id", "tenant", "model", "interface", "route",
                               "status", "outcome", "input_tokens", "output_tokens", "cached_input_tokens",
                               "estimated", "time_to_first_token_ms", "duration_ms", "cost", "cache_hit",
                               "saved_input_tokens", "saved_output_tokens", "saved_cost"}
    assert setup.admin.call("GET", f"{USAGE}/records?size=1001").status == 400
    assert setup.admin.call("GET", f"{USAGE}?group_by=colour").status == 400


def test_budget_spent_shows_on_the_key_and_refuses_the_next_call(setup):
    record_call(setup.server, "alice", setup.model_id, cost=1.0)
    assert setup.admin.ok("GET", f"{KEYS}/alice")["spend"]["cost"] == pytest.approx(1.0)
    from mlstream.errors import BudgetExceeded
    with pytest.raises(BudgetExceeded):
        record_call(setup.server, "alice", setup.model_id)
    record_call(setup.server, "bob", setup.model_id)  # bob goes on


def test_two_instances_on_one_postgresql_add_up(make_server, fake, postgres_url):
    first = Setup(make_server(store=postgres_url), fake)
    second = make_server(store=postgres_url)
    record_call(first.server, "bob", first.model_id, cost=0.25)
    record_call(second, "bob", first.model_id, cost=0.25)
    assert second.app.recorder.flush(5)
    body = first.admin.ok("GET", f"{USAGE}?group_by=key")
    assert body["rows"][0]["requests"] == 2 and body["rows"][0]["cost"] == pytest.approx(0.5)


def test_usage_survives_a_restart(make_server, fake, tmp_path):
    server = make_server()
    setup = Setup(server, fake)
    record_call(server, "bob", setup.model_id, cost=0.5)
    server.stop(drain_timeout=0)  # right after the call: the recorder writes it on the way out
    again = make_server()
    body = client_with(again.url, bearer(setup.admin_secret)).ok("GET", f"{USAGE}?group_by=key")
    assert body["rows"][0]["key"] == "bob" and body["rows"][0]["cost"] == pytest.approx(0.5)


def test_metrics_count_tokens_and_cost_per_model(setup):
    record_call(setup.server, "bob", setup.model_id, tokens=(11, 4), cost=0.5)
    text = setup.admin.call("GET", "/metrics").body
    assert (f'mlstream_tokens_total{{model="{setup.model_id}",interface="openai/v1/chat/completions",'
            f'direction="input"}} 11') in text
    assert f'mlstream_cost_total{{model="{setup.model_id}"}} 0.5' in text


# --- pricing ----------------------------------------------------------------------------------------------

def test_pricing_is_validated_stored_shown_and_resolved(setup):
    connector_id = setup.admin.ok("GET", f"/_plugins/_ml/models/{setup.model_id}")["connector_id"]
    pricing = {"input_per_1m": 2.5, "output_per_1m": 10, "cached_input_per_1m": 1.25}
    model_id = setup.admin.register(connector_id, pricing=pricing)
    assert setup.admin.ok("GET", f"/_plugins/_ml/models/{model_id}")["pricing"] == pricing
    assert setup.server.app.registry.resolve(model_id).pricing.cost(1_000_000, 0, 0) == 2.5
    before = setup.admin.ok("POST", "/_plugins/_ml/models/_search", {"query": {"match_all": {}}})
    bad = setup.admin.call("POST", "/_plugins/_ml/models/_register",
                           {"name": "m", "function_name": "remote", "connector_id": connector_id,
                            "pricing": {"input_per_1m": 1}})
    assert bad.status == 400 and "output_per_1m" in bad.body["error"]["reason"]
    after = setup.admin.ok("POST", "/_plugins/_ml/models/_search", {"query": {"match_all": {}}})
    assert after["hits"]["total"] == before["hits"]["total"]


# --- controllers ---------------------------------------------------------------------------------------------

def test_controllers_as_ml_commons_answers_them(setup):
    path = f"/_plugins/_ml/controllers/{setup.model_id}"
    body = {"user_rate_limiter": {"alice": {"limit": 2, "unit": "MINUTES"}, "bob": {"limit": "4", "unit": "HOURS"}}}
    missing = setup.admin.call("POST", "/_plugins/_ml/controllers/nope", body)
    assert missing.status == 404 and "Failed to find model" in missing.body["error"]["reason"]
    assert setup.admin.call("PUT", path, body).status == 409  # none yet: create it first
    assert setup.admin.call("GET", path).status == 404
    assert setup.admin.ok("POST", path, body) == {"model_id": setup.model_id, "status": "CREATED"}
    assert setup.admin.ok("GET", path) == {"model_id": setup.model_id, "user_rate_limiter": {
        "alice": {"limit": "2", "unit": "MINUTES"}, "bob": {"limit": "4", "unit": "HOURS"}}}
    updated = setup.admin.ok("PUT", path, {"user_rate_limiter": {"alice": {"limit": 6}}})
    assert updated["result"] == "updated" and updated["_index"] == ".plugins-ml-controller"
    assert setup.admin.ok("GET", path)["user_rate_limiter"]["alice"] == {"limit": "6", "unit": "MINUTES"}
    before = setup.admin.ok("GET", path)
    assert setup.admin.call("POST", path, {"user_rate_limiter": {"alice": {"limit": 1, "unit": "WEEKS"}}}).status == 400
    assert setup.admin.call("PUT", path, {"user_rate_limiter": {"carol": {"limit": 1}}}).status == 400  # needs a unit
    assert setup.admin.ok("GET", path) == before  # a refused change changes nothing
    assert setup.alice.call("GET", path).status == 403
    # enforced for the key named in it (the request path calls admit, which checks it)
    setup.admin.ok("POST", path, {"user_rate_limiter": {"bob": {"limit": 1, "unit": "MINUTES"}}})
    record_call(setup.server, "bob", setup.model_id)
    from mlstream.errors import Overloaded
    with pytest.raises(Overloaded, match="throttled at user level"):
        record_call(setup.server, "bob", setup.model_id)
    record_call(setup.server, "alice", setup.model_id)  # alice is no longer named
    assert setup.admin.ok("DELETE", path)["result"] == "deleted"
    assert setup.admin.call("DELETE", path).status == 404
    record_call(setup.server, "bob", setup.model_id)


def test_deleting_a_model_deletes_its_controller(setup):
    path = f"/_plugins/_ml/controllers/{setup.model_id}"
    setup.admin.ok("POST", path, {"user_rate_limiter": {"bob": {"limit": 1, "unit": "MINUTES"}}})
    setup.admin.ok("POST", f"/_plugins/_ml/models/{setup.model_id}/_undeploy")
    setup.admin.ok("DELETE", f"/_plugins/_ml/models/{setup.model_id}")
    assert setup.admin.call("GET", path).status == 404
