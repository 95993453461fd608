"""Google Gemini ``generateContent`` (v1beta), streamed as SSE (``gemini/v1beta/generatecontent``).

The connector's URL ends in ``:generateContent`` (ml-commons' Gemini connector);
the stream calls ``:streamGenerateContent?alt=sse``, whose every SSE event is a whole
``GenerateContentResponse``. Of its first candidate:

    content.parts[].text                   Delta(text)
    content.parts[].text, "thought": true  Reasoning(text): its own field of dataAsMap
    content.parts[].functionCall           Delta({"functionCall": {...}}), as Gemini sends
                                           it (a call always arrives whole)
    finishReason                           the finish reason; a safety finish (SAFETY,
                                           RECITATION, BLOCKLIST, ...) is a Failure
    usageMetadata                          the usage, USAGE_FIELDS of the latest event
    promptFeedback.blockReason             the prompt was blocked: Failure
    error                                  Failure, with the status its code stands for

Gemini sends no end marker: the body's end after a finish reason is Done (finish
reason, usage); the end before one is a Failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ..models.connectors import Connector, UpstreamRequest
from ..errors import BadRequest, UpstreamError, UpstreamOverloaded, UpstreamTimeout
from .common import JsonEventDecoder, counts, json_object, text
from ..usage.tokens import token_counts
from .base import StreamKind, no_stream_of
from .events import Delta, Done, Failure, Reasoning, StreamItem

_GENERATE = re.compile(r":generateContent$")
# The usage the stream's final event carries: Gemini's own names, as its non-stream
# answer has them (the per-modality details and any other field are not relayed).
USAGE_FIELDS = ("promptTokenCount", "candidatesTokenCount", "totalTokenCount")
# The finish reasons that mean the answer was withheld, not finished.
BLOCKED_FINISH = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                            "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"})
# A content block is the provider refusing the request's content: the caller's to change.
BLOCKED_STATUS = 400


@dataclass(frozen=True, slots=True)
class GeminiDialect:
    name: str

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        path, _, query = request.url.partition("?")
        if not _GENERATE.search(path):
            raise BadRequest("a gemini/v1beta/generatecontent stream needs a predict action URL ending in "
                             ":generateContent")
        params = [part for part in query.split("&") if part and not part.startswith("alt=")]
        stream_url = _GENERATE.sub(":streamGenerateContent", path) + "?" + "&".join([*params, "alt=sse"])
        headers = dict(request.headers)
        headers.setdefault("Accept", "text/event-stream")
        return replace(request, url=stream_url, headers=headers)

    def new_decoder(self, kind: StreamKind = StreamKind.TEXT) -> "GeminiStreamDecoder":
        if kind is StreamKind.RELAY:
            raise no_stream_of(self, kind)
        return GeminiStreamDecoder()


GEMINI_GENERATE_CONTENT = GeminiDialect("gemini/v1beta/generatecontent")


def is_generate_content(url_path: str) -> bool:
    return bool(_GENERATE.search(url_path))


def error_failure(error: Mapping[str, Any]) -> Failure:
    """A Google API error object (``{"code", "status", "message"}``) as our Failure."""
    code = error.get("code")
    status_name = text(error.get("status")) or "ERROR"
    reason = f"Error from remote service: {status_name}: {text(error.get('message')) or status_name}"
    if code == 503:
        return Failure(UpstreamOverloaded(reason))
    if code == 504:
        return Failure(UpstreamTimeout(reason))
    headers = {"Retry-After": "1"} if code == 429 else None
    return Failure(UpstreamError(reason, upstream_status=code if isinstance(code, int) else None, headers=headers))


class GeminiStreamDecoder(JsonEventDecoder):
    def __init__(self) -> None:
        super().__init__()
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._response: tuple[str | None, str | None] | None = None  # responseId, modelVersion

    def on_object(self, value: dict[str, Any]) -> Iterable[StreamItem]:
        if value.get("error") is not None:
            return [error_failure(json_object(value["error"]))]
        usage = value.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage = usage
        if self._response is None:
            self._response = (text(value.get("responseId")), text(value.get("modelVersion")))
        feedback = json_object(value.get("promptFeedback"))
        if text(feedback.get("blockReason")):
            return [Failure(UpstreamError(f"Error from remote service: the prompt was blocked: "
                                          f"{feedback['blockReason']}", upstream_status=BLOCKED_STATUS))]
        candidates = value.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return ()
        candidate = json_object(candidates[0])
        items: list[StreamItem] = []
        parts = json_object(candidate.get("content")).get("parts")
        for part in parts if isinstance(parts, list) else ():
            part = json_object(part)
            piece = text(part.get("text"))
            if piece:
                items.append(Reasoning(piece) if part.get("thought") is True else Delta(piece))
            elif isinstance(part.get("functionCall"), dict):
                items.append(Delta({"functionCall": part["functionCall"]}))
        finish = text(candidate.get("finishReason"))
        if finish in BLOCKED_FINISH:
            items.append(Failure(UpstreamError(f"Error from remote service: the answer was blocked: {finish}",
                                               upstream_status=BLOCKED_STATUS)))
        elif finish:
            self._finish_reason = finish
        return items

    def at_end(self) -> StreamItem:
        if self._finish_reason is None:
            return Failure(UpstreamError("the provider ended the stream before a finishReason"))
        response_id, response_model = self._response or (None, None)
        return Done(self._finish_reason, None if self._usage is None else counts(self._usage, USAGE_FIELDS),
                    token_counts(self._usage), response_id, response_model)
