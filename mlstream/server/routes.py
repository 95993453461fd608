"""The routing table: method + path pattern -> handler function."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..errors import MethodNotAllowed, NotFound

_PARAM = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    template: str
    pattern: re.Pattern[str]
    handler: Callable
    # Who may call it once API keys exist: "public" (anyone), "user" (any key), "admin".
    role: str = "admin"


class Router:
    def __init__(self) -> None:
        self._routes: list[Route] = []

    def add(self, method: str, template: str, handler: Callable, role: str = "admin") -> None:
        """``template`` is a path with ``{name}`` segments, e.g. ``/models/{model_id}``."""
        regex = _PARAM.sub(r"(?P<\1>[^/]+)", re.escape(template).replace(r"\{", "{").replace(r"\}", "}"))
        self._routes.append(Route(method, template, re.compile(f"^{regex}$"), handler, role))

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The first route for ``method`` and ``path``; 405 if only other methods fit, else 404."""
        allowed: list[str] = []
        for route in self._routes:
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.method == method or (method == "HEAD" and route.method == "GET"):
                return route, found.groupdict()
            allowed.append(route.method)
        if allowed:
            raise MethodNotAllowed(
                f"Incorrect HTTP method for uri [{path}] and method [{method}], allowed: "
                f"[{', '.join(sorted(set(allowed)))}]",
                headers={"Allow": ", ".join(sorted(set(allowed)))})
        raise NotFound(f"no handler found for uri [{path}] and method [{method}]")
