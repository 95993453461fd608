"""A real MCP server (the SDK's ``MCPServer``, streamable HTTP, on uvicorn) on loopback, for
MCP connectors' tests: what it was sent is kept (each request's headers)."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import uvicorn
from mcp.server.mcpserver import MCPServer

from .timeouts import HANG_GUARD, poll_until


class Upstream:
    def __init__(self, server: uvicorn.Server, thread: threading.Thread, seen: list[dict[str, str]]) -> None:
        self._server, self._thread, self.seen = server, thread, seen
        port = server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(HANG_GUARD)


def start_upstream() -> Upstream:
    server = MCPServer("weather")

    @server.tool()
    def forecast(city: str) -> str:
        """Tomorrow's weather in a city."""
        return f"Sunny in {city}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    app = server.streamable_http_app()
    seen: list[dict[str, str]] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]})
        await app(scope, receive, send)

    config = uvicorn.Config(recording, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, name="mcp-upstream", daemon=True)
    thread.start()
    assert poll_until(lambda: runner.started, HANG_GUARD)
    return Upstream(runner, thread, seen)


def upstreams() -> Iterator[Upstream]:
    upstream = start_upstream()
    try:
        yield upstream
    finally:
        upstream.stop()
