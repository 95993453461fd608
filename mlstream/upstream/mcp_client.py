"""A small MCP client (streamable HTTP) for MCP connectors: JSON-RPC requests POSTed to the
connector's ``url`` through the upstream client (its pools, TLS and the private-address
guard judged on the resolved addresses before each call), answered as JSON or as an event
stream holding the answer.

    open       initialize (the server's ``Mcp-Session-Id``, if it gives one, sent after it),
               then notifications/initialized
    list       tools/list, page after page (``nextCursor``), at most ``MAX_PAGES``
    call       tools/call: the result's content list
    close      DELETE of the session, when there is one (best effort)

Kept synchronous on purpose: the server's handler threads make the calls, one request
after another, as the rest of the upstream floor does.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

from .. import __version__
from ..errors import MLStreamError, UpstreamError
from ..models.connectors import Connector, UpstreamRequest
from ..wire import templating
from ..wire.sse import SSEDecoder
from .client import UpstreamClient

log = logging.getLogger(__name__)

PROTOCOL_VERSION = "2025-06-18"
MAX_PAGES = 20
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class McpSession:
    """One conversation with an MCP server, opened by ``open_session``."""

    def __init__(self, upstream: UpstreamClient, connector: Connector, allow_private: bool) -> None:
        self._upstream = upstream
        self._connector = connector
        self._allow_private = allow_private
        self._headers = {name: templating.render(value, connector.parameters, connector.credential, where="headers")
                         for name, value in connector.headers.items()}
        self._session_id: str | None = None
        self._next_id = 0

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A request's result; UpstreamError for the server's JSON-RPC error or a bad answer."""
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, **({"params": params} if params else {})}
        status, content_type, body, session = self._post(message)
        if status >= 400:
            raise UpstreamError(f"the MCP server answered {method} with HTTP {status}", upstream_status=status)
        if session and self._session_id is None:
            self._session_id = session
        answer = _answer_of(content_type, body, self._next_id)
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise UpstreamError(f"the MCP server refused {method}: {str(error.get('message', ''))[:300]}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(f"the MCP server's answer to {method} has no result object")
        return result

    def notify(self, method: str) -> None:
        status, _, _, _ = self._post({"jsonrpc": "2.0", "method": method})
        if status >= 400:
            raise UpstreamError(f"the MCP server answered {method} with HTTP {status}", upstream_status=status)

    def close(self) -> None:
        if self._session_id is None:
            return
        try:
            response = self._upstream.send(UpstreamRequest("DELETE", self._url, self._request_headers(), None),
                                           self._connector.client_config, allow_private=self._allow_private,
                                           tls=self._connector.tls)
            self._upstream.read_body(response, self._url, MAX_ANSWER_BYTES)
        except MLStreamError as error:  # the session ends with the server's idle timeout anyway
            log.debug("closing an MCP session failed: %s", error.reason)

    @property
    def _url(self) -> str:
        return self._connector.url or ""

    def _request_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL_VERSION, **self._headers}
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        return headers

    def _post(self, message: dict[str, Any]) -> tuple[int, str, bytes, str | None]:
        request = UpstreamRequest("POST", self._url, self._request_headers(), json.dumps(message).encode())
        response = self._upstream.send(request, self._connector.client_config, allow_private=self._allow_private,
                                       tls=self._connector.tls)
        body = self._upstream.read_body(response, self._url, MAX_ANSWER_BYTES)
        return (response.status, response.headers.get("content-type", ""), body,
                response.headers.get("mcp-session-id"))


def open_session(upstream: UpstreamClient, connector: Connector, allow_private: bool) -> McpSession:
    session = McpSession(upstream, connector, allow_private)
    session.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                   "clientInfo": {"name": "mlstream", "version": __version__}})
    session.notify("notifications/initialized")
    return session


def list_tools(upstream: UpstreamClient, connector: Connector, allow_private: bool) -> list[dict[str, Any]]:
    """Every tool the connector's MCP server lists: ``{name, description?, inputSchema?}``."""
    session = open_session(upstream, connector, allow_private)
    try:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            result = session.request("tools/list", {"cursor": cursor} if cursor else None)
            tools += [tool for tool in result.get("tools") or [] if isinstance(tool, dict) and
                      isinstance(tool.get("name"), str)]
            cursor = result.get("nextCursor") if isinstance(result.get("nextCursor"), str) else None
            if not cursor:
                break
        return tools
    finally:
        session.close()


def call_tool(upstream: UpstreamClient, connector: Connector, allow_private: bool, name: str,
              arguments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """A tool's result: its content list (text, images, ... as the server gave them) and
    whether the server marked it an error."""
    session = open_session(upstream, connector, allow_private)
    try:
        result = session.request("tools/call", {"name": name, "arguments": dict(arguments)})
    finally:
        session.close()
    content = [part for part in result.get("content") or [] if isinstance(part, dict)]
    return content, bool(result.get("isError"))


def _answer_of(content_type: str, body: bytes, request_id: int) -> dict[str, Any]:
    """The JSON-RPC answer to ``request_id``: the body itself, or the event-stream message
    that answers it (others, the server's requests or notifications, are passed over)."""
    try:
        if content_type.split(";", 1)[0].strip().lower() == "text/event-stream":
            for data in SSEDecoder().feed_data(body + b"\n\n"):
                message = json.loads(data)
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
            raise UpstreamError("the MCP server's event stream ended without the answer")
        message = json.loads(body)
    except ValueError:
        raise UpstreamError("the MCP server's answer is not JSON-RPC") from None
    if not isinstance(message, dict):
        raise UpstreamError("the MCP server's answer is not a JSON-RPC object")
    return message
