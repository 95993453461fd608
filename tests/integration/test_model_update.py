"""``PUT /_plugins/_ml/models/<id>``: ml-commons' update-model route (RestMLUpdateModelAction,
MLUpdateModelInput, UpdateModelTransportAction), and ``deploy_setting`` with its TTL.

Over real sockets against the fake OpenAI provider; the next call after an update uses
it (the resolved model is not served from a stale cache).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from opensearchpy import OpenSearch, RequestError

from mlstream.models import fields as model_fields
from mlstream.models.registry import now_ms
from mlstream.app.compose import Server
from mlstream.settings.server import ServerSettings

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST
from ..support.streams import SEED_MESSAGES
from ..support.timeouts import poll_until

ML = "/_plugins/_ml"
PREDICT = {"parameters": {"messages": SEED_MESSAGES}}


def reason(reply, status: int) -> str:
    assert reply.status == status, (reply.status, reply.body)
    return reply.body["error"]["reason"]


def model(client: Client, model_id: str) -> dict[str, Any]:
    return client.ok("GET", f"{ML}/models/{model_id}")


def test_update_answers_an_update_response_and_get_shows_it(client, fake):
    model_id = client.model_for(openai_connector(fake))
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)  # cached now
    answer = client.ok("PUT", f"{ML}/models/{model_id}", {
        "name": "renamed", "description": "new words", "rate_limiter": {"limit": "4", "unit": "MINUTES"},
        "deploy_setting": {"model_ttl_minutes": 5}, "guardrails": {"type": "local_regex"}})
    assert (answer["_index"], answer["_id"], answer["result"]) == (".plugins-ml-model", model_id, "updated")
    stored = model(client, model_id)
    assert (stored["name"], stored["description"]) == ("renamed", "new words")
    assert stored["rate_limiter"] == {"limit": "4", "unit": "MINUTES"}
    assert stored["deploy_setting"] == {"model_ttl_minutes": 5}
    assert stored["guardrails"] == {"type": "local_regex"}
    assert stored["last_updated_time"] >= stored["created_time"]


def test_opensearch_py_update_model(server, fake):
    os_client = OpenSearch(hosts=[server.url], timeout=20)
    model_id = Client(server.url).model_for(openai_connector(fake))
    assert os_client.plugins.ml.update_model(model_id=model_id, body={"description": "via opensearch-py"})["result"] \
        == "updated"
    assert os_client.plugins.ml.get_model(model_id=model_id)["description"] == "via opensearch-py"
    with pytest.raises(RequestError) as refused:
        os_client.plugins.ml.update_model(model_id=model_id, body={"is_enabled": "maybe"})
    assert "is_enabled" in str(refused.value.info)


def test_the_rate_limiter_update_merges_as_ml_commons_does(client, fake):
    """MLRateLimiter.update: the given limit or unit over the stored ones; an empty one changes nothing."""
    model_id = client.register(client.create_connector(openai_connector(fake)),
                               rate_limiter={"limit": "2", "unit": "SECONDS"})
    client.ok("PUT", f"{ML}/models/{model_id}", {"rate_limiter": {"unit": "MINUTES"}})
    assert model(client, model_id)["rate_limiter"] == {"limit": "2", "unit": "MINUTES"}
    client.ok("PUT", f"{ML}/models/{model_id}", {"rate_limiter": {}})
    assert model(client, model_id)["rate_limiter"] == {"limit": "2", "unit": "MINUTES"}


def test_disabling_a_model_refuses_its_next_call(client, fake):
    """TransportPredictionTaskAction: is_enabled false is 403 "Model is disabled."."""
    model_id = client.model_for(openai_connector(fake))
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    client.ok("PUT", f"{ML}/models/{model_id}", {"is_enabled": False})
    assert reason(client.call("POST", f"{ML}/models/{model_id}/_predict", PREDICT), 403) == "Model is disabled."
    client.ok("PUT", f"{ML}/models/{model_id}", {"is_enabled": True})
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    assert len(fake.stats.requests) == 2


def test_a_new_connector_id_is_used_by_the_next_call(client, fake):
    first = client.create_connector(openai_connector(fake, model="first-model"))
    second = client.create_connector(openai_connector(fake, model="second-model"))
    model_id = client.register(first)
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    client.ok("PUT", f"{ML}/models/{model_id}", {"connector_id": second})
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    assert [r.body["model"] for r in fake.stats.requests] == ["first-model", "second-model"]
    assert model(client, model_id)["connector_id"] == second


def test_an_inline_connector_is_updated_field_by_field(client, fake):
    """Connector.update: each field given replaces the stored one whole."""
    registered = client.ok("POST", f"{ML}/models/_register?deploy=true", {
        "name": "inline", "function_name": "remote", "connector": openai_connector(fake, model="old-model")})
    model_id = registered["model_id"]
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    parameters = {"endpoint": fake.url.removeprefix("http://"), "model": "new-model"}
    client.ok("PUT", f"{ML}/models/{model_id}", {"connector": {"parameters": parameters}})
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    assert [r.body["model"] for r in fake.stats.requests] == ["old-model", "new-model"]
    stored = model(client, model_id)["connector"]
    assert stored["parameters"] == parameters and "credential" not in stored


def test_connector_updates_that_do_not_fit_the_model(client, fake):
    by_id = client.model_for(openai_connector(fake))
    inline = client.ok("POST", f"{ML}/models/_register", {"name": "inline", "function_name": "remote",
                                                           "connector": openai_connector(fake)})["model_id"]
    other = client.create_connector(openai_connector(fake))
    assert reason(client.call("PUT", f"{ML}/models/{by_id}", {"connector_id": other, "connector": {"name": "x"}}),
                  400) == ("Model cannot have both stand-alone connector and internal connector. "
                           "Please check your update input body.")
    assert reason(client.call("PUT", f"{ML}/models/{by_id}", {"connector": {"name": "x"}}), 400) == (
        "Cannot update connector settings for this model. The model was created with a connector_id and "
        "does not have an inline connector.")
    assert reason(client.call("PUT", f"{ML}/models/{inline}", {"connector_id": other}), 400) == (
        "This remote does not have a connector_id field, maybe it uses an internal connector.")


def test_moving_to_another_model_group_takes_its_next_version(client, fake):
    model_id = client.model_for(openai_connector(fake))
    group = client.ok("POST", f"{ML}/model_groups/_register", {"name": "elsewhere"})["model_group_id"]
    client.ok("PUT", f"{ML}/models/{model_id}", {"model_group_id": group})
    stored = model(client, model_id)
    assert (stored["model_group_id"], stored["model_version"]) == (group, "1")
    assert client.ok("GET", f"{ML}/model_groups/{group}")["latest_version"] == 1
    assert reason(client.call("PUT", f"{ML}/models/{model_id}", {"model_group_id": "nope"}), 404) == (
        "Failed to find the model group with the provided model group id in the update model input, "
        "MODEL_GROUP_ID: nope")


def test_a_failed_update_changes_nothing(client, fake):
    model_id = client.model_for(openai_connector(fake))
    before = model(client, model_id)
    for body, status in (({"description": "new", "rate_limiter": {"limit": "x", "unit": "SECONDS"}}, 400),
                         ({"description": "new", "connector_id": "AAAAAAAAAAAAAAAAAAAA"}, 404),
                         ({"description": "new", "model_group_id": "nope"}, 404),
                         ({"description": "new", "interface": {"input": "{not json"}}, 400),
                         ({"description": "new", "deploy_setting": {"model_ttl_minutes": "soon"}}, 400),
                         ({"description": "new", "no_such_field": 1}, 400)):
        reply = client.call("PUT", f"{ML}/models/{model_id}", body)
        assert reply.status == status, (body, reply.body)
    assert model(client, model_id) == before
    assert reason(client.call("PUT", f"{ML}/models/{model_id}", {}), 400) == "Update model request has empty body"


def test_an_extension_field_is_one_table_entry(client, fake, monkeypatch):
    """model_fields.EXTENSION_FIELDS: a validated mlstream field, taken by register and update
    (as ``pricing`` is; ``tier`` here is a stand-in for the next one)."""
    def tier(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or not isinstance(value.get("level"), int):
            raise model_fields.BadRequest("[tier.level] must be an integer")
        return {"level": value["level"]}
    monkeypatch.setitem(model_fields.EXTENSION_FIELDS, "tier", tier)
    model_id = client.register(client.create_connector(openai_connector(fake)), tier={"level": 3})
    assert model(client, model_id)["tier"] == {"level": 3}
    client.ok("PUT", f"{ML}/models/{model_id}", {"tier": {"level": 5}})
    assert model(client, model_id)["tier"] == {"level": 5}
    assert "tier.level" in reason(client.call("PUT", f"{ML}/models/{model_id}", {"tier": {}}), 400)
    monkeypatch.delitem(model_fields.EXTENSION_FIELDS, "tier")
    assert "tier" in reason(client.call("PUT", f"{ML}/models/{model_id}", {"tier": {"level": 1}}), 400)


def test_pricing_is_updated_through_the_table(client, fake):
    model_id = client.model_for(openai_connector(fake))
    client.ok("PUT", f"{ML}/models/{model_id}", {"pricing": {"input_per_1m": 0.5, "output_per_1m": 1.5}})
    assert model(client, model_id)["pricing"]["input_per_1m"] == 0.5
    assert "pricing.input_per_1m" in reason(client.call(
        "PUT", f"{ML}/models/{model_id}", {"pricing": {"input_per_1m": -1, "output_per_1m": 1}}), 400)


# --- deploy_setting ------------------------------------------------------------------------

class Clock:
    """Wall time in ms that a test moves."""

    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


@pytest.fixture
def clocked(tmp_path):
    clock = Clock()
    server = Server(ServerSettings(port=0, data_dir=tmp_path / "data", trusted_endpoints=(LOOPBACK_TRUST,),
                                   allow_private_endpoints=True, drain_timeout=0.0), clock=clock).start()
    yield server, clock
    server.stop(drain_timeout=0)


def test_deploy_setting_is_stored_as_ml_commons_stores_it(client, fake):
    """MLDeploySetting: model_ttl_minutes defaults to -1."""
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy_setting={"is_auto_deploy_enabled": True})
    assert model(client, model_id)["deploy_setting"] == {"is_auto_deploy_enabled": True, "model_ttl_minutes": -1}
    model_id = client.register(connector_id, deploy_setting={"model_ttl_minutes": 1})
    assert model(client, model_id)["deploy_setting"] == {"model_ttl_minutes": 1}
    for bad in ({"model_ttl_minutes": 1.5}, {"is_auto_deploy_enabled": "yes"}, {"ttl": 1}, []):
        reply = client.call("POST", f"{ML}/models/_register", {"name": "m", "function_name": "remote",
                                                                 "connector_id": connector_id, "deploy_setting": bad})
        assert reply.status == 400, (bad, reply.body)


def test_auto_deploy_disabled_for_the_model(client, fake):
    """MLPredictTaskRunner.checkModelAutoDeployEnabled."""
    model_id = client.register(client.create_connector(openai_connector(fake)), deploy=False,
                               deploy_setting={"is_auto_deploy_enabled": False})
    assert reason(client.call("POST", f"{ML}/models/{model_id}/_predict", PREDICT), 400) == (
        f"Auto deployment disabled for this model, please deploy model first Model ID: {model_id}")
    assert fake.stats.requests == []
    client.ok("POST", f"{ML}/models/{model_id}/_deploy")
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)


def test_a_model_idle_for_its_ttl_is_undeployed(clocked, fake):
    """RestMLRemoteInferenceIT.testPredictRemoteModelWithTTL... without its 71 s sleep:
    MLModelCacheHelper.getExpiredModels, the time since the last call against the TTL."""
    server, clock = clocked
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy_setting={"model_ttl_minutes": 1})
    forever = client.register(connector_id)  # no TTL: never undeployed
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    clock.advance(50)
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)  # a call restarts the count
    clock.advance(50)
    assert server.app.reaper.sweep() == []
    assert model(client, model_id)["model_state"] == "DEPLOYED"
    clock.advance(11)
    assert server.app.reaper.sweep() == [model_id]
    assert model(client, model_id)["model_state"] == "REGISTERED"
    assert model(client, forever)["model_state"] == "DEPLOYED"
    assert model_id not in client.ok("GET", f"{ML}/profile/models").get("nodes", {}).get("mlstream", {}).get(
        "models", {})
    # a call deploys it again (auto-deploy), and the count starts over
    client.ok("POST", f"{ML}/models/{model_id}/_predict", PREDICT)
    assert model(client, model_id)["model_state"] == "DEPLOYED"
    assert server.app.reaper.sweep() == []


def test_the_ttl_check_runs_at_the_sync_up_interval(clocked, fake):
    """MLCommonsClusterManagerEventListener: the sync-up job every sync_up_job_interval_in_seconds,
    cancelled and scheduled again when the setting changes."""
    server, clock = clocked
    client = Client(server.url)
    model_id = client.register(client.create_connector(openai_connector(fake)),
                               deploy_setting={"model_ttl_minutes": 0})
    client.ok("PUT", "/_cluster/settings", {"transient": {"plugins.ml_commons.sync_up_job_interval_in_seconds": 1}})
    started = time.monotonic()
    # the thread was waiting out the default 10 s: the change wakes it, and it sweeps after the
    # new interval, long before the old wait would have ended
    assert poll_until(lambda: model(client, model_id)["model_state"] == "REGISTERED", timeout=15.0)
    assert time.monotonic() - started < 6.0
