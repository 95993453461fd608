"""The cluster-settings step of ml-commons tutorials, and OpenSearch's persistent/transient rules."""

from __future__ import annotations

import pytest

from mlstream.settings.server import CLUSTER_SETTINGS

from ..support.clients import Client
from ..support.connectors import openai_connector

ML = "plugins.ml_commons."
TUTORIAL = {  # the settings step the ml-commons tutorials open with
    "persistent": {
        "plugins.ml_commons.only_run_on_ml_node": "false",
        "plugins.ml_commons.model_access_control_enabled": "true",
        "plugins.ml_commons.memory_feature_enabled": True,
        "plugins.ml_commons.native_memory_threshold": "99",
        "plugins.ml_commons.allow_registering_model_via_url": "true",
        "plugins.ml_commons.trusted_connector_endpoints_regex": [r"^https://api\.openai\.com/.*$"],
    }
}


def flat(client: Client, section: str) -> dict:
    return client.ok("GET", "/_cluster/settings?flat_settings=true")[section]


def test_the_tutorial_step_is_accepted_with_values_normalised(client):
    reply = client.ok("PUT", "/_cluster/settings", TUTORIAL)
    assert reply["acknowledged"] is True
    assert reply["persistent"]["plugins"]["ml_commons"]["native_memory_threshold"] == 99
    assert flat(client, "persistent") == {
        ML + "only_run_on_ml_node": False, ML + "model_access_control_enabled": True,
        ML + "memory_feature_enabled": True, ML + "native_memory_threshold": 99,
        ML + "allow_registering_model_via_url": True,
        ML + "trusted_connector_endpoints_regex": [r"^https://api\.openai\.com/.*$"]}


def test_every_documented_key_has_its_default(client):
    defaults = client.ok("GET", "/_cluster/settings?include_defaults=true&flat_settings=true")["defaults"]
    assert set(defaults) == set(CLUSTER_SETTINGS)
    assert defaults[ML + "only_run_on_ml_node"] is True and defaults[ML + "native_memory_threshold"] == 90


def test_null_resets_and_is_not_echoed(client):
    client.ok("PUT", "/_cluster/settings", TUTORIAL)
    reply = client.ok("PUT", "/_cluster/settings", {"persistent": {ML + "native_memory_threshold": None}})
    assert reply == {"acknowledged": True, "persistent": {}, "transient": {}}
    assert ML + "native_memory_threshold" not in flat(client, "persistent")
    defaults = client.ok("GET", "/_cluster/settings?include_defaults=true&flat_settings=true")["defaults"]
    assert defaults[ML + "native_memory_threshold"] == 90


def test_a_wildcard_null_resets_every_key_under_it(client):
    client.ok("PUT", "/_cluster/settings", TUTORIAL)
    client.ok("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.*": None}})
    assert flat(client, "persistent") == {}


def test_transient_wins_over_persistent_and_resets_to_it(client, fake):
    stream = ML + "stream_enabled"
    client.ok("PUT", "/_cluster/settings", {"persistent": {stream: True}, "transient": {stream: False}})
    assert flat(client, "transient") == {stream: False}
    model_id = client.model_for(openai_connector(fake))
    body = {"parameters": {"messages": [], "_llm_interface": "openai/v1/chat/completions"}}
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", body).status == 400
    client.ok("PUT", "/_cluster/settings", {"transient": {stream: None}})  # back to the persistent value
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", body).status == 200


@pytest.mark.parametrize("body, named", [
    ({"persistent": {ML + "only_run_on_ml_node": False, "cluster.routing.allocation.enable": "all"}},
     "[cluster.routing.allocation.enable], not recognized"),
    ({"transient": {ML + "only_run_on_ml_node": False, ML + "no_such": 1}}, "transient setting [plugins.ml_commons.no_such]"),
    ({"persistent": {ML + "only_run_on_ml_node": False, ML + "native_memory_threshold": 101}}, "must be <= 100"),
    ({"persistent": {ML + "only_run_on_ml_node": False, ML + "native_memory_threshold": "lots"}}, "Failed to parse"),
    ({"persistent": {ML + "only_run_on_ml_node": False, ML + "multi_tenancy_enabled": True}},
     "not dynamically updateable"),
    ({"persistent": {ML + "only_run_on_ml_node": False, ML + "disk_free_space_threshold": "5 parsecs"}}, "size"),
], ids=["outside-ml-commons", "unknown-transient", "out-of-range", "not-a-number", "static", "bad-size"])
def test_one_bad_key_refuses_the_whole_request(client, body, named):
    reply = client.call("PUT", "/_cluster/settings", body)
    assert reply.status == 400 and named in reply.body["error"]["reason"], reply.body
    assert flat(client, "persistent") == {} and flat(client, "transient") == {}


def test_auto_deploy_off_refuses_a_predict_on_an_undeployed_model(client, fake):
    model_id = client.register(client.create_connector(openai_connector(fake)), deploy=False)
    client.ok("PUT", "/_cluster/settings", {"transient": {ML + "model_auto_deploy.enable": False}})
    body = {"parameters": {"messages": []}}
    refused = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", body)
    assert refused.status == 400 and "deploy the model first" in refused.body["error"]["reason"]
    assert client.ok("GET", f"/_plugins/_ml/models/{model_id}")["model_state"] == "REGISTERED"
    assert fake.stats.requests == []
    client.ok("PUT", "/_cluster/settings", {"transient": {ML + "model_auto_deploy.enable": None}})
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", body).status == 200
    assert client.ok("GET", f"/_plugins/_ml/models/{model_id}")["model_state"] == "DEPLOYED"
