"""The routing table, and the values a route takes and gives back.

A route is a function ``(Request) -> Reply | StreamReply``. It never touches the
connection: ``Reply`` is a whole JSON answer, ``StreamReply`` a stream ready to
start; the transport writes either. Each route belongs to a ``Front`` (``mlstream.fronts``),
the API it speaks, which shapes its errors.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..access.keys import ApiKey, Caller
from ..errors import BadRequest, MethodNotAllowed, MLStreamError, NotFound
from ..logs import AccessRecord
from ..inference.predict import CallMeter, PendingStream

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Front:
    """An API clients speak (ml-commons', OpenAI's): its name in metrics and the one place
    it turns an error into its own body."""

    name: str
    # (the error, whether the client asked for ?error_trace) -> the reply; any exception
    # that is not an MLStreamError is a bug: logged, answered 500 without details.
    error_reply: Callable[[BaseException, bool], "Reply"]


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    params: dict[str, str] = field(default_factory=dict)
    started: float = 0.0  # time.monotonic() when the request line arrived
    request_id: str = ""
    access: AccessRecord | None = None  # filled in as the request is handled
    connection: Any = None  # the client's socket, for the few routes that ask where it reached us
    # Set by the predict routes once the URL's model was found: only then is the request
    # counted as that model's prediction (random ids must not fill the per-model counts).
    model_resolved: bool = False
    # The caller (its API key and tenant) once authenticated; None on a public route or while no key exists.
    caller: Caller | None = None
    # This request's provider call, for its usage record: fronts hand it to ``Predictor.prepare``.
    meter: CallMeter = field(default_factory=CallMeter)

    @property
    def key(self) -> ApiKey | None:
        return None if self.caller is None else self.caller.key

    def mark_model_resolved(self) -> None:
        self.model_resolved = True

    def flag(self, name: str) -> bool:
        return query_flag(self.query, name)


def query_flag(query: dict[str, str], name: str) -> bool:
    """A boolean query parameter as OpenSearch reads one: present and empty is true."""
    value = query.get(name)
    if value is None:
        return False
    if value.lower() in ("", "true"):
        return True
    if value.lower() == "false":
        return False
    raise BadRequest(f"parameter [{name}] must be true or false, got [{value}]")


@dataclass(slots=True)
class Reply:
    """A whole answer: JSON, or text (a ``str``), or bytes as they are (the console's files)."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json; charset=UTF-8"
    filterable: bool = True  # ?filter_path applies (never to an error, as in OpenSearch)


def known_error(exc: BaseException) -> MLStreamError:
    """``exc`` when it is one of ours; anything else is a bug, logged with its traceback
    and answered as a 500 without details (every front's error body starts here)."""
    if isinstance(exc, MLStreamError):
        return exc
    log.error("unexpected error while handling a request", exc_info=exc)
    return MLStreamError("internal error: the server failed to handle the request")


class StreamEvents(Protocol):
    """A front's stream events, each as SSE bytes (one event or several), from the stream's values."""

    def content(self, content: Any) -> bytes: ...
    def reasoning(self, text: str) -> bytes: ...
    def relayed(self, data: str | bytes) -> bytes: ...
    def last(self, finish_reason: str | None, usage: dict[str, int] | None) -> bytes: ...
    def error(self, error: MLStreamError) -> bytes: ...


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A 200 event stream, once its provider answers (else that answer's error)."""

    stream: PendingStream
    events: StreamEvents  # the front's, from the stream's values

_PARAM = re.compile(r"\{(\w+)\}")
# Matches remembered by (method, path): a predict path matched ~50 route regexes in turn on
# every request (and its front, by path). Paths carry ids, so each memo is cleared when full,
# and long paths are not kept.
MAX_REMEMBERED_MATCHES = 4096
MAX_REMEMBERED_PATH = 512


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    template: str
    pattern: re.Pattern[str]
    handler: Callable[[Request], "Reply | StreamReply"]
    # Who may call it once API keys exist: "public" (anyone), "user" (any key), "admin".
    role: str
    front: Front
    raw_body: bool = False  # the handler reads the body's bytes (NDJSON ``_bulk``), not JSON


class Router:
    def __init__(self, default_front: Front) -> None:
        self._routes: list[Route] = []
        self._default_front = default_front  # of routes added without one, and unclaimed paths
        self._front_prefixes: list[tuple[str, Front]] = []  # (path prefix, front) for unmatched paths
        # (method, path) -> what match found; only matches (a 404 or 405 is worked out each time).
        # Read and written without a lock: a lookup, a store and a clear are each atomic.
        self._matches: dict[tuple[str, str], tuple[Route, dict[str, str]]] = {}
        self._fronts: dict[str, Front] = {}  # path -> front_of(path), the same way

    def add(self, method: str, template: str, handler: Callable[[Request], "Reply | StreamReply"],
            role: str = "admin", front: Front | None = None, *, segments: dict[str, str] | None = None,
            raw_body: bool = False) -> None:
        """``template`` is a path with ``{name}`` segments, e.g. ``/models/{model_id}``;
        ``segments`` narrows a segment to a regex (default: any text without a ``/``)."""
        shapes = segments or {}
        regex = _PARAM.sub(lambda m: f"(?P<{m.group(1)}>{shapes.get(m.group(1), '[^/]+')})",
                           re.escape(template).replace(r"\{", "{").replace(r"\}", "}"))
        self._routes.append(Route(method, template, re.compile(f"^{regex}$"), handler, role,
                                  front or self._default_front, raw_body))
        self._matches.clear()  # a new route may take a path an earlier one answered

    def claim_prefix(self, prefix: str, front: Front) -> None:
        """``prefix`` (``/v1``) and the paths under it belong to ``front``, matched or not
        (its 404 and 405 bodies)."""
        self._front_prefixes.append((prefix.rstrip("/"), front))
        self._fronts.clear()

    @property
    def default_front(self) -> Front:
        return self._default_front

    def front_of(self, path: str) -> Front:
        """The front of the longest prefix claiming ``path`` (``/v1/messages`` within ``/v1``)."""
        remembered = self._fronts.get(path)
        if remembered is not None:
            return remembered
        found = self._search_front(path)
        if len(path) <= MAX_REMEMBERED_PATH:
            if len(self._fronts) >= MAX_REMEMBERED_MATCHES:
                self._fronts.clear()
            self._fronts[path] = found
        return found

    def _search_front(self, path: str) -> Front:
        found, length = self._default_front, -1
        for prefix, front in self._front_prefixes:
            if (len(prefix) > length and path.startswith(prefix)
                    and (len(path) == len(prefix) or path[len(prefix)] == "/")):
                found, length = front, len(prefix)
        return found

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The first route for ``method`` and ``path``; 405 if only other methods fit, else 404."""
        key = (method, path)
        remembered = self._matches.get(key)
        if remembered is not None:
            return remembered[0], dict(remembered[1])  # a copy: the request's own
        route, params = self._search(method, path)
        if len(path) <= MAX_REMEMBERED_PATH:
            if len(self._matches) >= MAX_REMEMBERED_MATCHES:
                self._matches.clear()
            self._matches[key] = (route, params)
            params = dict(params)
        return route, params

    def _search(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
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
