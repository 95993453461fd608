"""AWS event-stream frames (``application/vnd.amazon.eventstream``) to stream items: the
framing Bedrock ConverseStream and SageMaker InvokeEndpointWithResponseStream share.

The frames are decoded by botocore's pure ``EventStreamBuffer`` (prelude, header and
message CRCs, size limits); a subclass maps each frame to items (``on_message``) and
says what the end of the body means when no terminal item came (``at_end``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.eventstream import EventStreamBuffer, ParserError

from ..errors import UpstreamError
from .common import json_object, parse_json, text
from .events import Done, Failure, StreamItem


class EventStreamDecoder:
    def __init__(self) -> None:
        self._buffer = EventStreamBuffer()
        self._pending_bytes = 0  # fed but not yet part of a complete frame
        self._ended = False

    def feed(self, data: bytes) -> list[StreamItem]:
        if self._ended:
            return []
        self._buffer.add_data(data)
        self._pending_bytes += len(data)
        items: list[StreamItem] = []
        try:
            for message in self._buffer:
                self._pending_bytes -= message.prelude.total_length
                items.extend(self.on_message(message.headers, message.payload))
                if items and isinstance(items[-1], (Done, Failure)):
                    self._ended = True
                    break
        # botocore's parser checks CRCs and sizes (ParserError) but, past a valid CRC, can
        # still trip on impossible lengths or header types (struct.error, KeyError, ...).
        except (ParserError, struct.error, KeyError, IndexError, ValueError) as exc:
            self._ended = True
            items.append(Failure(UpstreamError(
                f"the provider's event stream is corrupt ({type(exc).__name__})")))
        return items

    def finish(self) -> list[StreamItem]:
        if self._ended:
            return []
        self._ended = True
        if self._pending_bytes:
            return [Failure(UpstreamError("the provider's event stream ended inside a frame"))]
        return self.at_end()

    def on_message(self, headers: Mapping[str, Any], payload: bytes) -> Iterable[StreamItem]:
        raise NotImplementedError

    def at_end(self) -> list[StreamItem]:
        raise NotImplementedError


def exception_of(headers: Mapping[str, Any], payload: bytes) -> tuple[str, str] | None:
    """(its type, its message) for an exception or error frame; None for any other frame."""
    if headers.get(":message-type") not in ("exception", "error"):
        return None
    kind = headers.get(":exception-type") or headers.get(":error-code") or "exception"
    body = json_object(parse_json(payload) if payload else None)
    # Bedrock's members say "message", SageMaker's "Message".
    message = text(body.get("message")) or text(body.get("Message")) or headers.get(":error-message") or kind
    return kind, message
