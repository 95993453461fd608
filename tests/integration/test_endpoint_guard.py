"""The endpoint guard: trusted-endpoint regexes and the private-address check.

These servers run as `mlstream serve` does without `--allow-private-endpoints`, and
without the loopback trust the other tests get; what a test needs it turns on
through the CLI's `--trusted-endpoint` (``trusted_endpoints=``) or through
`PUT /_cluster/settings`, as a user would.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST
from ..support.streams import SEED_MESSAGES, stream_body

ML = "/_plugins/_ml"
TRUSTED = "plugins.ml_commons.trusted_connector_endpoints_regex"
PRIVATE = "plugins.ml_commons.connector.private_ip_enabled"
# trusts the private hosts below, so only the private-address check can refuse them
PRIVATE_HOSTS_TRUST = r"^http://(127\.0\.0\.1|10\.0\.0\.1|\[::1\]|localhost|api\.provider\.test):\d+/.*$"
OPENAI_ONLY = [r"^https://api\.openai\.com/.*$"]


def seed_connector() -> dict[str, Any]:
    """The seed's connector body, verbatim (https://api.openai.com)."""
    return {
        "name": "OpenAI Chat Connector",
        "description": "The connector to public OpenAI model service for GPT 3.5",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": "api.openai.com", "model": "gpt-3.5-turbo"},
        "credential": {"openAI_key": "<your_token_id>"},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "https://${parameters.endpoint}/v1/chat/completions",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }


def connector_at(fake, host: str) -> dict[str, Any]:
    """The seed connector pointed at ``host`` on the fake's port."""
    body = openai_connector(fake)
    body["parameters"]["endpoint"] = f"{host}:{fake.port}"
    return body


def predict_body() -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES}}


def assert_refused(reply, *words: str) -> None:
    assert reply.status == 400, (reply.status, reply.body)
    assert reply.headers["Content-Type"].startswith("application/json")
    assert reply.body["status"] == 400
    reason = reply.body["error"]["reason"]
    for word in words:
        assert word.lower() in reason.lower(), (word, reason)


def put_settings(client: Client, values: dict[str, Any]) -> None:
    client.ok("PUT", "/_cluster/settings", {"persistent": values})


def connector_count(client: Client) -> int:
    return client.ok("POST", f"{ML}/connectors/_search", {})["hits"]["total"]["value"]


@pytest.fixture
def strict(make_server):
    """`mlstream serve` with no --trusted-endpoint and no --allow-private-endpoints."""
    return Client(make_server(trusted_endpoints=(), allow_private_endpoints=False).url)


@pytest.fixture
def trusting_private_hosts(make_server):
    """--trusted-endpoint for the private hosts, but private endpoints not allowed."""
    return Client(make_server(trusted_endpoints=(PRIVATE_HOSTS_TRUST,), allow_private_endpoints=False).url)


# --- create time -----------------------------------------------------------------------

def test_the_seed_connector_is_accepted_at_create_without_dns(strict, monkeypatch):
    looked_up: list[Any] = []
    real_getaddrinfo = socket.getaddrinfo

    def recording_getaddrinfo(host, *args, **kwargs):
        looked_up.append(host)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording_getaddrinfo)
    connector_id = strict.create_connector(seed_connector())
    assert len(connector_id) == 20
    assert not [host for host in looked_up if "openai" in str(host)], looked_up
    assert strict.ok("GET", f"{ML}/connectors/{connector_id}")["parameters"]["endpoint"] == "api.openai.com"


@pytest.mark.parametrize("url", [
    "https://evil.example.com/v1/chat/completions",
    "http://api.openai.com/v1/chat/completions",          # http, not https
    "https://api.openai.com.evil.example/v1/chat/completions",
    "https://${parameters.endpoint}/v1/chat/completions?x=1",  # endpoint filled below: not trusted
])
def test_a_url_matching_no_trusted_regex_is_refused_at_create(strict, url):
    body = seed_connector()
    body["parameters"]["endpoint"] = "evil.example.com"
    body["actions"][0]["url"] = url
    assert_refused(strict.call("POST", f"{ML}/connectors/_create", body),
                   "not matching the trusted connector endpoint regex")
    assert connector_count(strict) == 0


def test_the_fake_is_not_trusted_by_default(strict, fake):
    assert_refused(strict.call("POST", f"{ML}/connectors/_create", openai_connector(fake)),
                   "not matching the trusted connector endpoint regex")


def test_a_refusal_never_shows_the_credential(strict):
    body = seed_connector()
    body["credential"] = {"openAI_key": "sk-secret-in-query-0123456789"}
    body["actions"][0]["url"] = "https://evil.example.com/v1/chat?key=${credential.openAI_key}"
    reply = strict.call("POST", f"{ML}/connectors/_create", body)
    assert_refused(reply, "not matching")
    assert "sk-secret-in-query-0123456789" not in json.dumps(reply.body)


@pytest.mark.parametrize("host", ["127.0.0.1", "10.0.0.1", "[::1]", "localhost"])
def test_a_private_host_is_refused_at_create_even_when_trusted(trusting_private_hosts, fake, host):
    reply = trusting_private_hosts.call("POST", f"{ML}/connectors/_create", connector_at(fake, host))
    assert_refused(reply, "private")
    assert "not matching" not in reply.body["error"]["reason"]
    assert connector_count(trusting_private_hosts) == 0

    # an inline connector on register goes through the same guard
    reply = trusting_private_hosts.call("POST", f"{ML}/models/_register", {
        "name": "m", "function_name": "remote", "connector": connector_at(fake, host)})
    assert_refused(reply, "private")


@pytest.mark.parametrize("host", ["127.0.0.1", "10.0.0.1", "[::1]", "localhost"])
def test_private_ip_enabled_setting_allows_private_hosts(trusting_private_hosts, fake, host):
    put_settings(trusting_private_hosts, {PRIVATE: True})
    assert len(trusting_private_hosts.create_connector(connector_at(fake, host))) == 20


def test_an_update_to_a_private_host_is_refused(trusting_private_hosts, fake):
    client = trusting_private_hosts
    put_settings(client, {PRIVATE: True})
    connector_id = client.create_connector(connector_at(fake, "127.0.0.1"))
    put_settings(client, {PRIVATE: False})
    before = client.ok("GET", f"{ML}/connectors/{connector_id}")
    reply = client.call("PUT", f"{ML}/connectors/{connector_id}", {"parameters": {"endpoint": "10.0.0.1:80"}})
    assert_refused(reply, "private")
    assert client.ok("GET", f"{ML}/connectors/{connector_id}") == before


# --- call time -------------------------------------------------------------------------

def test_private_ip_setting_is_applied_at_each_call(trusting_private_hosts, fake):
    client = trusting_private_hosts
    put_settings(client, {PRIVATE: True})
    model_id = client.model_for(connector_at(fake, "127.0.0.1"))

    result = client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert result["inference_results"][0]["status_code"] == 200
    assert len(fake.stats.requests) == 1

    # off again: the connector already created is refused before anything is sent
    put_settings(client, {PRIVATE: False})
    assert_refused(client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()), "private")
    assert_refused(client.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body()), "private")
    assert len(fake.stats.requests) == 1

    # and on again (null would reset to the default, false; true allows)
    put_settings(client, {PRIVATE: True})
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert len(fake.stats.requests) == 2
    put_settings(client, {PRIVATE: None})
    assert_refused(client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()), "private")
    assert len(fake.stats.requests) == 2


def test_a_host_name_resolving_to_a_private_address_is_refused_at_call_time(
        trusting_private_hosts, fake, monkeypatch):
    # api.provider.test resolves (here) to loopback: a name is not judged at create, its
    # addresses are judged before each call
    real_getaddrinfo = socket.getaddrinfo

    def resolve_test_name(host, *args, **kwargs):
        return real_getaddrinfo("127.0.0.1" if host == "api.provider.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve_test_name)
    client = trusting_private_hosts
    model_id = client.model_for(connector_at(fake, "api.provider.test"))
    assert_refused(client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()), "private")
    assert fake.stats.requests == []

    put_settings(client, {PRIVATE: True})
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert len(fake.stats.requests) == 1


def test_trusted_regex_setting_is_applied_at_each_call(strict, fake):
    put_settings(strict, {TRUSTED: [LOOPBACK_TRUST], PRIVATE: True})
    model_id = strict.model_for(openai_connector(fake))
    strict.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert len(fake.stats.requests) == 1

    put_settings(strict, {TRUSTED: OPENAI_ONLY})
    assert_refused(strict.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()),
                   "not matching the trusted connector endpoint regex")
    assert_refused(strict.call("POST", f"{ML}/models/{model_id}/_predict/stream", stream_body()),
                   "not matching the trusted connector endpoint regex")
    assert len(fake.stats.requests) == 1

    # new connectors to the fake are refused at create too
    assert_refused(strict.call("POST", f"{ML}/connectors/_create", openai_connector(fake)),
                   "not matching the trusted connector endpoint regex")

    # back to the defaults (null): the fake is still not trusted, the seed's endpoint is
    put_settings(strict, {TRUSTED: None})
    assert_refused(strict.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()), "not matching")
    assert len(fake.stats.requests) == 1
    strict.create_connector(seed_connector())


def test_a_trusted_regex_setting_replaces_the_defaults(strict):
    put_settings(strict, {TRUSTED: [r"^https://my-gateway\.example\.com/.*$"]})
    assert_refused(strict.call("POST", f"{ML}/connectors/_create", seed_connector()), "not matching")
    body = seed_connector()
    body["parameters"]["endpoint"] = "my-gateway.example.com"
    strict.create_connector(body)


# --- --trusted-endpoint adds to the defaults ----------------------------------------------

def test_cli_trusted_endpoint_adds_to_the_defaults(make_server, fake):
    client = Client(make_server(trusted_endpoints=(LOOPBACK_TRUST,), allow_private_endpoints=True).url)
    client.create_connector(seed_connector())           # a default regex still applies
    model_id = client.model_for(openai_connector(fake))  # and the added one too
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert len(fake.stats.requests) == 1

    body = seed_connector()
    body["parameters"]["endpoint"] = "evil.example.com"
    assert_refused(client.call("POST", f"{ML}/connectors/_create", body), "not matching")


def test_cli_trusted_endpoint_does_not_allow_private_hosts(make_server, fake):
    client = Client(make_server(trusted_endpoints=(LOOPBACK_TRUST,), allow_private_endpoints=False).url)
    assert_refused(client.call("POST", f"{ML}/connectors/_create", openai_connector(fake)), "private")
    client.create_connector(seed_connector())


def test_allow_private_endpoints_flag_allows_private_hosts(make_server, fake):
    client = Client(make_server(trusted_endpoints=(PRIVATE_HOSTS_TRUST,), allow_private_endpoints=True).url)
    model_id = client.model_for(connector_at(fake, "127.0.0.1"))
    # the flag wins over the setting's default (false)
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert len(fake.stats.requests) == 1
