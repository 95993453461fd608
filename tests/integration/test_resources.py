"""Connectors, models, tasks, `_search` and cluster settings, over the real HTTP API.

Every test drives an in-process server on 127.0.0.1 through its REST routes; the
fake OpenAI provider stands in for api.openai.com where a predict has to reach an
upstream.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, stream_body

ML = "/_plugins/_ml"
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{20}$")  # ml-commons' 20-char ids, URL-safe
SECRET = "sk-do-not-leak-7f3a9c1e5b2d4a6f"       # a credential value that must never come back
STREAM = "plugins.ml_commons.stream_enabled"
TRUSTED = "plugins.ml_commons.trusted_connector_endpoints_regex"
PRIVATE = "plugins.ml_commons.connector.private_ip_enabled"


# --- helpers ---------------------------------------------------------------------------

def raw(client: Client, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    """Status and the exact response bytes (for "never contains the secret" checks)."""
    kwargs: dict[str, Any] = {}
    if body is not None:
        kwargs["json"] = body
    response = client.http.request(method, client.base_url + path, **kwargs)
    return response.status, response.data


def assert_error(reply, status: int, *words: str) -> None:
    """API.md's error body with ``status``; its reason mentions each of ``words``."""
    assert reply.status == status, (reply.status, reply.body)
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    body = reply.body
    assert isinstance(body, dict) and body["status"] == status, body
    assert isinstance(body["error"]["type"], str) and body["error"]["type"]
    reason = body["error"]["reason"]
    assert isinstance(reason, str) and reason
    for word in words:
        assert word.lower() in reason.lower(), (word, reason)


def predict_body() -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES}}


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (tree or {}).items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def persistent(client: Client) -> dict[str, Any]:
    return flat(client.ok("GET", "/_cluster/settings")["persistent"])


def search(client: Client, kind: str, body: Any) -> dict[str, Any]:
    return client.ok("POST", f"{ML}/{kind}/_search", body)


def hit_ids(result: dict[str, Any]) -> set[str]:
    return {hit["_id"] for hit in result["hits"]["hits"]}


def named_connector(fake, name: str, **extra: Any) -> dict[str, Any]:
    body = openai_connector(fake, **extra)
    body["name"] = name
    return body


def secret_connector(fake) -> dict[str, Any]:
    """The seed connector with SECRET as its key, and the key used in url, header and body."""
    body = openai_connector(fake)
    body["credential"] = {"openAI_key": SECRET, "other": "another-secret-value-123"}
    return body


# --- connectors ------------------------------------------------------------------------

def test_create_connector_returns_a_20_char_url_safe_id(client, fake):
    first = client.create_connector(openai_connector(fake))
    second = client.create_connector(openai_connector(fake))
    assert ID_PATTERN.match(first), first
    assert ID_PATTERN.match(second), second
    assert first != second


def test_get_connector_never_contains_a_credential_value(client, fake):
    connector_id = client.create_connector(secret_connector(fake))
    status, data = raw(client, "GET", f"{ML}/connectors/{connector_id}")
    assert status == 200
    assert SECRET.encode() not in data
    assert b"another-secret-value-123" not in data
    doc = json.loads(data)
    assert doc["name"] == "OpenAI Chat Connector"
    assert doc["protocol"] == "http"
    assert doc["parameters"] == {"endpoint": fake.url.removeprefix("http://"), "model": "gpt-3.5-turbo"}
    # the template itself is returned, not its rendering
    assert doc["actions"][0]["headers"]["Authorization"] == "Bearer ${credential.openAI_key}"
    assert doc["actions"][0]["request_body"] == openai_connector(fake)["actions"][0]["request_body"]


def test_put_connector_merges_parameters_and_replaces_the_credential(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id)
    assert client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()).status == 200

    reply = client.ok("PUT", f"{ML}/connectors/{connector_id}",
                      {"parameters": {"model": "gpt-4o-mini", "temperature": 0.5},
                       "credential": {"openAI_key": SECRET}, "description": "updated"})
    assert reply["result"] == "updated"

    status, data = raw(client, "GET", f"{ML}/connectors/{connector_id}")
    assert status == 200 and SECRET.encode() not in data
    doc = json.loads(data)
    assert doc["parameters"] == {"endpoint": fake.url.removeprefix("http://"), "model": "gpt-4o-mini",
                                 "temperature": 0.5}
    assert doc["description"] == "updated"
    assert doc["name"] == "OpenAI Chat Connector"  # untouched fields stay

    # the running model sees the change at once: new parameter, new (wrong) key
    before = len(fake.stats.requests)
    reply = client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert_error(reply, 401)
    sent = fake.stats.requests[before:]
    assert len(sent) == 1
    assert sent[0].headers["authorization"] == f"Bearer {SECRET}"
    assert sent[0].body["model"] == "gpt-4o-mini"

    # and back to the right key: predict works again
    client.ok("PUT", f"{ML}/connectors/{connector_id}", {"credential": {"openAI_key": fake.api_key}})
    assert client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()).status == 200


def test_put_connector_revalidates_and_a_failed_update_changes_nothing(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    before = client.ok("GET", f"{ML}/connectors/{connector_id}")

    bad_updates = [
        {"protocol": "ftp"},
        {"actions": []},
        {"actions": [{"action_type": "predict", "method": "POST",
                      "url": "https://evil.example.com/v1/chat/completions"}]},
        {"credential": {"openAI_key": 42}},
        {"credential": {"unrelated": "x"}},  # the header uses ${credential.openAI_key}
        {"no_such_field": 1},
        {"parameters": "not an object"},
    ]
    for update in bad_updates:
        reply = client.call("PUT", f"{ML}/connectors/{connector_id}", update)
        assert_error(reply, 400)
        assert client.ok("GET", f"{ML}/connectors/{connector_id}") == before, update

    # the connector still works with its original key
    model_id = client.register(connector_id)
    assert client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()).status == 200


def test_put_connector_with_an_empty_or_non_object_body_is_400(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    assert_error(client.call("PUT", f"{ML}/connectors/{connector_id}", {}), 400)
    assert_error(client.call("PUT", f"{ML}/connectors/{connector_id}", [1, 2]), 400)


def test_delete_connector_is_409_while_a_model_uses_it(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy=False)

    assert_error(client.call("DELETE", f"{ML}/connectors/{connector_id}"), 409)
    assert client.ok("GET", f"{ML}/connectors/{connector_id}")["name"] == "OpenAI Chat Connector"

    assert client.ok("DELETE", f"{ML}/models/{model_id}")["result"] == "deleted"
    assert client.ok("DELETE", f"{ML}/connectors/{connector_id}")["result"] == "deleted"
    assert_error(client.call("GET", f"{ML}/connectors/{connector_id}"), 404)
    assert_error(client.call("DELETE", f"{ML}/connectors/{connector_id}"), 404)


def test_unknown_connector_id_is_404_on_every_route(client, fake):
    # ml-commons' words (ConnectorAccessControlHelper.getConnector) name the id once a connector
    # exists (tests/integration/test_mlcommons_fidelity.py has the words of every route)
    client.create_connector(openai_connector(fake))
    unknown = "AAAAAAAAAAAAAAAAAAAA"
    assert_error(client.call("GET", f"{ML}/connectors/{unknown}"), 404, unknown)
    assert_error(client.call("PUT", f"{ML}/connectors/{unknown}", {"description": "x"}), 404, unknown)
    assert_error(client.call("DELETE", f"{ML}/connectors/{unknown}"), 404, unknown)


# --- _search ---------------------------------------------------------------------------

def test_connector_search_match_all_total_and_paging(client, fake):
    ids = [client.create_connector(named_connector(fake, f"connector {i}")) for i in range(5)]

    everything = search(client, "connectors", {"query": {"match_all": {}}})
    assert everything["hits"]["total"]["value"] == 5
    assert hit_ids(everything) == set(ids)
    for hit in everything["hits"]["hits"]:
        assert hit["_source"]["name"].startswith("connector ")

    first = search(client, "connectors", {"query": {"match_all": {}}, "size": 2, "from": 0})
    second = search(client, "connectors", {"query": {"match_all": {}}, "size": 2, "from": 2})
    third = search(client, "connectors", {"query": {"match_all": {}}, "size": 2, "from": 4})
    for page in (first, second, third):
        assert page["hits"]["total"]["value"] == 5  # the total is of matches, not of the page
    assert [len(p["hits"]["hits"]) for p in (first, second, third)] == [2, 2, 1]
    assert hit_ids(first) | hit_ids(second) | hit_ids(third) == set(ids)
    assert not (hit_ids(first) & hit_ids(second))

    beyond = search(client, "connectors", {"query": {"match_all": {}}, "from": 10})
    assert beyond["hits"]["hits"] == [] and beyond["hits"]["total"]["value"] == 5

    # no body at all is a match_all too (ml-commons' curl examples send one, but GET works)
    assert client.ok("GET", f"{ML}/connectors/_search")["hits"]["total"]["value"] == 5


def test_search_hits_never_contain_a_credential_value(client, fake):
    client.create_connector(secret_connector(fake))
    inline = secret_connector(fake)
    client.ok("POST", f"{ML}/models/_register", {"name": "inline", "function_name": "remote",
                                                 "connector": inline})
    for kind in ("connectors", "models"):
        status, data = raw(client, "POST", f"{ML}/{kind}/_search", {"query": {"match_all": {}}})
        assert status == 200
        assert SECRET.encode() not in data, kind
        assert b"another-secret-value-123" not in data, kind
        assert json.loads(data)["hits"]["total"]["value"] == 1


def test_connector_search_term_match_ids_and_bool(client, fake):
    alpha = client.create_connector(named_connector(fake, "Alpha chat", model="gpt-alpha"))
    beta = client.create_connector(named_connector(fake, "Beta chat", model="gpt-beta"))
    gamma = client.create_connector(named_connector(fake, "Gamma embedding", model="gpt-alpha"))

    term = search(client, "connectors", {"query": {"term": {"name": "Beta chat"}}})
    assert hit_ids(term) == {beta} and term["hits"]["total"]["value"] == 1
    keyword = search(client, "connectors", {"query": {"term": {"name.keyword": {"value": "Alpha chat"}}}})
    assert hit_ids(keyword) == {alpha}
    nested = search(client, "connectors", {"query": {"term": {"parameters.model": "gpt-alpha"}}})
    assert hit_ids(nested) == {alpha, gamma}

    match = search(client, "connectors", {"query": {"match": {"name": "chat"}}})
    assert hit_ids(match) == {alpha, beta}
    assert hit_ids(search(client, "connectors", {"query": {"match": {"name": "EMBEDDING"}}})) == {gamma}

    ids = search(client, "connectors", {"query": {"ids": {"values": [alpha, gamma, "nope"]}}})
    assert hit_ids(ids) == {alpha, gamma} and ids["hits"]["total"]["value"] == 2

    boolean = search(client, "connectors", {"query": {"bool": {
        "must": [{"match": {"name": "chat"}}],
        "must_not": [{"term": {"parameters.model": "gpt-beta"}}]}}})
    assert hit_ids(boolean) == {alpha}
    should = search(client, "connectors", {"query": {"bool": {
        "should": [{"term": {"name": "Beta chat"}}, {"term": {"name": "Gamma embedding"}}]}}})
    assert hit_ids(should) == {beta, gamma}

    nothing = search(client, "connectors", {"query": {"term": {"name": "no such connector"}}})
    assert nothing["hits"]["total"]["value"] == 0 and nothing["hits"]["hits"] == []


@pytest.mark.parametrize("body", [
    {"query": {"no_such_query": {}}},
    {"query": {"match_all": {}, "term": {"name": "x"}}},
    {"query": "match_all"},
    {"query": {"ids": {"values": "not-a-list"}}},
    {"query": {"term": {"a": 1, "b": 2}}},
    {"size": -1},
    {"size": "ten"},
    {"from": -5},
    [1, 2, 3],
])
def test_bad_search_is_400(client, fake, body):
    client.create_connector(openai_connector(fake))
    for kind in ("connectors", "models"):
        assert_error(client.call("POST", f"{ML}/{kind}/_search", body), 400)


def test_model_search(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    deployed = client.register(connector_id, deploy=True, name="chat deployed")
    registered = client.register(connector_id, deploy=False, name="chat registered")

    everything = search(client, "models", {"query": {"match_all": {}}})
    assert everything["hits"]["total"]["value"] == 2
    assert hit_ids(everything) == {deployed, registered}
    by_id = {hit["_id"]: hit["_source"] for hit in everything["hits"]["hits"]}
    assert by_id[deployed]["connector_id"] == connector_id
    assert by_id[deployed]["model_state"] == "DEPLOYED"
    assert by_id[registered]["model_state"] == "REGISTERED"

    state = search(client, "models", {"query": {"term": {"model_state": "DEPLOYED"}}})
    assert hit_ids(state) == {deployed}
    paged = search(client, "models", {"query": {"match": {"name": "chat"}}, "size": 1, "from": 1})
    assert paged["hits"]["total"]["value"] == 2 and len(paged["hits"]["hits"]) == 1
    boolean = search(client, "models", {"query": {"bool": {
        "filter": [{"term": {"connector_id": connector_id}}],
        "must_not": [{"term": {"model_state": "DEPLOYED"}}]}}})
    assert hit_ids(boolean) == {registered}


# --- models ----------------------------------------------------------------------------

def test_register_with_deploy_is_deployed_and_without_is_registered(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    reply = client.ok("POST", f"{ML}/models/_register?deploy=true",
                      {"name": "openai gpt 3.5 turbo", "function_name": "remote",
                       "description": "openai model", "connector_id": connector_id})
    assert reply["status"] == "CREATED"
    assert ID_PATTERN.match(reply["model_id"]) and reply["task_id"]
    model = client.ok("GET", f"{ML}/models/{reply['model_id']}")
    assert model["model_state"] == "DEPLOYED"
    assert model["name"] == "openai gpt 3.5 turbo"
    assert model["connector_id"] == connector_id

    plain = client.ok("POST", f"{ML}/models/_register",
                      {"name": "second", "function_name": "remote", "connector_id": connector_id})
    assert client.ok("GET", f"{ML}/models/{plain['model_id']}")["model_state"] == "REGISTERED"
    explicit_false = client.ok("POST", f"{ML}/models/_register?deploy=false",
                               {"name": "third", "function_name": "remote", "connector_id": connector_id})
    assert client.ok("GET", f"{ML}/models/{explicit_false['model_id']}")["model_state"] == "REGISTERED"


def test_register_with_an_inline_connector(client, fake):
    body = {"name": "inline model", "function_name": "remote", "description": "inline",
            "connector": secret_connector(fake) | {"credential": {"openAI_key": fake.api_key}}}
    reply = client.ok("POST", f"{ML}/models/_register?deploy=true", body)
    model_id = reply["model_id"]

    status, data = raw(client, "GET", f"{ML}/models/{model_id}")
    assert status == 200 and fake.api_key.encode() not in data
    model = json.loads(data)
    assert model["model_state"] == "DEPLOYED"
    assert model["connector"]["name"] == "OpenAI Chat Connector"

    result = client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    output = result["inference_results"][0]["output"][0]
    assert output["name"] == "response"
    assert output["dataAsMap"]["choices"][0]["message"]["content"]
    assert fake.stats.requests[-1].headers["authorization"] == f"Bearer {fake.api_key}"

    # an invalid inline connector is a 400 and stores nothing
    bad = dict(body, connector={**openai_connector(fake), "protocol": "ftp"})
    assert_error(client.call("POST", f"{ML}/models/_register", bad), 400, "protocol")
    assert search(client, "models", {})["hits"]["total"]["value"] == 1


@pytest.mark.parametrize("both", [False, True], ids=["neither", "both"])
def test_register_needs_exactly_one_of_connector_id_and_connector(client, fake, both):
    connector_id = client.create_connector(openai_connector(fake))
    body: dict[str, Any] = {"name": "m", "function_name": "remote"}
    if both:
        body["connector_id"] = connector_id
        body["connector"] = openai_connector(fake)
    assert_error(client.call("POST", f"{ML}/models/_register", body), 400, "connector")
    assert search(client, "models", {})["hits"]["total"]["value"] == 0


@pytest.mark.parametrize("function_name", ["TEXT_EMBEDDING", "kmeans", "", 7])
def test_register_with_a_function_name_other_than_remote_is_400(client, fake, function_name):
    connector_id = client.create_connector(openai_connector(fake))
    reply = client.call("POST", f"{ML}/models/_register",
                        {"name": "m", "function_name": function_name, "connector_id": connector_id})
    assert_error(reply, 400, "function_name")
    # "REMOTE" in capitals, as ml-commons' own examples sometimes write it, is accepted
    client.ok("POST", f"{ML}/models/_register", {"name": "m", "function_name": "REMOTE",
                                                 "connector_id": connector_id})


def test_register_with_an_unknown_connector_id_is_404(client, fake):
    client.create_connector(openai_connector(fake))  # else ml-commons' words are "Failed to find connector"
    reply = client.call("POST", f"{ML}/models/_register?deploy=true",
                        {"name": "m", "function_name": "remote", "connector_id": "BBBBBBBBBBBBBBBBBBBB"})
    assert_error(reply, 404, "BBBBBBBBBBBBBBBBBBBB")
    assert search(client, "models", {})["hits"]["total"]["value"] == 0


def test_register_validates_the_rate_limiter(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    good = client.register(connector_id, rate_limiter={"limit": "4", "unit": "MINUTES"})
    assert client.ok("GET", f"{ML}/models/{good}")["rate_limiter"] == {"limit": "4", "unit": "MINUTES"}
    numeric = client.register(connector_id, rate_limiter={"limit": 2.5, "unit": "seconds"})
    assert client.ok("GET", f"{ML}/models/{numeric}")["rate_limiter"]["unit"] == "SECONDS"

    for limiter in ({"limit": -1, "unit": "SECONDS"}, {"limit": 0, "unit": "SECONDS"},
                    {"limit": "many", "unit": "SECONDS"}, {"limit": True, "unit": "SECONDS"},
                    {"limit": 5, "unit": "FORTNIGHTS"}, {"limit": 5}, {"unit": "SECONDS"},
                    "5/SECONDS", [5, "SECONDS"]):
        reply = client.call("POST", f"{ML}/models/_register",
                            {"name": "m", "function_name": "remote", "connector_id": connector_id,
                             "rate_limiter": limiter})
        assert_error(reply, 400, "rate_limiter")
    assert search(client, "models", {})["hits"]["total"]["value"] == 2


def test_deploy_undeploy_and_delete(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy=False)
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "REGISTERED"

    deployed = client.ok("POST", f"{ML}/models/{model_id}/_deploy")
    assert deployed["status"] == "COMPLETED" and deployed["task_id"]
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "DEPLOYED"

    assert_error(client.call("DELETE", f"{ML}/models/{model_id}"), 409)
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "DEPLOYED"

    client.ok("POST", f"{ML}/models/{model_id}/_undeploy")
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "REGISTERED"
    assert client.ok("DELETE", f"{ML}/models/{model_id}")["result"] == "deleted"
    assert_error(client.call("GET", f"{ML}/models/{model_id}"), 404)
    assert search(client, "models", {})["hits"]["total"]["value"] == 0


def test_unknown_model_id_is_404_on_every_route(client, fake):
    client.register(client.create_connector(openai_connector(fake)))
    unknown = "CCCCCCCCCCCCCCCCCCCC"
    for method, suffix, body in (("GET", "", None), ("DELETE", "", None), ("POST", "/_deploy", None),
                                 ("POST", "/_undeploy", None), ("POST", "/_predict", predict_body()),
                                 ("POST", "/_predict/stream", stream_body())):
        # ml-commons' words for each route: tests/integration/test_mlcommons_fidelity.py
        assert_error(client.call(method, f"{ML}/models/{unknown}{suffix}", body), 404, "find model")
    assert fake.stats.requests == []


def test_a_registered_model_is_deployed_by_its_first_predict(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy=False)
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "REGISTERED"

    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "DEPLOYED"
    # deployed now: it has to be undeployed before it can be deleted
    assert_error(client.call("DELETE", f"{ML}/models/{model_id}"), 409)


def test_an_undeployed_model_is_deployed_again_by_predict(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy=True)
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())  # warm any cache
    client.ok("POST", f"{ML}/models/{model_id}/_undeploy")
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "REGISTERED"
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "DEPLOYED"


def test_register_body_validation_names_the_field(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    base = {"name": "m", "function_name": "remote", "connector_id": connector_id}
    for body, field in (({k: v for k, v in base.items() if k != "name"}, "name"),
                        (base | {"name": ""}, "name"),
                        (base | {"description": 5}, "description"),
                        (base | {"connector_id": 17}, "connector_id"),
                        (base | {"model_group_id": []}, "model_group_id"),
                        (base | {"surprise": True}, "surprise")):
        assert_error(client.call("POST", f"{ML}/models/_register", body), 400, field)
    assert_error(client.call("POST", f"{ML}/models/_register?deploy=maybe", base), 400, "deploy")
    assert search(client, "models", {})["hits"]["total"]["value"] == 0


# --- tasks -----------------------------------------------------------------------------

def test_register_task_is_completed(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    reply = client.ok("POST", f"{ML}/models/_register",
                      {"name": "m", "function_name": "remote", "connector_id": connector_id})
    task = client.ok("GET", f"{ML}/tasks/{reply['task_id']}")
    assert task["model_id"] == reply["model_id"]
    assert task["task_type"] == "REGISTER_MODEL"
    assert task["state"] == "COMPLETED"

    deployed = client.ok("POST", f"{ML}/models/{reply['model_id']}/_deploy")
    deploy_task = client.ok("GET", f"{ML}/tasks/{deployed['task_id']}")
    assert deploy_task["task_type"] == "DEPLOY_MODEL" and deploy_task["state"] == "COMPLETED"
    assert deploy_task["model_id"] == reply["model_id"]


def test_register_with_deploy_task_is_completed(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    reply = client.ok("POST", f"{ML}/models/_register?deploy=true",
                      {"name": "m", "function_name": "remote", "connector_id": connector_id})
    task = client.ok("GET", f"{ML}/tasks/{reply['task_id']}")
    assert task["model_id"] == reply["model_id"] and task["state"] == "COMPLETED"


def test_unknown_task_is_404(client):
    assert_error(client.call("GET", f"{ML}/tasks/DDDDDDDDDDDDDDDDDDDD"), 404, "Failed to find task")


# --- cluster settings ------------------------------------------------------------------

def test_get_settings_and_defaults(client):
    body = client.ok("GET", "/_cluster/settings")
    assert body["persistent"] == {} and body["transient"] == {}
    defaults = flat(client.ok("GET", "/_cluster/settings?include_defaults=true")["defaults"])
    assert defaults[STREAM] is True
    assert defaults[PRIVATE] is False
    assert r"^https://api\.openai\.com/.*$" in defaults[TRUSTED]
    flat_body = client.ok("GET", "/_cluster/settings?include_defaults=true&flat_settings=true")
    assert flat_body["defaults"][STREAM] is True


def test_put_settings_with_dotted_and_nested_keys(client):
    reply = client.ok("PUT", "/_cluster/settings", {"persistent": {STREAM: False}})
    assert reply["acknowledged"] is True
    assert persistent(client) == {STREAM: False}

    nested = {"persistent": {"plugins": {"ml_commons": {"connector": {"private_ip_enabled": True},
                                                        "stream_enabled": True}}}}
    client.ok("PUT", "/_cluster/settings", nested)
    assert persistent(client) == {STREAM: True, PRIVATE: True}

    client.ok("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons": {
        "trusted_connector_endpoints_regex": [r"^https://api\.openai\.com/.*$"]}}})
    assert persistent(client)[TRUSTED] == [r"^https://api\.openai\.com/.*$"]
    flat_body = client.ok("GET", "/_cluster/settings?flat_settings=true")
    assert flat_body["persistent"][TRUSTED] == [r"^https://api\.openai\.com/.*$"]


@pytest.mark.parametrize("body", [
    {"persistent": {STREAM: False, "plugins.ml_commons.no_such_setting": 1}},
    {"persistent": {"plugins": {"ml_commons": {"stream_enabled": False, "typo_enabled": True}}}},
    {"persistent": {STREAM: False, PRIVATE: "maybe"}},
    {"persistent": {STREAM: False, TRUSTED: ["(unclosed"]}},
    {"persistent": {STREAM: False}, "transient": {"cluster.routing.nope": 1}},
    {"persistent": {STREAM: False}, "nonsense": {}},
])
def test_a_bad_settings_key_or_value_is_400_and_changes_nothing(client, fake, body):
    client.ok("PUT", "/_cluster/settings", {"persistent": {PRIVATE: True}})
    before = client.ok("GET", "/_cluster/settings")
    assert_error(client.call("PUT", "/_cluster/settings", body), 400)
    assert client.ok("GET", "/_cluster/settings") == before
    # streaming was not switched off by the rejected body
    model_id = client.model_for(openai_connector(fake))
    reply = client.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body())
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/event-stream")


def test_an_unknown_setting_names_the_key(client):
    reply = client.call("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.bogus": True}})
    assert_error(reply, 400, "plugins.ml_commons.bogus")


def test_stream_disabled_refuses_the_stream_route_but_not_predict(client, fake):
    model_id = client.model_for(openai_connector(fake))
    client.ok("PUT", "/_cluster/settings", {"persistent": {STREAM: False}})

    reply = client.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body())
    assert_error(reply, 400, "disabled")
    assert "stream" in reply.body["error"]["reason"].lower()
    assert fake.stats.requests == []  # refused before anything was sent

    result = client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert result["inference_results"][0]["status_code"] == 200
    assert len(fake.stats.requests) == 1

    # null resets to the default (enabled)
    client.ok("PUT", "/_cluster/settings", {"persistent": {STREAM: None}})
    assert STREAM not in persistent(client)
    reply = client.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body())
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    assert '"is_last":true' in reply.body


def test_the_string_false_also_disables_streaming(client, fake):
    model_id = client.model_for(openai_connector(fake))
    client.ok("PUT", "/_cluster/settings", {"persistent": {STREAM: "false"}})
    assert persistent(client)[STREAM] is False
    assert_error(client.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body()), 400,
                 "disabled")


def test_persistent_settings_and_resources_survive_a_restart(make_server, fake, tmp_path):
    data_dir = tmp_path / "restart"
    first = make_server(data_dir=data_dir)
    client = Client(first.url)
    client.ok("PUT", "/_cluster/settings", {"persistent": {STREAM: False, PRIVATE: True}})
    model_id = client.model_for(openai_connector(fake))
    first.stop()

    second = make_server(data_dir=data_dir)
    client = Client(second.url)
    assert persistent(client) == {STREAM: False, PRIVATE: True}
    assert_error(client.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body()), 400,
                 "disabled")
    assert client.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "DEPLOYED"
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())

    client.ok("PUT", "/_cluster/settings", {"persistent": {STREAM: None}})
    second.stop()
    third = make_server(data_dir=data_dir)
    assert persistent(Client(third.url)) == {PRIVATE: True}


def test_transient_settings_do_not_survive_a_restart(make_server, tmp_path):
    data_dir = tmp_path / "transient"
    first = make_server(data_dir=data_dir)
    Client(first.url).ok("PUT", "/_cluster/settings", {"transient": {STREAM: False}})
    assert flat(Client(first.url).ok("GET", "/_cluster/settings")["transient"]) == {STREAM: False}
    first.stop()
    second = make_server(data_dir=data_dir)
    body = Client(second.url).ok("GET", "/_cluster/settings")
    assert body["transient"] == {} and body["persistent"] == {}


# --- a failed request leaves stored state as it was -------------------------------------

def test_a_failed_connector_create_stores_nothing(client, fake):
    client.create_connector(openai_connector(fake))
    for body in ({**openai_connector(fake), "protocol": "ftp"},
                 {**openai_connector(fake), "actions": "none"},
                 {k: v for k, v in openai_connector(fake).items() if k != "name"},
                 [openai_connector(fake)]):
        assert_error(client.call("POST", f"{ML}/connectors/_create", body), 400)
    assert search(client, "connectors", {})["hits"]["total"]["value"] == 1


def test_a_failed_register_leaves_the_model_count_unchanged(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    client.register(connector_id)
    count = search(client, "models", {})["hits"]["total"]["value"]
    failures = [
        {"name": "m", "function_name": "remote", "connector_id": "EEEEEEEEEEEEEEEEEEEE"},
        {"name": "m", "function_name": "remote", "connector_id": connector_id,
         "rate_limiter": {"limit": 1, "unit": "WEEKS"}},
        {"name": "m", "function_name": "remote", "connector": {"name": "incomplete"}},
        {"function_name": "remote", "connector_id": connector_id},
    ]
    for body in failures:
        assert client.call("POST", f"{ML}/models/_register?deploy=true", body).status in (400, 404)
    assert search(client, "models", {})["hits"]["total"]["value"] == count
    assert search(client, "connectors", {})["hits"]["total"]["value"] == 1


def test_a_failed_delete_leaves_connector_and_model_as_they_were(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, deploy=True)
    connector_before = client.ok("GET", f"{ML}/connectors/{connector_id}")
    model_before = client.ok("GET", f"{ML}/models/{model_id}")
    assert client.call("DELETE", f"{ML}/connectors/{connector_id}").status == 409
    assert client.call("DELETE", f"{ML}/models/{model_id}").status == 409
    assert client.ok("GET", f"{ML}/connectors/{connector_id}") == connector_before
    assert client.ok("GET", f"{ML}/models/{model_id}") == model_before
    # and the model still answers
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
