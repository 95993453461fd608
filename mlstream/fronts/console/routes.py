"""The console's routes: its static files, read once from the package, with their headers."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Callable

from ...errors import NotFound
from ...server.routing import Front, Reply, Request, Router
from ..mlcommons.errors import error_reply as ml_commons_error_reply

log = logging.getLogger(__name__)

PREFIX = "/_console"

# Only the page's own files, no inline script or style, nothing from elsewhere; no plugins,
# no <base>, not framed by others, forms never submitted (the page sends what it must
# with fetch: a form that posted itself could put the key in a URL).
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                           "form-action 'none'")
CONSOLE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # Revalidated on each load, so a new server version never runs an old script.
    "Cache-Control": "no-cache",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}


def _error_reply(exc: BaseException, trace: bool = False) -> Reply:
    """OpenSearch's error body, with the console's headers (a 404 under /_console is a page too)."""
    reply = ml_commons_error_reply(exc, trace)
    reply.headers = {**reply.headers, **CONSOLE_HEADERS}
    return reply


CONSOLE_FRONT = Front("console", _error_reply)


def load_files() -> dict[str, tuple[bytes, str]]:
    """Every file of ``static/`` by name, with its content type (the directory is flat)."""
    files: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files(__package__).joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return files


def add_console_routes(router: Router, files: Callable[[], dict[str, tuple[bytes, str]]] = load_files) -> None:
    router.claim_prefix(PREFIX, CONSOLE_FRONT)
    static = files()
    if "index.html" not in static:
        log.warning("the console's files are missing from the package: /_console answers 404")

    def serve(name: str) -> Reply:
        found = static.get(name)
        if found is None:
            raise NotFound(f"the console has no file [{name}]")
        body, content_type = found
        return Reply(200, body, dict(CONSOLE_HEADERS), content_type=content_type, filterable=False)

    def index(req: Request) -> Reply:
        return serve("index.html")

    def file(req: Request) -> Reply:
        return serve(req.params["name"])

    router.add("GET", PREFIX, index, "public", CONSOLE_FRONT)
    router.add("GET", PREFIX + "/{name}", file, "public", CONSOLE_FRONT)
