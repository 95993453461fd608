"""Model groups as ml-commons 2.9+ has them, over the real HTTP API: the edges the client
journeys do not reach."""

from __future__ import annotations

import pytest

from ..support.clients import Client
from ..support.connectors import openai_connector

GROUPS = "/_plugins/_ml/model_groups"


def register(client: Client, **body) -> str:
    return client.ok("POST", f"{GROUPS}/_register", body)["model_group_id"]


def test_a_group_document_has_ml_commons_fields(client):
    group_id = register(client, name="g", description="d")
    doc = client.ok("GET", f"{GROUPS}/{group_id}")
    assert set(doc) == {"name", "latest_version", "description", "access", "created_time", "last_updated_time"}
    assert (doc["name"], doc["latest_version"], doc["access"]) == ("g", 0, "public")


def test_a_chosen_id_is_kept_and_cannot_be_taken_twice(client):
    assert register(client, name="a", model_group_id="my-group") == "my-group"
    again = client.call("POST", f"{GROUPS}/_register", {"name": "b", "model_group_id": "my-group"})
    assert again.status == 409


@pytest.mark.parametrize("body, reason", [
    ({}, "[name]"),
    ({"name": " "}, "[name]"),
    ({"name": "x", "access_mode": "secret"}, "[access_mode]"),
    ({"name": "x", "access_mode": "restricted"}, "backend roles"),
    ({"name": "x", "access_mode": "public", "backend_roles": ["ops"]}, "restricted access mode"),
    ({"name": "x", "add_all_backend_roles": True}, "needs an API key"),
    ({"name": "x", "owner": "me"}, "unknown field [owner]"),
], ids=["no-name", "blank-name", "bad-mode", "restricted-without-roles", "roles-not-restricted", "add-all",
        "unknown-field"])
def test_bad_groups_are_refused_and_nothing_is_stored(client, body, reason):
    reply = client.call("POST", f"{GROUPS}/_register", body)
    assert reply.status == 400 and reason in reply.body["error"]["reason"], reply.body
    assert client.ok("POST", f"{GROUPS}/_search", {})["hits"]["total"]["value"] == 0


def test_access_fields_are_recorded(client):
    group_id = register(client, name="r", access_mode="restricted", backend_roles=["ops"],
                        add_all_backend_roles=False)
    doc = client.ok("GET", f"{GROUPS}/{group_id}")
    assert (doc["access"], doc["backend_roles"]) == ("restricted", ["ops"])
    client.ok("PUT", f"{GROUPS}/{group_id}", {"access_mode": "private"})
    doc = client.ok("GET", f"{GROUPS}/{group_id}")
    assert doc["access"] == "private" and "backend_roles" not in doc


def test_renaming_to_a_taken_name_is_refused(client):
    first = register(client, name="one")
    register(client, name="two")
    reply = client.call("PUT", f"{GROUPS}/{first}", {"name": "two"})
    assert reply.status == 400 and "already being used" in reply.body["error"]["reason"]
    assert client.ok("GET", f"{GROUPS}/{first}")["name"] == "one"
    assert client.ok("PUT", f"{GROUPS}/{first}", {"name": "one", "description": "same name"}) == {"status": "Updated"}


def test_a_model_naming_a_missing_group_is_404_and_stores_nothing(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    reply = client.call("POST", "/_plugins/_ml/models/_register",
                        {"name": "m", "function_name": "remote", "connector_id": connector_id,
                         "model_group_id": "nope"})
    assert reply.status == 404
    assert client.ok("POST", "/_plugins/_ml/models/_search", {})["hits"]["total"]["value"] == 0


def test_a_failed_registration_creates_no_group(client):
    reply = client.call("POST", "/_plugins/_ml/models/_register",
                        {"name": "m", "function_name": "remote", "connector_id": "missing"})
    assert reply.status == 404
    assert client.ok("POST", f"{GROUPS}/_search", {})["hits"]["total"]["value"] == 0


def test_versions_count_up_within_a_group(client, fake):
    group_id = register(client, name="versions")
    connector_id = client.create_connector(openai_connector(fake))
    versions = []
    for _ in range(3):
        model_id = client.register(connector_id, deploy=False, model_group_id=group_id)
        versions.append(client.ok("GET", f"/_plugins/_ml/models/{model_id}")["model_version"])
    assert versions == ["1", "2", "3"]
    assert client.ok("GET", f"{GROUPS}/{group_id}")["latest_version"] == 3
    found = client.ok("POST", "/_plugins/_ml/models/_search", {"query": {"term": {"model_group_id": group_id}}})
    assert found["hits"]["total"]["value"] == 3


def test_unknown_group_routes_are_404(client):
    for method, body in (("GET", None), ("PUT", {"name": "x"}), ("DELETE", None)):
        assert client.call(method, f"{GROUPS}/nope", body).status == 404
