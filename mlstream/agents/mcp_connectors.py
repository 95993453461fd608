"""MCP connectors' tools for agents (ml-commons' ``parameters.mcp_connectors``):

    "parameters": {"mcp_connectors": "[{\\"mcp_connector_id\\": \\"<id>\\", \\"tool_filters\\": [\\"^get_\\"]}]"}

Each connector's server lists its tools (``upstream.mcp_client``); ``tool_filters`` (regexes,
any of them matching a tool's name; none: every tool) narrows them. When several connectors
have a tool of one name, the first connector's is used, as ml-commons does.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from ..errors import BadRequest
from ..models.connectors import Connector
from ..upstream import mcp_client
from ..upstream.client import UpstreamClient

MCP_CONNECTORS = "mcp_connectors"


class McpConnectors:
    def __init__(self, connector: Callable[[str], Connector], upstream: UpstreamClient,
                 allow_private: Callable[[], bool]) -> None:
        self._connector = connector  # a connector by id, credentials unsealed (the registry's)
        self._upstream = upstream
        self._allow_private = allow_private

    def resolve(self, agent_parameters: Mapping[str, str]) -> dict[str, Connector]:
        """Each tool name an agent may call, and the connector that serves it."""
        served: dict[str, Connector] = {}
        for entry in _entries(agent_parameters):
            connector = self._connector(entry["mcp_connector_id"])
            if not connector.is_mcp:
                raise BadRequest(f"connector [{entry['mcp_connector_id']}] in [{MCP_CONNECTORS}] is not an MCP "
                                 "connector")
            filters = [re.compile(pattern) for pattern in entry.get("tool_filters") or []]
            for tool in mcp_client.list_tools(self._upstream, connector, self._allow_private()):
                name = tool["name"]
                if (not filters or any(f.search(name) for f in filters)) and name not in served:
                    served[name] = connector
        return served

    def call(self, served: Mapping[str, Connector], name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        """The tool's content list, as ml-commons' MCP tools answer it (an error result too)."""
        content, _ = mcp_client.call_tool(self._upstream, served[name], self._allow_private(), name, arguments)
        return content


def _entries(agent_parameters: Mapping[str, str]) -> list[dict[str, Any]]:
    raw = agent_parameters.get(MCP_CONNECTORS)
    if raw is None:
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        raise BadRequest(f"[parameters.{MCP_CONNECTORS}] must be a JSON list of connectors") from None
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("mcp_connector_id"), str) for e in entries):
        raise BadRequest(f'[parameters.{MCP_CONNECTORS}] must be a list of {{"mcp_connector_id": ...}}')
    for entry in entries:
        filters = entry.get("tool_filters")
        if filters is not None and (not isinstance(filters, list) or not all(isinstance(f, str) for f in filters)):
            raise BadRequest("[tool_filters] must be a list of regular expressions")
        try:
            [re.compile(f) for f in filters or []]
        except re.error as error:
            raise BadRequest(f"a [tool_filters] pattern is not a regular expression: {error}") from None
    return entries
