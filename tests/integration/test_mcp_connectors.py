"""MCP connectors: created like any connector (credential sealed, endpoint guard), their
tools listed from a real MCP server (the SDK's own, streamable HTTP) through
``GET /_plugins/_ml/connectors/<id>/tools``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.clients import Client
from tests.support.connectors import openai_connector
from tests.support.mcp_upstream import Upstream, upstreams

ML = "/_plugins/_ml"


@pytest.fixture
def upstream() -> Any:
    yield from upstreams()


def mcp_connector(url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "weather tools", "description": "an MCP server", "version": 1,
            "protocol": "mcp_streamable_http", "url": url,
            "credential": {"mcp_token": "tok-secret-123"},
            "headers": {"Authorization": "Bearer ${credential.mcp_token}"}, **extra}


def test_an_mcp_connectors_tools_come_from_its_server(server, upstream: Upstream) -> None:
    client = Client(server.url)
    connector_id = client.create_connector(mcp_connector(upstream.url))
    stored = client.ok("GET", f"{ML}/connectors/{connector_id}")
    assert stored["protocol"] == "mcp_streamable_http" and stored["url"] == upstream.url
    assert stored["headers"] == {"Authorization": "Bearer ${credential.mcp_token}"} and "actions" not in stored
    assert "tok-secret-123" not in str(stored)
    tools = client.ok("GET", f"{ML}/connectors/{connector_id}/tools")["tools"]
    assert [(t["name"], t["type"], t["description"]) for t in tools] == [
        ("forecast", "McpStreamableHttpTool", "Tomorrow's weather in a city."),
        ("add", "McpStreamableHttpTool", "Add two numbers.")]
    assert tools[0]["input_schema"]["properties"]["city"]["type"] == "string"
    # the credential went in the header it was named in, and nowhere else
    assert {h.get("authorization") for h in upstream.seen if h.get("authorization")} == {"Bearer tok-secret-123"}


@pytest.mark.parametrize("body, words", [
    ({"url": ""}, "MCP Connector url is blank"),
    ({"url": "ftp://x/mcp"}, "http or https"),
    ({"actions": [{"action_type": "predict", "method": "POST", "url": "http://x"}]}, "has no [actions]"),
    ({"headers": {"Authorization": "Bearer ${credential.missing}"}}, "credential.missing"),
    ({"headers": {"X": 3}}, "headers.X"),
    ({"protocol": "mcp_sse"}, "protocol"),
])
def test_a_bad_mcp_connector_is_a_400(server, upstream: Upstream, body: dict, words: str) -> None:
    reply = Client(server.url).call("POST", f"{ML}/connectors/_create", {**mcp_connector(upstream.url), **body})
    assert reply.status == 400 and words in reply.body["error"]["reason"], reply.body


def test_an_mcp_connector_passes_the_endpoint_guard(make_server, upstream: Upstream) -> None:
    guarded = make_server(allow_private_endpoints=False, trusted_endpoints=(r"^https://api\.example\.com/.*$",))
    reply = Client(guarded.url).call("POST", f"{ML}/connectors/_create", mcp_connector(upstream.url))
    assert reply.status == 400, reply.body
    # an http connector must not take an MCP connector's fields
    http_body = {"name": "x", "protocol": "http", "url": "http://127.0.0.1:1/mcp",
                 "actions": [{"action_type": "predict", "method": "POST", "url": "http://127.0.0.1:1/x"}]}
    refused = Client(guarded.url).call("POST", f"{ML}/connectors/_create", http_body)
    assert refused.status == 400 and "[url] is a field of MCP connectors" in refused.body["error"]["reason"]


def test_the_tools_of_a_connector_that_is_not_mcp_or_is_gone(server, fake) -> None:
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(fake))
    reply = client.call("GET", f"{ML}/connectors/{connector_id}/tools")
    assert reply.status == 400 and "not an MCP one" in reply.body["error"]["reason"]
    assert client.call("GET", f"{ML}/connectors/nope/tools").status == 404


def test_a_flow_agent_calls_an_mcp_connectors_tools(server, upstream: Upstream) -> None:
    client = Client(server.url)
    connector_id = client.create_connector(mcp_connector(upstream.url))
    connectors = json.dumps([{"mcp_connector_id": connector_id, "tool_filters": ["^fore"]}])
    agent_id = client.ok("POST", f"{ML}/agents/_register", {
        "name": "weather", "type": "flow", "parameters": {"mcp_connectors": connectors},
        "tools": [{"type": "McpStreamableHttpTool", "name": "forecast",
                   "parameters": {"input": '{"city": "${parameters.city}"}'}}]})["agent_id"]
    answer = client.ok("POST", f"{ML}/agents/{agent_id}/_execute", {"parameters": {"city": "Paris"}})
    result = answer["inference_results"][0]["output"]
    assert [tensor["name"] for tensor in result] == ["response"]
    assert json.loads(result[0]["result"]) == [{"type": "text", "text": "Sunny in Paris"}]
    # a tool the filters leave out is not available: a 400 before anything runs
    filtered = client.ok("POST", f"{ML}/agents/_register", {
        "name": "adder", "type": "flow", "parameters": {"mcp_connectors": connectors},
        "tools": [{"type": "McpStreamableHttpTool", "name": "add", "parameters": {"input": '{"a": 1, "b": 2}'}}]})
    refused = client.call("POST", f"{ML}/agents/{filtered['agent_id']}/_execute", {"parameters": {}})
    assert refused.status == 400 and "MCP tool [add] configured in agent is not available" in \
        refused.body["error"]["reason"], refused.body
