"""ml-commons' MCP server (``agents.mcp_server``):

    POST /_plugins/_ml/mcp                    a JSON-RPC message (stateless streamable HTTP): its
                                              answer as JSON, or 202 for a notification (any key)
    GET  /_plugins/_ml/mcp                    405 (OpenSearch's error body): it opens no event stream
    POST /_plugins/_ml/mcp/tools/_register    {"tools": [...]} (admin)
    POST /_plugins/_ml/mcp/tools/_update      {"tools": [...]} (admin)
    POST /_plugins/_ml/mcp/tools/_remove      ["name", ...] (admin)
    GET  /_plugins/_ml/mcp/tools/_list        the tools registered (admin)
    GET  /_plugins/_ml/connectors/<id>/tools  the tools an MCP connector's server lists (admin)
"""

from __future__ import annotations

from typing import Any, Callable

from ...agents.mcp_server import McpServer
from ...errors import MethodNotAllowed
from ...server.routing import Reply, Request, Router

BASE = "/_plugins/_ml/mcp"


def add_mcp_routes(router: Router, server: McpServer, connector_tools: Callable[[str], dict[str, Any]]) -> None:
    def message(req: Request) -> Reply:
        answer = server.handle(req.body or b"", req.caller, req.meter.trace if req.meter is not None else None)
        # A notification: 202 with no body (so no JSON content type), as ml-commons answers it.
        return Reply(202, b"", content_type="text/plain; charset=UTF-8", filterable=False) if answer is None else \
            Reply(200, answer, filterable=False)

    router.add("POST", BASE, message, "user", raw_body=True)
    def no_stream(req: Request) -> Reply:
        raise MethodNotAllowed("this MCP server is stateless: it opens no event stream, POST JSON-RPC messages",
                               headers={"Allow": "POST"})

    router.add("GET", BASE, no_stream, "user")
    router.add("POST", f"{BASE}/tools/_register", lambda req: Reply(200, server.register(req.body)), "admin")
    router.add("POST", f"{BASE}/tools/_update", lambda req: Reply(200, server.update(req.body)), "admin")
    router.add("POST", f"{BASE}/tools/_remove", lambda req: Reply(200, server.remove(req.body)), "admin")
    router.add("GET", f"{BASE}/tools/_list", lambda req: Reply(200, server.list()), "admin")
    router.add("GET", "/_plugins/_ml/connectors/{connector_id}/tools",
               lambda req: Reply(200, connector_tools(req.params["connector_id"])), "admin")
