"""Amazon SageMaker ``InvokeEndpointWithResponseStream``: event-stream frames carrying the
container's own token stream.

The connector's URL ends in ``/endpoints/{name}/invocations`` (``InvokeEndpoint``); the
stream calls ``/invocations-response-stream`` with the same body plus ``"stream":
true``. The answer is AWS event-stream frames (``eventstream.EventStreamDecoder``, as
for Bedrock):

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

A chat request (``messages``, the OpenAI front's) is answered in the containers' chat
completions schema instead (``new_decoder(StreamKind.CHAT)``): ``chat.completion.chunk`` objects, as
SSE ending in ``data: [DONE]`` (TGI's Messages API) or JSON lines (LMI). Content is
Delta(text), ``reasoning_content`` Reasoning, tool-call deltas are assembled into one
Delta per call (OpenAI's shape) when the choice finishes; Done at ``[DONE]`` or at the
body's end after a finish_reason, with the last chunk's usage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..models.connectors import Connector, UpstreamRequest
from ..errors import BadRequest, ProtocolError, UpstreamError
from ..wire.sse import SSEDecoder
from .common import (MAX_RESPONSE_BYTES, ChatChunks, JsonEventDecoder, JsonLinesDecoder, counts, encode_body, json_object,
                     json_object_body, text)
from ..usage.tokens import token_counts
from .base import StreamKind, no_stream_of
from .events import Delta, Done, Failure, StreamItem
from .eventstream import EventStreamDecoder, exception_of

_INVOCATIONS = re.compile(r"/invocations/?$")
# The containers' last event repeats the whole answer (generated_text): it is bounded as
# a whole non-stream answer is (MAX_RESPONSE_BYTES), not as one token's event.
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
        items.append(Done(text(details.get("finish_reason")), counts(details, USAGE_FIELDS) if details else None,
                          token_counts(details)))
    return items


class _WholeAnswerSSE(SSEDecoder):
    MAX_LINE_BYTES = MAX_EVENT_BYTES = MAX_RESPONSE_BYTES


class _TokenObjects:
    """What TGI and LMI share: the same token objects, in different framing."""

    def on_object(self, value: dict[str, Any]) -> Iterable[StreamItem]:
        return _token_items(value)

    def at_end(self) -> StreamItem:
        return Failure(UpstreamError("the model's stream ended before its last token (generated_text)"))


class TGIStreamDecoder(_TokenObjects, JsonEventDecoder):
    """Hugging Face TGI's ``stream: true`` output: SSE events of token objects."""

    sse_decoder = _WholeAnswerSSE


class LMIStreamDecoder(_TokenObjects, JsonLinesDecoder):
    """AWS LMI's (DJL Serving) streaming output: JSON lines of token objects."""

    max_line_bytes = MAX_RESPONSE_BYTES


class TGIChatDecoder(ChatChunks, JsonEventDecoder):
    """TGI's Messages API stream: SSE chunks, then ``data: [DONE]``."""


class LMIChatDecoder(ChatChunks, JsonLinesDecoder):
    """LMI's chat completions stream: JSON lines of chunks, no end marker."""


@dataclass(frozen=True, slots=True)
class SageMakerDialect:
    name: str
    container: Callable[[], JsonEventDecoder]  # the decoder of the container's own output
    chat: Callable[[], JsonEventDecoder]       # ... of its chat completions output

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        path, sep, query = request.url.partition("?")
        if not _INVOCATIONS.search(path):
            raise BadRequest(f"a {self.name} stream needs a predict action URL ending in /invocations")
        body = json_object_body(request)
        body["stream"] = True
        return replace(request, url=_INVOCATIONS.sub("/invocations-response-stream", path) + sep + query,
                       body=encode_body(body))

    def new_decoder(self, kind: StreamKind = StreamKind.TEXT) -> SageMakerStreamDecoder:
        """CHAT: a front's request in the container's chat schema (``messages``), and so its stream."""
        if kind is StreamKind.RELAY:
            raise no_stream_of(self, kind)
        return SageMakerStreamDecoder(self.chat() if kind is StreamKind.CHAT else self.container())


SAGEMAKER_TGI = SageMakerDialect("sagemaker/tgi", TGIStreamDecoder, TGIChatDecoder)
SAGEMAKER_LMI = SageMakerDialect("sagemaker/lmi", LMIStreamDecoder, LMIChatDecoder)


class SageMakerStreamDecoder(EventStreamDecoder):
    def __init__(self, container: JsonEventDecoder) -> None:
        super().__init__()
        self._container = container

    def at_end(self) -> list[StreamItem]:
        return self._container.finish()

    def on_message(self, headers: Mapping[str, Any], payload: bytes) -> Iterable[StreamItem]:
        exception = exception_of(headers, payload)
        if exception is not None:
            return [Failure(UpstreamError(f"Error from remote service: {exception[0]}: {exception[1]}"))]
        if headers.get(":message-type") != "event" or headers.get(":event-type") != "PayloadPart":
            return ()
        try:
            return self._container.feed(payload)
        except ProtocolError as error:
            return [Failure(UpstreamError(f"the model's stream is malformed: {error.reason}"))]
