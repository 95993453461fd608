"""The console: a browser page served at ``/_console`` that works through the public API.

    GET /_console            index.html (the page asks for an API key, keeps it in the tab)
    GET /_console/<file>     its scripts, style and images, from ``static/`` in the package

The files need no build step and load nothing from elsewhere. The routes are public (the
files hold no data; every call the page makes carries the key it was given), and every
answer of this front carries a Content-Security-Policy that lets the page run only its
own scripts and styles, no inline script, and reach only this server.
"""

from __future__ import annotations

from .routes import CONSOLE_HEADERS, PREFIX, add_console_routes

__all__ = ["CONSOLE_HEADERS", "PREFIX", "add_console_routes"]
