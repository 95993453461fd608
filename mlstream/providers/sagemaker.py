"""Amazon SageMaker ``InvokeEndpointWithResponseStream``: event-stream frames carrying the
container's own token stream.

The connector's URL ends in ``/endpoints/{name}/invocations`` (``InvokeEndpoint``); the
stream calls ``/invocations-response-stream`` with the same body plus ``"stream":
true``. The answer is AWS event-stream frames (decoded by botocore's
``EventStreamBuffer``, as for Bedrock):

    PayloadPart                 the next bytes of the container's output, cut anywhere
                                (a token's JSON may span two parts)
    ModelStreamError,           Failure (the container or SageMaker failed mid-stream)
    InternalStreamFailure

What those bytes are depends on the container, so the interface names it:

    sagemaker/tgi   Hugging Face TGI: SSE, ``data:{"token": {...}, "generated_text", "details"}``
    sagemaker/lmi   AWS LMI (DJL Serving): JSON lines of the same token objects

In both, each token's ``text`` is Delta(text) (special tokens such as ``</s>`` are
skipped); the token whose ``generated_text`` is set ends the answer: Done(finish
reason and usage from its ``details``, when the request asked for details).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from botocore.eventstream import EventStreamBuffer, ParserError

from ..connectors import Connector, UpstreamRequest
from ..errors import BadRequest, ProtocolError, UpstreamError
from ..sse import SSEDecoder
from ..upstream import MAX_RESPONSE_BYTES as UPSTREAM_MAX_RESPONSE_BYTES
from .common import (JsonEventDecoder, JsonLinesDecoder, counts, encode_body, json_object, json_object_body,
                     parse_json, text)
from .events import Delta, Done, Failure, StreamItem

_INVOCATIONS = re.compile(r"/invocations/?$")
# The containers' last event repeats the whole answer (generated_text): it is bounded as
# a whole non-stream answer is, not as one token's event.
MAX_RESPONSE_BYTES = UPSTREAM_MAX_RESPONSE_BYTES
# The usage the stream's final event carries: the containers' own names, from the last
# token's details (present when the request set "details": true).
USAGE_FIELDS = ("input_length", "generated_tokens")


def _token_items(value: dict[str, Any]) -> list[StreamItem]:
    """One TGI/LMI stream object: its token's text, and Done when it is the last."""
    if value.get("error") is not None:
        kind = text(value.get("error_type")) or "error"
        return [Failure(UpstreamError(f"Error from remote service: {kind}: {str(value['error'])[:500]}"))]
    token = json_object(value.get("token"))
    piece = text(token.get("text"))
    items: list[StreamItem] = [Delta(piece)] if piece and token.get("special") is not True else []
    if isinstance(value.get("generated_text"), str):
        details = json_object(value.get("details"))
        items.append(Done(text(details.get("finish_reason")), counts(details, USAGE_FIELDS) if details else None))
    return items


class _WholeAnswerSSE(SSEDecoder):
    MAX_LINE_BYTES = MAX_EVENT_BYTES = MAX_RESPONSE_BYTES


class TGIStreamDecoder(JsonEventDecoder):
    """Hugging Face TGI's ``stream: true`` output: SSE events of token objects."""

    sse_decoder = _WholeAnswerSSE

    def on_object(self, event_name: str, value: dict[str, Any]) -> Iterable[StreamItem]:
        return _token_items(value)

    def at_end(self) -> StreamItem:
        return Failure(UpstreamError("the model's stream ended before its last token (generated_text)"))


class LMIStreamDecoder(JsonLinesDecoder):
    """AWS LMI's (DJL Serving) streaming output: JSON lines of token objects."""

    max_line_bytes = MAX_RESPONSE_BYTES

    def on_object(self, event_name: str, value: dict[str, Any]) -> Iterable[StreamItem]:
        return _token_items(value)

    def at_end(self) -> StreamItem:
        return Failure(UpstreamError("the model's stream ended before its last token (generated_text)"))


@dataclass(frozen=True, slots=True)
class SageMakerDialect:
    name: str
    container: Callable[[], JsonEventDecoder]  # the decoder of the container's own output

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        path, sep, query = request.url.partition("?")
        if not _INVOCATIONS.search(path):
            raise BadRequest(f"a {self.name} stream needs a predict action URL ending in /invocations")
        body = json_object_body(request)
        body["stream"] = True
        return replace(request, url=_INVOCATIONS.sub("/invocations-response-stream", path) + sep + query,
                       body=encode_body(body))

    def new_decoder(self) -> SageMakerStreamDecoder:
        return SageMakerStreamDecoder(self.container())


SAGEMAKER_TGI = SageMakerDialect("sagemaker/tgi", TGIStreamDecoder)
SAGEMAKER_LMI = SageMakerDialect("sagemaker/lmi", LMIStreamDecoder)


class SageMakerStreamDecoder:
    def __init__(self, container: JsonEventDecoder) -> None:
        self._buffer = EventStreamBuffer()
        self._pending_bytes = 0  # fed but not yet part of a complete frame
        self._container = container
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
                items += self._on_message(message.headers, message.payload)
                if items and isinstance(items[-1], (Done, Failure)):
                    self._ended = True
                    break
        # As for Bedrock: botocore's parser can trip past a valid CRC on impossible values.
        except (ParserError, struct.error, KeyError, IndexError, ValueError) as exc:
            self._ended = True
            items.append(Failure(UpstreamError(f"the provider's event stream is corrupt ({type(exc).__name__})")))
        return items

    def finish(self) -> list[StreamItem]:
        if self._ended:
            return []
        self._ended = True
        if self._pending_bytes:
            return [Failure(UpstreamError("the provider's event stream ended inside a frame"))]
        return self._container.finish()

    def _on_message(self, headers: Mapping[str, Any], payload: bytes) -> list[StreamItem]:
        message_type = headers.get(":message-type")
        if message_type in ("exception", "error"):
            kind = headers.get(":exception-type") or headers.get(":error-code") or "exception"
            body = json_object(parse_json(payload) if payload else None)
            message = text(body.get("Message")) or text(body.get("message")) or headers.get(":error-message") or kind
            return [Failure(UpstreamError(f"Error from remote service: {kind}: {message}"))]
        if message_type != "event" or headers.get(":event-type") != "PayloadPart":
            return []
        try:
            return self._container.feed(payload)
        except ProtocolError as error:
            return [Failure(UpstreamError(f"the model's stream is malformed: {error.reason}"))]
