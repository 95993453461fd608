"""ml-commons' MCP server: tools registered in the store, served over stateless streamable
HTTP JSON-RPC (``POST /_plugins/_ml/mcp``), behind mlstream's keys.

    tools        POST /_plugins/_ml/mcp/tools/_register {"tools": [{"type", "name"?, "description"?,
                 "parameters"?, "attributes"? {"input_schema"}}]}, .../_update, .../_remove
                 ["name", ...], GET .../_list (admin writes; any key lists)
    JSON-RPC     initialize, notifications/*, ping, tools/list, tools/call (any key); a GET is 405

Tool types served: ``MLModelTool`` (a model's ``_predict``, as in a flow agent) and
``AgentTool`` (``parameters.agent_id``: that agent's run, its answer as JSON). A call's
``arguments`` are the tool's parameters over its registered ones. ``tools/list`` shows a
caller only the tools it may call (an ``MLModelTool`` of a model it may use); calling one
it may not is the same error as calling one that does not exist.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Mapping

from ..access.keys import Caller
from ..errors import BadRequest, MLStreamError, NotFound
from ..models.registry import NODE_ID
from ..store.sqlite import Record, Store
from ..telemetry.hooks import RequestTrace
from .agents import Agents
from .flow import run_tool
from .spec import string_map

log = logging.getLogger(__name__)

SERVED_TYPES = ("MLModelTool", "AgentTool")
SERVER_INFO = {"name": "OpenSearch-MCP-Stateless-Server", "version": "0.1.0"}
# Protocol versions answered as asked; another is answered with the newest of these.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
TOOL_FIELDS = ("type", "name", "description", "parameters", "attributes")


class JsonRpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class McpServer:
    def __init__(self, store: Store, agents: Agents, may_use_model: Callable[[str, Caller | None], bool],
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._agents = agents
        self._may_use_model = may_use_model  # whether a caller may call a model (listing: nothing deployed)
        self._clock = clock

    # --- the tools -----------------------------------------------------------------------

    def register(self, body: Any) -> dict[str, Any]:
        tools = [_checked_tool(tool) for tool in _tools_of(body)]
        names = [tool["name"] for tool in tools]
        duplicate = next((name for name in names if names.count(name) > 1), None)
        if duplicate is not None:
            raise BadRequest(f"duplicate tool name: {duplicate} found in the request")
        now = int(self._clock() * 1000)
        with self._store.transaction():
            taken = [name for name in names if self._store.get("mcp_tool", name) is not None]
            if taken:
                raise BadRequest(f"Unable to register tools: {taken} as they already exist")
            for tool in tools:
                self._store.put("mcp_tool", Record(tool["name"], {**tool, "version": 1, "created_time": now,
                                                                  "last_updated_time": now}))
        return {NODE_ID: {"created": True}}

    def update(self, body: Any) -> dict[str, Any]:
        changes = _tools_of(body)
        now = int(self._clock() * 1000)
        with self._store.transaction():
            for change in changes:
                if not isinstance(change, dict) or not isinstance(change.get("name"), str):
                    raise BadRequest("each tool to update must be an object with its [name]")
                record = self._store.get("mcp_tool", change["name"])
                if record is None:
                    raise NotFound(f"Failed to find tool: {change['name']}")
                unknown = sorted(set(change) - set(TOOL_FIELDS))
                if unknown or "type" in change:
                    raise BadRequest(f"a tool's [{', '.join(unknown or ['type'])}] cannot be updated")
                doc = _checked_tool({**record.doc, **change, "type": record.doc["type"]})
                self._store.put("mcp_tool", Record(record.id, {**record.doc, **doc, "version": record.doc["version"] + 1,
                                                               "last_updated_time": now}))
        return {NODE_ID: {"updated": True}}

    def remove(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, list) or not body or not all(isinstance(name, str) for name in body):
            raise BadRequest('the request body must be a list of tool names, such as ["my_tool"]')
        with self._store.transaction():
            missing = [name for name in body if self._store.get("mcp_tool", name) is None]
            if missing:
                raise NotFound(f"Failed to find tools: {missing}")
            for name in body:
                self._store.delete("mcp_tool", name)
        return {NODE_ID: {"removed": True}}

    def list(self) -> dict[str, Any]:
        return {"tools": [record.doc for record in self._store.scan("mcp_tool")]}

    # --- JSON-RPC ----------------------------------------------------------------------------

    def handle(self, raw: bytes, caller: Caller | None, trace: RequestTrace | None = None) -> dict[str, Any] | None:
        """One JSON-RPC message's answer (None: a notification, answered 202 with no body)."""
        try:
            message = json.loads(raw)
        except ValueError:
            return _error(None, PARSE_ERROR, "Parse error: the body is not JSON")
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"),
                                                                                                str):
            return _error(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST,
                          "Invalid request: a JSON-RPC 2.0 object with a method is expected")
        method, request_id = message["method"], message.get("id")
        if "id" not in message:  # a notification: nothing to answer
            return None
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        try:
            if method == "initialize":
                asked = params.get("protocolVersion")
                version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
                result: dict[str, Any] = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                                          "serverInfo": SERVER_INFO}
            elif method == "ping":
                result = {}
            elif method == "tools/list":
                result = {"tools": [_listed(doc) for doc in self._callable(caller)]}
            elif method == "tools/call":
                result = self._call(params, caller, trace)
            else:
                raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        except JsonRpcError as error:
            return _error(request_id, error.code, error.message)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _callable(self, caller: Caller | None) -> list[dict[str, Any]]:
        return [record.doc for record in self._store.scan("mcp_tool") if self._may_call(record.doc, caller)]

    def _may_call(self, tool: Mapping[str, Any], caller: Caller | None) -> bool:
        if tool["type"] == "MLModelTool":
            return self._may_use_model(str((tool.get("parameters") or {}).get("model_id", "")), caller)
        return True

    def _call(self, params: Mapping[str, Any], caller: Caller | None, trace: RequestTrace | None) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, "tools/call takes a tool [name] and an object of [arguments]")
        record = self._store.get("mcp_tool", name)
        if record is None or not self._may_call(record.doc, caller):
            raise JsonRpcError(INVALID_PARAMS, f"Tool not found: {name}")  # a denied tool is an unknown one
        tool = record.doc
        parameters = {**(tool.get("parameters") or {}), **string_map(arguments, "arguments")}
        try:
            if tool["type"] == "AgentTool":
                answer = self._agents.execute(parameters["agent_id"], {"parameters": parameters}, caller, trace)
                text = json.dumps(answer["inference_results"][0]["output"], ensure_ascii=False)
            else:
                output = run_tool(tool, parameters, self._agents.model_caller(caller, trace))
                text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        except MLStreamError as error:
            return {"content": [{"type": "text", "text": error.reason}], "isError": True}
        return {"content": [{"type": "text", "text": text}], "isError": False}


def _tools_of(body: Any) -> list[Any]:
    if not isinstance(body, dict) or not isinstance(body.get("tools"), list) or not body["tools"]:
        raise BadRequest('the request body must be {"tools": [...]} with at least one tool')
    return body["tools"]


def _checked_tool(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise BadRequest("each tool must be an object")
    unknown = sorted(set(tool) - set(TOOL_FIELDS) - {"version", "created_time", "last_updated_time"})
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in a tool")
    kind = tool.get("type")
    if kind not in SERVED_TYPES:
        raise BadRequest(f"tool type [{kind}] is not served here (served: {', '.join(SERVED_TYPES)})")
    name = tool.get("name") or kind
    if not isinstance(name, str):
        raise BadRequest("a tool's [name] must be a string")
    checked: dict[str, Any] = {"type": kind, "name": name}
    if tool.get("description") is not None:
        if not isinstance(tool["description"], str):
            raise BadRequest("a tool's [description] must be a string")
        checked["description"] = tool["description"]
    checked["parameters"] = string_map(tool.get("parameters") or {}, f"{name}.parameters")
    required = "model_id" if kind == "MLModelTool" else "agent_id"
    if not checked["parameters"].get(required):
        raise BadRequest(f"tool [{name}] of type [{kind}] needs [parameters.{required}]")
    attributes = tool.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise BadRequest(f"[{name}.attributes] must be an object")
    schema = attributes.get("input_schema")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            raise BadRequest(f"[{name}.attributes.input_schema] must be a JSON schema object") from None
    if schema is not None and not isinstance(schema, dict):
        raise BadRequest(f"[{name}.attributes.input_schema] must be a JSON schema object")
    checked["attributes"] = {**attributes, **({"input_schema": schema} if schema is not None else {})}
    return checked


def _listed(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as ``tools/list`` shows it (the MCP server needs a schema: an empty object's)."""
    schema = (tool.get("attributes") or {}).get("input_schema") or {"type": "object", "properties": {}}
    return {"name": tool["name"], "description": tool.get("description") or f"Runs the {tool['type']} [{tool['name']}]",
            "inputSchema": schema}


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
