"""What a streaming dialect provides to the streaming core.

A dialect turns the rendered predict request into the provider's streaming call
and decodes the provider's bytes into ``Delta`` / ``Done`` / ``Failure`` values.
Decoders are pure: bytes in, values out, no I/O.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from ..connectors import Connector, UpstreamRequest
from .events import StreamItem


class StreamDecoder(Protocol):
    def feed(self, data: bytes) -> list[StreamItem]:
        """Values for the bytes so far; a Done or Failure is always last."""

    def finish(self) -> list[StreamItem]:
        """Values at the end of the body: a Failure if the end marker never came."""


class Dialect(Protocol):
    name: str

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        """The provider's streaming call for a rendered predict request."""

    def new_decoder(self) -> StreamDecoder: ...
