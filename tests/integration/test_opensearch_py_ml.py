"""The journey of opensearch-py-ml's ``MLCommonClient`` against mlstream, as its
documentation tells it: model group, connector, register, deploy, task, predict, search,
profile, undeploy, delete. Once with ``http_compress`` off and once on."""

from __future__ import annotations

import pytest
from opensearch_py_ml.ml_commons import MLCommonClient
from opensearchpy import ConflictError, NotFoundError, OpenSearch

from mlstream.testing.fake_openai import DEFAULT_TEXT

from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES


@pytest.mark.parametrize("http_compress", [False, True], ids=["plain", "http_compress"])
def test_the_ml_commons_client_journey(server, fake, http_compress):
    os_client = OpenSearch(hosts=[server.url], http_compress=http_compress, timeout=20)
    ml_client = MLCommonClient(os_client)

    # A model group to hold the versions of our chat model.
    group = ml_client.model_access_control.register_model_group(name="chat models", description="help desk")
    group_id = group["model_group_id"]
    assert ml_client.model_access_control.get_model_group_id_by_name("chat models") == group_id

    # A connector to the provider, and a model on it, in that group.
    connector_id = ml_client.connector.create_standalone_connector(body=openai_connector(fake))["connector_id"]
    registered = os_client.plugins.ml.register_model(body={
        "name": "openai gpt 3.5 turbo", "function_name": "remote", "model_group_id": group_id,
        "description": "openai model", "connector_id": connector_id})
    model_id = registered["model_id"]
    assert ml_client.get_task_info(registered["task_id"])["state"] == "COMPLETED"

    # Deploy: the client waits for DEPLOYED and hands back the deploy task.
    deploy_task = ml_client.deploy_model(model_id)
    assert (deploy_task["task_type"], deploy_task["model_id"]) == ("DEPLOY_MODEL", model_id)
    model = ml_client.get_model_info(model_id)
    assert (model["model_state"], model["model_group_id"], model["model_version"]) == ("DEPLOYED", group_id, "1")

    # Predict (the client calls .../_predict/ with a trailing slash).
    body = {"parameters": {"messages": SEED_MESSAGES}}
    for answer in (ml_client.predict(model_id, body), ml_client.generate_model_inference(model_id, body)):
        result = answer["inference_results"][0]
        assert result["status_code"] == 200
        assert result["output"][0]["dataAsMap"]["choices"][0]["message"]["content"] == DEFAULT_TEXT

    # Search models and tasks (the client sends its query as a GET body).
    models = ml_client.search_model({"query": {"term": {"model_group_id": group_id}}})
    assert [hit["_id"] for hit in models["hits"]["hits"]] == [model_id]
    tasks = ml_client.search_task({"query": {"term": {"model_id": model_id}}})
    assert {hit["_source"]["task_type"] for hit in tasks["hits"]["hits"]} == {"REGISTER_MODEL", "DEPLOY_MODEL"}

    # The profile shows the deployed model and its two predictions.
    profile = ml_client.get_profile(profile_type="model", ids=[model_id])
    assert profile["nodes"]["mlstream"]["models"][model_id]["predict_request_stats"]["count"] == 2

    # Undeploy, then delete the model, its tasks, the group and the connector.
    assert ml_client.undeploy_model(model_id) == {"mlstream": {"stats": {model_id: "undeployed"}}}
    assert ml_client.get_model_info(model_id)["model_state"] == "REGISTERED"
    with pytest.raises(ConflictError):
        ml_client.model_access_control.delete_model_group(group_id)  # it still holds the model
    assert ml_client.delete_model(model_id)["result"] == "deleted"
    for hit in tasks["hits"]["hits"]:
        assert ml_client.delete_task(hit["_id"])["result"] == "deleted"
    assert ml_client.search_task({"query": {"match_all": {}}})["hits"]["total"]["value"] == 0
    assert ml_client.model_access_control.delete_model_group_by_name("chat models")["result"] == "deleted"
    assert ml_client.connector.delete_connector(connector_id)["result"] == "deleted"

    # Errors arrive as the client's own exception classes.
    with pytest.raises(NotFoundError):
        ml_client.get_model_info(model_id)
    os_client.close()
