"""What the decoders share: the provider's JSON taken defensively, SSE events whose
data is a JSON object, and tool calls assembled from their streamed fragments.

Pure: no I/O. A provider's JSON is not trusted to have the documented types, so
every read goes through ``json_object`` / ``text`` / ``count``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..connectors import UpstreamRequest
from ..errors import BadRequest, UpstreamError
from ..sse import SSEDecoder, SSEEvent
from .events import Done, Failure, StreamItem


def json_object_body(request: UpstreamRequest) -> dict[str, Any]:
    """The rendered request body as a JSON object (a streaming dialect edits it)."""
    try:
        body = json.loads(request.body or b"")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise BadRequest("the connector's request_body must render to a JSON object to stream it")
    return body


def encode_body(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def json_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def count(value: Any) -> int | None:
    """A token count, or None for anything the provider sent that is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def counts(usage: Mapping[str, Any], names: Iterable[str]) -> dict[str, int | None]:
    """``names`` of a provider's usage object, each a count or None."""
    return {name: count(usage.get(name)) for name in names}


def parse_json(data: str | bytes) -> Any:
    """JSON text as a value, or None when it is not JSON."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


@dataclass(slots=True)
class ToolCall:
    """A tool call being streamed: its id and name first, its JSON input in fragments."""

    call_id: str | None
    name: str | None
    fragments: list[str] = field(default_factory=list)

    def input(self) -> dict[str, Any] | Failure:
        """The whole input, or a Failure when the fragments do not make a JSON object."""
        joined = "".join(self.fragments)
        value = parse_json(joined) if joined.strip() else {}
        if not isinstance(value, dict):
            return Failure(UpstreamError(f"the provider's tool call {self.name} has an input that is not "
                                         "a JSON object"))
        return value


class JsonEventDecoder:
    """SSE events whose data is a JSON object, each mapped to items by ``on_object``.

    Subclasses implement ``on_object(event_name, value)`` and ``at_end()`` (what the
    end of the body means: Done if the answer was complete, else a Failure). After a
    Done or Failure nothing more is decoded.
    """

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._ended = False

    def feed(self, data: bytes) -> list[StreamItem]:
        if self._ended:
            return []
        items: list[StreamItem] = []
        for event in self._sse.feed(data):
            for item in self._on_event(event):
                items.append(item)
                if isinstance(item, (Done, Failure)):
                    self._ended = True
                    return items
        return items

    def finish(self) -> list[StreamItem]:
        if self._ended:
            return []
        self._ended = True
        return [self.at_end()]

    def _on_event(self, event: SSEEvent) -> Iterable[StreamItem]:
        try:
            value = json.loads(event.data)
        except (ValueError, RecursionError):
            return [Failure(UpstreamError("the provider sent a stream event that is not JSON"))]
        if not isinstance(value, dict):
            return [Failure(UpstreamError("the provider sent a stream event that is not a JSON object"))]
        return self.on_object(event.event, value)

    def on_object(self, event_name: str, value: dict[str, Any]) -> Iterable[StreamItem]:
        raise NotImplementedError

    def at_end(self) -> StreamItem:
        raise NotImplementedError
