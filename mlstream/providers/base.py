"""What a streaming dialect provides to the streaming core.

A dialect turns the rendered predict request into the provider's streaming call
and decodes the provider's bytes into ``Delta`` / ``Done`` / ``Failure`` values.
Decoders are pure: bytes in, values out, no I/O.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Mapping, Protocol

from ..models.connectors import Connector, UpstreamRequest
from .events import StreamItem


class StreamDecoder(Protocol):
    def feed(self, data: bytes) -> list[StreamItem]:
        """Values for the bytes so far; a Done or Failure is always last."""

    def finish(self) -> list[StreamItem]:
        """Values at the end of the body: a Failure if the end marker never came."""


class StreamKind(Enum):
    """What a stream's reader hands the writer, chosen by the front that asked for it."""

    TEXT = "text"    # the answer's text, reasoning and tool calls (Delta, Reasoning): ml-commons' stream
    CHAT = "chat"    # the same, for a request a front translated into the provider's chat schema
    RELAY = "relay"  # the provider's own chunks whole (Chunk): a front that speaks the provider's API


class Dialect(Protocol):
    """One provider API (an ``_llm_interface``): every method the predictor calls on it."""

    name: str

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        """The provider's streaming call for a rendered predict request."""

    def new_decoder(self, kind: StreamKind = StreamKind.TEXT) -> StreamDecoder:
        """A decoder for one stream; ValueError for a kind this dialect has no stream of."""


def no_stream_of(dialect: Dialect, kind: StreamKind) -> ValueError:
    return ValueError(f"{dialect.name} has no {kind.value} stream")
