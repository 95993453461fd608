"""Tenants and access control over real sockets: two teams on one server, each seeing
only its own (docs/security.md, "Tenants").

    team-a  models [chat-a, router-a, dead-a, chat-a-private]   keys a-user, a-admin (tenant_admin)
    team-b  models [chat-b]                                     keys b-user, b-admin (tenant_admin)

Every model is on one fake OpenAI; each connector names its own upstream model, so the
fake's request log says which model was reached."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest
from opensearchpy import AuthorizationException, OpenSearch

from mlstream.access.keys import hash_key
from mlstream.store.sqlite import Record
from mlstream.testing.fake_batch import FakeOpenAIBatches
from mlstream.testing.fake_openai import FakeOpenAI
from tests.support.clients import Client, bearer, client_with
from tests.support.connectors import closed_port, openai_batch_connector, openai_connector
from tests.support.servers import MLSTREAM, clean_env
from tests.support.timeouts import HANG_GUARD


ML = "/_plugins/_ml"
MLS = "/_plugins/_mlstream"
CHAT = [{"role": "user", "content": "hello"}]


def upstream_models(fake: FakeOpenAI) -> list[str]:
    """The upstream model of every request the fake received."""
    return [r.body.get("model") for r in fake.stats.requests if isinstance(r.body, dict)]


@dataclass
class Teams:
    server: Any
    admin: Client
    models: dict[str, str] = field(default_factory=dict)   # name -> id
    clients: dict[str, Client] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    group_a: str = ""

    def key(self, name: str, **fields: Any) -> Client:
        reply = self.admin.call("POST", f"{MLS}/keys", {"name": name, **fields})
        assert reply.status == 200, reply.body
        self.secrets[name] = reply.body["key"]
        self.clients[name] = client_with(self.server.url, bearer(reply.body["key"]))
        return self.clients[name]

    def model(self, name: str, connector: dict[str, Any], **extra: Any) -> str:
        connector_id = self.admin.ok("POST", f"{ML}/connectors/_create", connector)["connector_id"]
        body = {"name": name, "function_name": "remote", "connector_id": connector_id, **extra}
        self.models[name] = self.admin.ok("POST", f"{ML}/models/_register?deploy=true", body)["model_id"]
        return self.models[name]


def two_teams(server: Any, fake: FakeOpenAI, batches: FakeOpenAIBatches | None = None) -> Teams:
    open_client = Client(server.url)
    first = open_client.call("POST", f"{MLS}/keys", {"name": "ops", "role": "admin"})
    assert first.status == 200, first.body
    teams = Teams(server, client_with(server.url, bearer(first.body["key"])))
    teams.model("chat-a", openai_connector(fake, model="up-a"))
    teams.model("chat-b", openai_connector(fake, model="up-b"))
    dead = openai_connector(fake, model="up-dead")
    dead["parameters"]["endpoint"] = closed_port()
    teams.model("dead-a", dead)
    teams.models["router-a"] = teams.admin.ok("POST", f"{ML}/models/_register?deploy=true", {
        "name": "router-a", "function_name": "remote",
        "routing": {"targets": [{"model_id": teams.models["dead-a"]}], "fallbacks": [teams.models["chat-b"]]}})[
        "model_id"]
    if batches is not None:
        teams.model("batch-a", openai_batch_connector(batches))
    for name, models in (("team-a", ["chat-a", "router-a", "dead-a", "chat-a-private", "batch-a"]),
                         ("team-b", ["chat-b"])):
        assert teams.admin.call("POST", f"{MLS}/tenants", {"name": name, "models": models}).status == 200
    teams.key("a-user", tenant="team-a", backend_roles=["analysts"])
    teams.key("a-admin", tenant="team-a", role="tenant_admin", backend_roles=["leads"])
    teams.key("b-user", tenant="team-b", backend_roles=["analysts"])
    teams.key("b-admin", tenant="team-b", role="tenant_admin")
    # a-admin's private group, and a model in it: team-a allows it, the group lets only a-admin in
    group = teams.clients["a-admin"].call("POST", f"{ML}/model_groups/_register",
                                          {"name": "a-private", "access_mode": "private"})
    assert group.status == 200, group.body
    teams.group_a = group.body["model_group_id"]
    teams.model("chat-a-private", openai_connector(fake, model="up-private"), model_group_id=teams.group_a)
    return teams


@pytest.fixture
def teams(make_server, fake) -> Teams:
    return two_teams(make_server(), fake)


def chat(client: Client, model: str, **extra: Any) -> Any:
    return client.call("POST", "/v1/chat/completions", {"model": model, "messages": CHAT, **extra})


def predict(client: Client, model_id: str) -> Any:
    return client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": CHAT}})


# --- cross-tenant reads and writes: every resource type ---------------------------------------------

@dataclass(frozen=True)
class Attempt:
    """b's key reaching for something of team-a's: the status, and the error type, it gets."""

    caller: str
    method: str
    path: str                      # {chat-a}, {group}, {response}, {task}: filled in
    body: Any = None
    status: int = 404
    error: str | None = None       # the error body's type, when the front names one


CROSS_TENANT = [
    Attempt("b-user", "GET", ML + "/models/{chat-a}", status=403, error="security_exception"),
    Attempt("b-user", "POST", ML + "/models/{chat-a}/_predict", {"parameters": {"messages": CHAT}}, 403,
            "security_exception"),
    Attempt("b-user", "POST", ML + "/models/{chat-a}/_predict/stream", {"parameters": {"messages": CHAT}}, 403,
            "security_exception"),
    Attempt("b-user", "POST", ML + "/models/{chat-a}/_batch_predict", {"parameters": {}}, 403, "security_exception"),
    Attempt("b-user", "POST", "/v1/chat/completions", {"model": "chat-a", "messages": CHAT}, 404, "invalid_request_error"),
    Attempt("b-user", "POST", "/v1/chat/completions", {"model": "{chat-a}", "messages": CHAT}, 404,
            "invalid_request_error"),
    Attempt("b-user", "POST", "/v1/chat/completions", {"model": "chat-a", "messages": CHAT, "stream": True}, 404,
            "invalid_request_error"),
    Attempt("b-user", "POST", "/v1/embeddings", {"model": "chat-a", "input": "x"}, 404, "invalid_request_error"),
    Attempt("b-user", "GET", "/v1/models/chat-a", status=404, error="invalid_request_error"),
    Attempt("b-user", "POST", "/v1/messages", {"model": "chat-a", "max_tokens": 5, "messages": CHAT}, 404,
            "not_found_error"),
    Attempt("b-user", "POST", "/v1/responses", {"model": "chat-a", "input": "hi"}, 404, "invalid_request_error"),
    Attempt("b-user", "GET", "/v1/responses/{response}", status=404, error="invalid_request_error"),
    Attempt("b-admin", "GET", "/v1/responses/{response}", status=404, error="invalid_request_error"),
    Attempt("b-user", "DELETE", "/v1/responses/{response}", status=404, error="invalid_request_error"),
    Attempt("b-user", "POST", "/v1/responses", {"model": "chat-b", "input": "hi", "previous_response_id": "{response}"},
            400, "invalid_request_error"),
    Attempt("b-user", "GET", ML + "/model_groups/{group}", status=403, error="security_exception"),
    Attempt("b-admin", "PUT", ML + "/model_groups/{group}", {"description": "mine now"}, 403, "security_exception"),
    Attempt("b-admin", "PUT", ML + "/model_groups/{group}", {"access_mode": "public"}, 403, "security_exception"),
    Attempt("b-admin", "DELETE", ML + "/model_groups/{group}", status=403, error="security_exception"),
    Attempt("a-user", "GET", ML + "/model_groups/{group}", status=403, error="security_exception"),
    Attempt("b-user", "GET", ML + "/tasks/{task}", status=404, error="resource_not_found_exception"),
    Attempt("b-admin", "POST", ML + "/tasks/{task}/_cancel", status=404, error="resource_not_found_exception"),
    Attempt("b-user", "DELETE", ML + "/tasks/{task}", status=404, error="resource_not_found_exception"),
    Attempt("b-admin", "GET", MLS + "/keys/a-user", status=404),
    Attempt("b-admin", "PUT", MLS + "/keys/a-user", {"rpm": 1}, 404),
    Attempt("b-admin", "DELETE", MLS + "/keys/a-user", status=404),
    Attempt("b-admin", "POST", MLS + "/keys", {"name": "spy", "tenant": "team-a"}, 403),
    Attempt("b-admin", "POST", MLS + "/keys", {"name": "boss", "role": "admin"}, 403),
    Attempt("a-admin", "PUT", MLS + "/keys/a-user", {"tenant": "team-b"}, 403),
    Attempt("b-user", "GET", MLS + "/usage?tenant=team-a", status=403),
    Attempt("b-admin", "GET", MLS + "/usage/records?tenant=team-a", status=403),
    Attempt("b-admin", "POST", MLS + "/tenants", {"name": "team-c"}, 403),
    Attempt("b-admin", "DELETE", MLS + "/tenants/team-a", status=403),
    Attempt("b-user", "POST", MLS + "/keys", {"name": "x"}, 403),
]


@pytest.fixture
def resources(make_server, fake) -> tuple[Teams, dict[str, str]]:
    """Two teams, and one of everything team-a's keys make: a stored Response, a batch task."""
    with FakeOpenAIBatches() as batches:
        teams = two_teams(make_server(), fake, batches)
        a_user = teams.clients["a-user"]
        response = a_user.call("POST", "/v1/responses", {"model": "chat-a", "input": "hi"})
        assert response.status == 200, response.body
        task = a_user.call("POST", f"{ML}/models/{teams.models['batch-a']}/_batch_predict", {"parameters": {}})
        assert task.status == 200, task.body
        assert teams.server.app.responses_kept.flush()
        yield teams, {"response": response.body["id"], "task": task.body["task_id"], "group": teams.group_a,
                      **{name: model_id for name, model_id in teams.models.items()}}


def _filled(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, real in names.items():
            value = value.replace("{" + name + "}", real)
        return value
    if isinstance(value, dict):
        return {k: _filled(v, names) for k, v in value.items()}
    return value


def _error_type(body: Any) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("type") if isinstance(error, dict) else None


def test_cross_tenant_reads_and_writes_of_every_resource_are_refused_and_change_nothing(resources):
    teams, names = resources
    before = {"keys": teams.admin.ok("GET", f"{MLS}/keys"), "group": teams.admin.ok("GET", f"{ML}/model_groups/{names['group']}"),
              "tenants": teams.admin.ok("GET", f"{MLS}/tenants")}
    failures = []
    for attempt in CROSS_TENANT:
        reply = teams.clients[attempt.caller].call(attempt.method, _filled(attempt.path, names),
                                                   _filled(attempt.body, names))
        body = reply.body if isinstance(reply.body, dict) else {}
        if reply.status != attempt.status or (attempt.error and _error_type(body) != attempt.error):
            failures.append((attempt, reply.status, reply.body))
    assert failures == []
    after = {"keys": teams.admin.ok("GET", f"{MLS}/keys"), "group": teams.admin.ok("GET", f"{ML}/model_groups/{names['group']}"),
             "tenants": teams.admin.ok("GET", f"{MLS}/tenants")}
    assert after == before
    # ... and each of them is there for its owner
    a_user, a_admin = teams.clients["a-user"], teams.clients["a-admin"]
    assert a_user.ok("GET", f"/v1/responses/{names['response']}")["id"] == names["response"]
    assert a_admin.ok("GET", f"/v1/responses/{names['response']}")["id"] == names["response"]  # its tenant's
    assert a_user.call("GET", f"{ML}/tasks/{names['task']}").status == 200
    assert a_admin.ok("GET", f"{MLS}/keys/a-user")["tenant"] == "team-a"
    assert a_admin.ok("GET", f"{ML}/model_groups/{names['group']}")["owner"]["name"] == "a-admin"


def test_another_tenants_model_answers_exactly_like_an_unknown_one(teams):
    b_user = teams.clients["b-user"]
    for front, body, unknown_body in (
            ("/v1/chat/completions", {"model": "chat-a", "messages": CHAT}, {"model": "no-such", "messages": CHAT}),
            ("/v1/messages", {"model": "chat-a", "max_tokens": 5, "messages": CHAT},
             {"model": "no-such", "max_tokens": 5, "messages": CHAT})):
        denied, unknown = b_user.call("POST", front, body), b_user.call("POST", front, unknown_body)
        assert denied.status == unknown.status == 404
        assert json.dumps(denied.body).replace("chat-a", "X") == json.dumps(unknown.body).replace("no-such", "X")
    # through the real clients
    sdk = openai.OpenAI(base_url=teams.server.url + "/v1", api_key=teams.secrets["b-user"], max_retries=0)
    with pytest.raises(openai.NotFoundError) as raised:
        sdk.chat.completions.create(model="chat-a", messages=CHAT)
    assert raised.value.body["code"] == "model_not_found"
    claude = anthropic.Anthropic(base_url=teams.server.url, api_key=teams.secrets["b-user"], max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="chat-a", max_tokens=5, messages=CHAT)
    assert sdk.chat.completions.create(model="chat-b", messages=CHAT).choices[0].message.content
    # opensearch-py on the ml-commons routes: ml-commons' 403
    search = OpenSearch(hosts=[teams.server.url], http_auth=("b-user", teams.secrets["b-user"]), timeout=20)
    with pytest.raises(AuthorizationException) as denied_403:
        search.transport.perform_request("GET", f"{ML}/models/{teams.models['chat-a']}")
    assert "doesn't have privilege" in str(denied_403.value.info)
    assert search.transport.perform_request("GET", f"{ML}/models/{teams.models['chat-b']}")["name"] == "chat-b"


# --- listing equals enforcement ---------------------------------------------------------------------

def test_what_every_listing_shows_is_exactly_what_predict_allows(teams, fake):
    every = dict(teams.models)
    for caller in ("ops", "a-user", "a-admin", "b-user", "b-admin"):
        client = teams.admin if caller == "ops" else teams.clients[caller]
        # allowed: predict gets past access control (a dead model's 502 is still allowed)
        allowed = {model_id for model_id in every.values() if predict(client, model_id).status not in (403, 404)}
        listed = {entry["id"] for entry in client.ok("GET", "/v1/models")["data"]}
        searched = client.ok("POST", f"{ML}/models/_search", {"query": {"match_all": {}}, "size": 100})["hits"]
        gettable = {model_id for model_id in every.values()
                    if client.call("GET", f"{ML}/models/{model_id}").status == 200}
        assert listed == {hit["_id"] for hit in searched["hits"]} == gettable == allowed, caller
        assert searched["total"]["value"] == len(allowed), caller
    names = {model_id: name for name, model_id in every.items()}
    assert {names[e["id"]] for e in teams.clients["b-user"].ok("GET", "/v1/models")["data"]} == {"chat-b"}
    assert {names[e["id"]] for e in teams.clients["a-user"].ok("GET", "/v1/models")["data"]} == {
        "chat-a", "router-a", "dead-a"}  # not chat-a-private: a-admin's private group
    assert {names[e["id"]] for e in teams.clients["a-admin"].ok("GET", "/v1/models")["data"]} == {
        "chat-a", "router-a", "dead-a", "chat-a-private"}
    assert len(teams.admin.ok("GET", "/v1/models")["data"]) == len(every)
    groups = teams.clients["b-user"].ok("POST", f"{ML}/model_groups/_search", {"query": {"match_all": {}}})["hits"]
    assert teams.group_a not in {hit["_id"] for hit in groups["hits"]}
    assert groups["total"]["value"] == len(groups["hits"])


def test_a_key_narrows_its_tenant_and_never_widens_it(teams):
    narrow = teams.key("a-narrow", tenant="team-a", models=["chat-a"])
    wide = teams.key("a-wide", tenant="team-a", models=["chat-a", "chat-b"])
    assert chat(narrow, "chat-a").status == 200
    assert chat(narrow, "dead-a").status == 404
    assert chat(wide, "chat-b").status == 404  # team-a does not allow it, whatever the key says
    assert teams.models["chat-b"] not in [e["id"] for e in wide.ok("GET", "/v1/models")["data"]]


def test_restricted_group_lets_in_whoever_shares_a_backend_role(teams, fake):
    a_admin = teams.clients["a-admin"]
    a_admin.ok("PUT", f"{ML}/model_groups/{teams.group_a}", {"access_mode": "restricted",
                                                             "backend_roles": ["leads"]})
    a_user = teams.clients["a-user"]
    assert predict(a_user, teams.models["chat-a-private"]).status == 403
    # a-user's role is analysts: "You don't have the backend roles specified" is a-admin's own check
    refused = a_admin.call("PUT", f"{ML}/model_groups/{teams.group_a}", {"backend_roles": ["analysts"]})
    assert refused.status == 400 and "backend roles specified" in refused.body["error"]["reason"]
    teams.admin.ok("PUT", f"{ML}/model_groups/{teams.group_a}", {"backend_roles": ["leads", "analysts"]})
    assert predict(a_user, teams.models["chat-a-private"]).status == 200
    # only the owner or an admin changes access fields
    denied = a_user.call("PUT", f"{ML}/model_groups/{teams.group_a}", {"access_mode": "public"})
    assert denied.status == 403
    # add_all_backend_roles takes the caller's own
    made = a_admin.ok("POST", f"{ML}/model_groups/_register", {"name": "leads-only", "add_all_backend_roles": True})
    group = a_admin.ok("GET", f"{ML}/model_groups/{made['model_group_id']}")
    assert (group["access"], group["backend_roles"]) == ("restricted", ["leads"])


# --- routers ----------------------------------------------------------------------------------------

def test_a_router_never_reaches_a_fallback_outside_the_callers_models(teams, fake):
    fake.stats.reset()
    reply = predict(teams.clients["a-user"], teams.models["router-a"])
    assert reply.status in (404, 502, 503), reply.body  # its one target is down; the fallback is not team-a's
    assert "up-b" not in upstream_models(fake)
    # the admin may use every model: the same router falls back to chat-b
    served = predict(teams.admin, teams.models["router-a"])
    assert served.status == 200, served.body
    assert "up-b" in upstream_models(fake)


# --- keys, tenants and their cache ------------------------------------------------------------------

def test_moving_a_key_to_another_tenant_or_deleting_a_tenant_takes_effect_at_the_next_request(teams):
    a_user = teams.clients["a-user"]
    assert chat(a_user, "chat-a").status == 200
    teams.admin.ok("PUT", f"{MLS}/keys/a-user", {"tenant": "team-b"})
    assert chat(a_user, "chat-a").status == 404
    assert chat(a_user, "chat-b").status == 200
    teams.admin.ok("PUT", f"{MLS}/tenants/team-b", {"models": []})
    assert chat(a_user, "chat-b").status == 404
    deleted = teams.admin.ok("DELETE", f"{MLS}/tenants/team-b")
    assert deleted["keys_revoked"] == 3
    assert chat(a_user, "chat-b").status == 401
    assert teams.clients["b-admin"].call("GET", f"{MLS}/keys").status == 401
    assert chat(teams.clients["a-admin"], "chat-a").status == 200


def test_tenant_routes_validate_and_the_default_tenant_stays(teams):
    admin = teams.admin
    assert admin.call("POST", f"{MLS}/tenants", {"name": "team-a"}).status == 409
    assert admin.call("POST", f"{MLS}/tenants", {"name": "bad name"}).status == 400
    assert admin.call("POST", f"{MLS}/tenants", {"name": "t", "models": "chat-a"}).status == 400
    assert admin.call("POST", f"{MLS}/tenants", {"name": "t", "colour": "red"}).status == 400
    assert admin.call("DELETE", f"{MLS}/tenants/default").status == 400
    assert admin.call("POST", f"{MLS}/keys", {"name": "z", "tenant": "nowhere"}).status == 400
    listed = [t["name"] for t in admin.ok("GET", f"{MLS}/tenants")["tenants"]]
    assert listed == ["default", "team-a", "team-b"]
    one = admin.ok("GET", f"{MLS}/tenants/team-a")
    assert one["keys"] == 2 and one["spend"]["cost"] == 0
    # a tenant_admin lists its own tenant's keys only
    assert {k["name"] for k in teams.clients["a-admin"].ok("GET", f"{MLS}/keys")["keys"]} == {"a-user", "a-admin"}
    made = teams.clients["a-admin"].ok("POST", f"{MLS}/keys", {"name": "a-new"})
    assert made["tenant"] == "team-a" and made["role"] == "user"


def test_a_tenants_rpm_is_shared_by_its_keys_and_the_refusal_names_the_scope(teams):
    teams.admin.ok("PUT", f"{MLS}/tenants/team-a", {"rpm": 2})
    a_user, a_admin = teams.clients["a-user"], teams.clients["a-admin"]
    first = chat(a_user, "chat-a")
    assert first.status == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert chat(a_admin, "chat-a").status == 200
    refused = chat(a_user, "chat-a")
    assert refused.status == 429 and refused.body["error"]["scope"] == "tenant"
    assert "tenant [team-a]" in refused.body["error"]["message"] and "Retry-After" in refused.headers
    assert chat(teams.clients["b-user"], "chat-b").status == 200  # another tenant goes on


def test_usage_carries_the_tenant_and_a_tenant_admin_sees_its_tenants(teams):
    assert chat(teams.clients["a-user"], "chat-a").status == 200
    assert chat(teams.clients["b-user"], "chat-b").status == 200
    rows = teams.admin.ok("GET", f"{MLS}/usage?group_by=tenant")["rows"]
    assert {row["tenant"]: row["requests"] for row in rows} == {"team-a": 1, "team-b": 1}
    mine = teams.clients["a-admin"].ok("GET", f"{MLS}/usage/records")["records"]
    assert [(r["key"], r["tenant"]) for r in mine] == [("a-user", "team-a")]
    assert teams.clients["b-user"].ok("GET", f"{MLS}/usage")["totals"]["requests"] == 1



# --- upgrade: a single-team deployment from before tenants ------------------------------------------

def test_keys_and_groups_stored_before_tenants_work_unchanged(make_server, fake):
    server = make_server()
    open_client = Client(server.url)
    # as a release before tenants left them: a group with access fields and no owner, keys
    # without tenant, backend roles or models
    group = open_client.ok("POST", f"{ML}/model_groups/_register", {"name": "old", "access_mode": "private"})
    model_id = open_client.register(open_client.create_connector(openai_connector(fake)),
                                    model_group_id=group["model_group_id"])
    secrets_by_role = {}
    for role in ("admin", "user"):
        secret = f"mls_old-{role}-secret-000000000000000000000000"
        server.app.store.put("apikey", Record(f"old{role}", {"name": f"old-{role}", "role": role,
                                                             "created_time": 1}, hash_key(secret)))
        secrets_by_role[role] = secret
    user = client_with(server.url, bearer(secrets_by_role["user"]))
    admin = client_with(server.url, bearer(secrets_by_role["admin"]))
    assert predict(user, model_id).status == 200
    assert chat(user, model_id).status == 200
    assert [e["id"] for e in user.ok("GET", "/v1/models")["data"]] == [model_id]
    assert user.ok("GET", f"{ML}/model_groups/{group['model_group_id']}")["access"] == "private"
    listed = admin.ok("GET", f"{MLS}/keys")["keys"]
    assert {(k["name"], k["tenant"], k["models"]) for k in listed} == {("old-admin", "default", None),
                                                                       ("old-user", "default", None)}
    assert chat(user, model_id).headers.get("x-ratelimit-limit-requests") is None  # no limit, no headers
    records = admin.ok("GET", f"{MLS}/usage/records")["records"]
    assert {r["tenant"] for r in records} == {"default"}


def test_the_tenants_command(tmp_path):
    data = str(tmp_path / "data")

    def cli(*args: str) -> str:
        done = subprocess.run([*MLSTREAM, *args, "--data-dir", data], capture_output=True, text=True,
                              timeout=HANG_GUARD, env=clean_env())
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "created tenant team-a (models chat-a,chat-b, budget 5/day)" in cli(
        "tenants", "create", "team-a", "--models", "chat-a,chat-b", "--budget", "5", "--budget-period", "day")
    cli("keys", "create", "--role", "tenant_admin", "--name", "lead", "--tenant", "team-a", "--backend-roles", "x,y")
    cli("keys", "create", "--role", "user", "--name", "app")
    rows = [line.split() for line in cli("keys", "list", "--tenant", "team-a").splitlines()[1:]]
    assert [row[1:4] for row in rows] == [["tenant_admin", "lead", "team-a"]]
    assert "updated tenant team-a (models all, budget 5/day, rpm 9)" in cli(
        "tenants", "update", "team-a", "--all-models", "--rpm", "9")
    assert [line.split()[0] for line in cli("tenants", "list").splitlines()[1:]] == ["default", "team-a"]
    assert "revoked its 1 keys" in cli("tenants", "delete", "team-a")
    assert [line.split()[2] for line in cli("keys", "list").splitlines()[1:]] == ["app"]
    refused = subprocess.run([*MLSTREAM, "keys", "create", "--role", "user", "--tenant", "nowhere", "--data-dir", data],
                             capture_output=True, text=True, timeout=HANG_GUARD, env=clean_env())
    assert refused.returncode == 2 and "no tenant named [nowhere]" in refused.stderr


def test_a_refused_call_deploys_nothing(teams, fake):
    connector_id = teams.admin.ok("POST", f"{ML}/connectors/_create", openai_connector(fake))["connector_id"]
    cold = teams.admin.ok("POST", f"{ML}/models/_register", {"name": "cold", "function_name": "remote",
                                                              "connector_id": connector_id})["model_id"]
    b_user = teams.clients["b-user"]
    assert predict(b_user, cold).status == 403
    assert chat(b_user, cold).status == 404
    assert teams.admin.ok("GET", f"{ML}/models/{cold}")["model_state"] == "REGISTERED"
    assert predict(teams.admin, cold).status == 200  # the admin's call deploys it, as ml-commons does
    assert teams.admin.ok("GET", f"{ML}/models/{cold}")["model_state"] == "DEPLOYED"
