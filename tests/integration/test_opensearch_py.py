"""The real opensearch-py client against mlstream, with ``http_compress`` on and off: each
row of issue 12's table, asserting the values the client hands back."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opensearchpy import (
    ConflictError,
    NotFoundError,
    OpenSearch,
    RequestError,
    SerializationError,
)

from mlstream.testing.fake_openai import DEFAULT_TEXT

from ..support.clients import EventStreamSerializer
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES

PREDICT = {"parameters": {"messages": SEED_MESSAGES}}


@pytest.fixture(params=[False, True], ids=["plain", "http_compress"])
def client(request, server) -> Iterator[OpenSearch]:
    os_client = OpenSearch(hosts=[server.url], http_compress=request.param, timeout=20)
    yield os_client
    os_client.close()


@pytest.fixture
def model_id(client: OpenSearch, fake) -> str:
    connector_id = client.plugins.ml.create_connector(body=openai_connector(fake))["connector_id"]
    registered = client.plugins.ml.register_model(
        body={"name": "openai gpt 3.5 turbo", "function_name": "remote", "connector_id": connector_id},
        params={"deploy": "true"})
    return registered["model_id"]


def content_of(reply: dict) -> str:
    return reply["inference_results"][0]["output"][0]["dataAsMap"]["choices"][0]["message"]["content"]


def test_the_compression_setting_reaches_the_wire(client):
    connection = client.transport.get_connection()
    # With http_compress, opensearch-py gzips every body and asks for gzip answers.
    assert connection.http_compress == ("accept-encoding" in connection.headers)


def test_info_names_the_cluster(client, server):
    info = client.info()
    assert info["cluster_name"] == "mlstream" and info["version"]["distribution"] == "opensearch"
    assert len(info["cluster_uuid"]) == 22 and client.info()["cluster_uuid"] == info["cluster_uuid"]


def test_sniff_on_start_finds_the_bound_address(server):
    sniffing = OpenSearch(hosts=[server.url], sniff_on_start=True, sniff_timeout=5)
    try:
        connections = sniffing.transport.connection_pool.connections
        assert [c.host for c in connections] == [server.url]
        assert sniffing.info()["cluster_name"] == "mlstream"
    finally:
        sniffing.close()


def test_health_nodes_and_plugins(client, server):
    health = client.cluster.health()
    assert health["status"] == "green" and health["number_of_nodes"] == 1
    nodes = client.nodes.info(metric="http")
    (node,) = nodes["nodes"].values()
    assert node["http"]["publish_address"] == server.url.removeprefix("http://")
    assert "plugins" not in node
    assert client.nodes.info(node_id="_local", metric="plugins")["nodes"]["mlstream"]["plugins"][0]["name"] == \
        "opensearch-ml"
    assert client.cat.plugins().split() == ["mlstream", "opensearch-ml", "3.3.0.0"]
    assert client.cat.plugins(format="json", v=True) == [
        {"name": "mlstream", "component": "opensearch-ml", "version": "3.3.0.0"}]


def test_predict_by_algorithm_and_by_model(client, model_id):
    by_algorithm = client.plugins.ml.predict(algorithm_name="remote", model_id=model_id, body=PREDICT)
    assert content_of(by_algorithm) == DEFAULT_TEXT
    assert content_of(client.plugins.ml.predict_model(model_id=model_id, body=PREDICT)) == DEFAULT_TEXT
    with pytest.raises(RequestError, match=r"must be one of remote, text_embedding, text_similarity"):
        client.plugins.ml.predict(algorithm_name="kmeans", model_id=model_id, body=PREDICT)


def test_tasks_search_and_delete(client, model_id):
    found = client.plugins.ml.search_tasks(body={"query": {"term": {"model_id": model_id}}})
    types = sorted(hit["_source"]["task_type"] for hit in found["hits"]["hits"])
    assert types == ["DEPLOY_MODEL", "REGISTER_MODEL"]
    task_id = found["hits"]["hits"][0]["_id"]
    assert client.plugins.ml.delete_task(task_id=task_id)["result"] == "deleted"
    with pytest.raises(NotFoundError):
        client.plugins.ml.get_task(task_id=task_id)
    assert client.plugins.ml.search_tasks(body={"query": {"match_all": {}}})["hits"]["total"]["value"] == 1


def test_undeploy_by_model_ids(client, model_id, fake):
    other = client.plugins.ml.register_model(
        body={"name": "second", "function_name": "remote", "connector": openai_connector(fake)})["model_id"]
    undeployed = client.transport.perform_request("POST", "/_plugins/_ml/models/_undeploy",
                                                  body={"model_ids": [model_id, other]})
    assert undeployed == {"mlstream": {"stats": {model_id: "undeployed"}}}  # the other was never deployed
    assert client.plugins.ml.get_model(model_id=model_id)["model_state"] == "REGISTERED"
    assert client.transport.perform_request("POST", "/_plugins/_ml/models/_undeploy",
                                            body={"model_ids": [model_id]}) == {}
    with pytest.raises(NotFoundError):
        client.transport.perform_request("POST", "/_plugins/_ml/models/_undeploy", body={"model_ids": ["nope"]})


def test_stats_and_profile_count_what_happened(client, model_id):
    for _ in range(3):
        client.plugins.ml.predict_model(model_id=model_id, body=PREDICT)
    with pytest.raises(RequestError):
        client.plugins.ml.predict_model(model_id=model_id, body={"parameters": {"no_messages": 1}})
    stats = client.plugins.ml.get_stats()
    assert stats["ml_model_count"] == 1 and stats["ml_connector_count"] == 1
    node = stats["nodes"]["mlstream"]
    assert (node["ml_request_count"], node["ml_failure_count"], node["ml_deployed_model_count"]) == (4, 1, 1)
    assert node["models"][model_id]["predict"] == {"ml_action_request_count": 4, "ml_action_failure_count": 1}
    only = client.plugins.ml.get_stats(stat="ml_request_count")
    assert only == {"nodes": {"mlstream": {"ml_request_count": 4}}}
    assert client.plugins.ml.get_stats(node_id="elsewhere", stat="ml_request_count") == {}

    profile = client.plugins.ml.get_profile()["nodes"]["mlstream"]["models"][model_id]
    assert profile["model_state"] == "DEPLOYED" and profile["worker_nodes"] == ["mlstream"]
    stats = profile["predict_request_stats"]
    assert stats["count"] == 4 and 0 < stats["min"] <= stats["average"] <= stats["max"]
    assert client.plugins.ml.get_profile_tasks() == {}


def test_model_groups(client, fake):
    ml = client.plugins.ml
    group = ml.register_model_group(body={"name": "chat models", "description": "for the help desk"})
    assert group["status"] == "CREATED"
    group_id = group["model_group_id"]
    with pytest.raises(RequestError, match="already being used by a model group"):
        ml.register_model_group(body={"name": "chat models"})
    assert ml.get_model_group(model_group_id=group_id)["latest_version"] == 0

    registered = ml.register_model(body={"name": "gpt", "function_name": "remote", "model_group_id": group_id,
                                         "connector": openai_connector(fake)})
    model = ml.get_model(model_id=registered["model_id"])
    assert (model["model_group_id"], model["model_version"]) == (group_id, "1")
    assert ml.get_model_group(model_group_id=group_id)["latest_version"] == 1

    assert ml.update_model_group(model_group_id=group_id, body={"name": "assistants"})["status"] == "Updated"
    found = ml.search_model_group(body={"query": {"match": {"name": "assistants"}}})
    assert [hit["_id"] for hit in found["hits"]["hits"]] == [group_id]

    with pytest.raises(ConflictError, match="associated model versions"):
        ml.delete_model_group(model_group_id=group_id)
    ml.delete_model(model_id=registered["model_id"])
    assert ml.delete_model_group(model_group_id=group_id)["result"] == "deleted"
    with pytest.raises(NotFoundError):
        ml.get_model_group(model_group_id=group_id)


def test_a_model_without_a_group_gets_one_named_after_it(client, fake):
    ml = client.plugins.ml
    first = ml.register_model(body={"name": "hamlet", "function_name": "remote", "connector": openai_connector(fake)})
    second = ml.register_model(body={"name": "hamlet", "function_name": "remote",
                                     "connector": openai_connector(fake)})
    one, two = (ml.get_model(model_id=r["model_id"]) for r in (first, second))
    assert one["model_group_id"] == two["model_group_id"]
    assert (one["model_version"], two["model_version"]) == ("1", "2")
    group = ml.get_model_group(model_group_id=one["model_group_id"])
    assert (group["name"], group["latest_version"], group["access"]) == ("hamlet", 2, "public")


def test_cluster_settings_step_of_the_tutorials(client):
    reply = client.cluster.put_settings(body={"persistent": {
        "plugins.ml_commons.only_run_on_ml_node": "false",
        "plugins.ml_commons.model_access_control_enabled": "true",
        "plugins.ml_commons.native_memory_threshold": "99"}})
    assert reply["acknowledged"] is True
    settings = client.cluster.get_settings(flat_settings=True)["persistent"]
    assert settings["plugins.ml_commons.native_memory_threshold"] == 99
    client.cluster.put_settings(body={"persistent": {"plugins.ml_commons.native_memory_threshold": None}})
    assert "plugins.ml_commons.native_memory_threshold" not in client.cluster.get_settings(flat_settings=True)[
        "persistent"]
    with pytest.raises(RequestError, match="cluster.nope"):
        client.cluster.put_settings(body={"persistent": {"plugins.ml_commons.only_run_on_ml_node": True,
                                                         "cluster.nope": 1}})
    assert client.cluster.get_settings(flat_settings=True)["persistent"][
        "plugins.ml_commons.only_run_on_ml_node"] is False


def test_filter_path_through_the_client(client, model_id):
    assert client.plugins.ml.get_model(model_id=model_id, filter_path="model_state") == {"model_state": "DEPLOYED"}
    assert client.info(filter_path="-version,-tagline,-cluster_uuid") == {"name": "mlstream",
                                                                           "cluster_name": "mlstream"}


def test_predict_model_stream_needs_an_event_stream_serializer(client, server, model_id):
    """opensearch-py only knows JSON answers; with an event-stream serializer (README,
    "Streaming from Python") the same call returns the events."""
    body = {"parameters": {"messages": SEED_MESSAGES, "_llm_interface": "openai/v1/chat/completions"}}
    with pytest.raises(SerializationError, match="text/event-stream"):
        client.plugins.ml.predict_model_stream(model_id=model_id, body=body)

    streaming = OpenSearch(hosts=[server.url], serializers={"text/event-stream": EventStreamSerializer()})
    events = streaming.plugins.ml.predict_model_stream(model_id=model_id, body=body)
    maps = [e["inference_results"][0]["output"][0]["dataAsMap"] for e in events]
    assert "".join(m["content"] for m in maps) == DEFAULT_TEXT and maps[-1]["is_last"] is True
    streaming.close()


def test_predictions_for_models_that_do_not_exist_are_not_counted_per_model(client, model_id):
    # A bad body (400) or none at all (404) for a random id: neither takes a per-model place.
    for number in range(3):
        with pytest.raises(RequestError):
            client.plugins.ml.predict_model(model_id=f"no-such-model-{number}", body={"parameters": []})
        with pytest.raises(NotFoundError):
            client.plugins.ml.predict_model(model_id=f"no-such-model-{number}", body=PREDICT)
    with pytest.raises(RequestError):  # a bad body for a model that exists counts, as a failure
        client.plugins.ml.predict_model(model_id=model_id, body={"parameters": {"no_messages": 1}})
    node = client.plugins.ml.get_stats()["nodes"]["mlstream"]
    assert set(node["models"]) == {model_id}
    assert node["models"][model_id]["predict"] == {"ml_action_request_count": 1, "ml_action_failure_count": 1}
