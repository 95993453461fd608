"""ml-commons' MCP server over HTTP: its tool routes, and the MCP SDK's own client against
``/_plugins/_ml/mcp`` (initialize, tools/list, tools/call), behind mlstream's keys."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

from mlstream.testing.fake_openai import FakeOpenAI
from tests.support.connectors import prompt_chat_connector
from tests.support.clients import Client, bearer, client_with
from tests.support.wire import raw_request

MCP = "/_plugins/_ml/mcp"
MLS = "/_plugins/_mlstream"
SCHEMA = {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}


class Setup:
    def __init__(self, server: Any, fake: FakeOpenAI) -> None:
        self.url, self.fake = server.url, fake
        admin = Client(server.url).call("POST", f"{MLS}/keys", {"name": "ops", "role": "admin"})
        assert admin.status == 200, admin.body
        self.admin_key = admin.body["key"]
        self.admin = client_with(server.url, bearer(self.admin_key))

    def model(self, text: str, name: str) -> str:
        return self.admin.register(self.admin.create_connector(prompt_chat_connector(self.fake, text)),
                                   name=name)

    def key(self, name: str, **fields: Any) -> str:
        return self.admin.ok("POST", f"{MLS}/keys", {"name": name, **fields})["key"]


@pytest.fixture
def setup(make_server, fake) -> Setup:
    return Setup(make_server(), fake)


def model_tool(name: str, model_id: str) -> dict[str, Any]:
    return {"type": "MLModelTool", "name": name, "description": f"answers with {name}",
            "parameters": {"model_id": model_id, "prompt": "Answer: ${parameters.question}"},
            "attributes": {"input_schema": SCHEMA}}


async def sdk_session(url: str, key: str, work: Any) -> Any:
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http:
        async with streamable_http_client(url + MCP, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                return await work(session)


def test_the_mcp_sdk_lists_and_calls_the_tools_a_key_may_call(setup: Setup) -> None:
    open_model = setup.model("Paris.", "open")
    closed_model = setup.model("secret", "closed")
    registered = setup.admin.ok("POST", f"{MCP}/tools/_register", {"tools": [
        model_tool("capital", open_model), model_tool("vault", closed_model)]})
    assert registered == {"mlstream": {"created": True}}
    narrow = setup.key("narrow", models=[open_model])

    async def refused(session: ClientSession, name: str) -> str:
        try:
            await session.call_tool(name, {"question": "x"})
        except MCPError as error:
            return str(error)
        raise AssertionError(f"{name} was called")

    async def work(session: ClientSession) -> Any:
        listed = await session.list_tools()
        called = await session.call_tool("capital", {"question": "of France?"})
        return listed, called, await refused(session, "vault"), await refused(session, "nope")

    listed, called, denied, unknown = asyncio.run(sdk_session(setup.url, narrow, work))
    assert [(tool.name, tool.input_schema) for tool in listed.tools] == [("capital", SCHEMA)]
    assert not called.is_error and called.content[0].text == "Paris."
    sent = [r.body for r in setup.fake.stats.requests if r.path.endswith("/chat/completions")][-1]
    assert sent["messages"][0]["content"] == "Answer: of France?"
    # a denied tool is answered as an unknown one
    assert denied == "Tool not found: vault" and unknown == "Tool not found: nope"
    # the admin key sees both
    everything = asyncio.run(sdk_session(setup.url, setup.admin_key, lambda s: s.list_tools()))
    assert sorted(tool.name for tool in everything.tools) == ["capital", "vault"]


def test_json_rpc_on_the_wire_as_ml_commons_answers_it(setup: Setup) -> None:
    headers = {**bearer(setup.admin_key), "Content-Type": "application/json"}

    def post(message: Any) -> Any:
        raw = message if isinstance(message, bytes) else json.dumps(message).encode()
        return raw_request(setup.url, "POST", MCP, raw, headers=headers)

    init = post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t",
                                                                                             "version": "1"}}})
    assert init.status == 200
    result = json.loads(init.body)["result"]
    assert result["protocolVersion"] == "2025-06-18" and result["serverInfo"]["name"] == \
        "OpenSearch-MCP-Stateless-Server" and "tools" in result["capabilities"]
    assert post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
    assert json.loads(post({"jsonrpc": "2.0", "id": "p", "method": "ping"}).body) == {"jsonrpc": "2.0", "id": "p",
                                                                                      "result": {}}
    for message, code in ((b"{nope", -32700), ({"id": 3, "method": "x"}, -32600),
                          ({"jsonrpc": "2.0", "id": 4, "method": "resources/list"}, -32601),
                          ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": 3}}, -32602)):
        answer = post(message)
        assert answer.status == 200 and json.loads(answer.body)["error"]["code"] == code, answer.body
    assert raw_request(setup.url, "GET", MCP, b"", headers=bearer(setup.admin_key)).status == 405
    assert raw_request(setup.url, "POST", MCP, b"{}", headers={"Content-Type": "application/json"}).status == 401


def test_tool_routes_register_update_list_remove(setup: Setup) -> None:
    model_id = setup.model("x", "m")
    setup.admin.ok("POST", f"{MCP}/tools/_register", {"tools": [model_tool("one", model_id)]})
    again = setup.admin.call("POST", f"{MCP}/tools/_register", {"tools": [model_tool("one", model_id)]})
    assert again.status == 400 and "already exist" in again.body["error"]["reason"]
    for body, words in (({"tools": [model_tool("a", model_id), model_tool("a", model_id)]}, "duplicate tool name: a"),
                        ({"tools": [{"type": "SearchIndexTool", "name": "s"}]}, "[SearchIndexTool] is not served"),
                        ({"tools": [{"type": "MLModelTool", "name": "m"}]}, "parameters.model_id"),
                        ({"tools": []}, "at least one tool")):
        reply = setup.admin.call("POST", f"{MCP}/tools/_register", body)
        assert reply.status == 400 and words in reply.body["error"]["reason"], reply.body
    assert setup.admin.ok("POST", f"{MCP}/tools/_update", {"tools": [{"name": "one", "description": "new"}]}) == {
        "mlstream": {"updated": True}}
    tools = setup.admin.ok("GET", f"{MCP}/tools/_list")["tools"]
    assert [(t["name"], t["description"], t["version"]) for t in tools] == [("one", "new", 2)]
    user = client_with(setup.url, bearer(setup.key("user")))
    assert user.call("POST", f"{MCP}/tools/_register", {"tools": [model_tool("u", model_id)]}).status == 403
    assert setup.admin.call("POST", f"{MCP}/tools/_remove", ["missing"]).status == 404
    assert setup.admin.ok("POST", f"{MCP}/tools/_remove", ["one"]) == {"mlstream": {"removed": True}}
    assert setup.admin.ok("GET", f"{MCP}/tools/_list") == {"tools": []}


def test_an_agent_tool_runs_its_agent_and_answers_its_output(setup: Setup) -> None:
    model_id = setup.model("ran", "for the agent")
    agent_id = setup.admin.ok("POST", "/_plugins/_ml/agents/_register", {"name": "a", "type": "flow", "tools": [
        {"type": "MLModelTool", "parameters": {"model_id": model_id, "prompt": "${parameters.question}"}}]})["agent_id"]
    setup.admin.ok("POST", f"{MCP}/tools/_register", {"tools": [
        {"type": "AgentTool", "name": "ask_agent", "parameters": {"agent_id": agent_id}}]})
    answer = raw_request(setup.url, "POST", MCP, json.dumps({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "ask_agent", "arguments": {"question": "go"}}}).encode(),
        headers={**bearer(setup.admin_key), "Content-Type": "application/json"})
    result = json.loads(answer.body)["result"]
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == [{"name": "response", "result": "ran"}]
    # a tool's failure is a result marked isError, with the reason
    setup.admin.ok("POST", f"{MCP}/tools/_register", {"tools": [
        {"type": "AgentTool", "name": "gone", "parameters": {"agent_id": "no-such-agent"}}]})
    failed = raw_request(setup.url, "POST", MCP, json.dumps({
        "jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "gone", "arguments": {}}}).encode(),
        headers={**bearer(setup.admin_key), "Content-Type": "application/json"})
    result = json.loads(failed.body)["result"]
    assert result["isError"] is True and "Failed to find agent" in result["content"][0]["text"]
