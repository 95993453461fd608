"""Amazon Bedrock ConverseStream: the AWS event stream to Delta/Done/Failure.

The frames are decoded by ``eventstream.EventStreamDecoder`` (botocore's parser);
this module maps Converse's event types:

    messageStart                      -
    contentBlockStart  (toolUse)      a tool call begins: id and name
    contentBlockDelta  text           Delta(text)
                       reasoningContent.text
                                      Reasoning(text): its own field of dataAsMap
                                      (its signature and redacted parts are not relayed)
                       toolUse.input  a fragment of the tool call's JSON input
    contentBlockStop                  a finished tool call -> Delta({"toolUse": {...}})
    messageStop                       the stop reason
    metadata                          usage -> Done(stop reason, usage), usage under
                                      Bedrock's names (USAGE_FIELDS)
    :message-type exception           Failure, with the status the exception stands for
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ..models.connectors import Connector, UpstreamRequest
from ..errors import BadRequest, UpstreamError, UpstreamTimeout
from .common import ToolCall, ToolCalls, count as _count, json_object as _object, text as _text
from ..usage.tokens import token_counts
from .base import StreamKind, no_stream_of
from .events import Delta, Done, Failure, Reasoning, StreamItem
from .eventstream import EventStreamDecoder, exception_of

_CONVERSE_PATH = re.compile(r"/converse/?$")
# The usage the stream's final event carries: Bedrock's own names, as the non-stream
# Converse answer has them (cache counters and any other field are not relayed).
USAGE_FIELDS = ("inputTokens", "outputTokens", "totalTokens")

# What an exception message in the stream means for our caller (before the first
# event it becomes the HTTP status; after it, the final error event).
_EXCEPTION_STATUS = {
    "throttlingException": 429,
    "serviceQuotaExceededException": 429,
    "validationException": 400,
    "accessDeniedException": 403,
    "resourceNotFoundException": 404,
    "modelTimeoutException": 504,
}


@dataclass(frozen=True, slots=True)
class BedrockConverseDialect:
    name: str

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        path, sep, query = request.url.partition("?")
        if not _CONVERSE_PATH.search(path):
            raise BadRequest("a bedrock/converse stream needs a predict action URL ending in /converse")
        stream_url = _CONVERSE_PATH.sub("/converse-stream", path) + sep + query
        headers = dict(request.headers)
        headers.setdefault("Accept", "application/vnd.amazon.eventstream")
        # The whole body goes through: inferenceConfig, toolConfig, system, ... (beyond ml-commons).
        return replace(request, url=stream_url, headers=headers, body=_async_guardrail(request.body))

    def new_decoder(self, kind: StreamKind = StreamKind.TEXT) -> "ConverseStreamDecoder":
        if kind is StreamKind.RELAY:
            raise no_stream_of(self, kind)
        return ConverseStreamDecoder()


# What ml-commons' BedrockStreamingHandler keeps of a body's guardrailConfig (#4550).
_GUARDRAIL_STREAM_FIELDS = ("guardrailIdentifier", "guardrailVersion", "trace")


def _async_guardrail(body: bytes | None) -> bytes | None:
    """A Bedrock guardrail on a stream, as ml-commons sends it (``parseGuardrailConfig``):
    its identifier, version and trace, with ``streamProcessingMode: async`` (the answer
    streams while the guardrail checks it; an intervention ends it with stopReason
    ``guardrail_intervened``). A body without one goes out untouched."""
    if not body or b'"guardrailConfig"' not in body:
        return body
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    config = payload.get("guardrailConfig") if isinstance(payload, dict) else None
    if not isinstance(config, dict):
        return body
    payload["guardrailConfig"] = {**{k: config[k] for k in _GUARDRAIL_STREAM_FIELDS if k in config},
                                  "streamProcessingMode": "async"}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# One dialect for every Converse model: ml-commons' model-specific names are aliases.
BEDROCK_CONVERSE = BedrockConverseDialect("bedrock/converse")
BEDROCK_CONVERSE_CLAUDE = BedrockConverseDialect("bedrock/converse/claude")
BEDROCK_CONVERSE_DEEPSEEK_R1 = BedrockConverseDialect("bedrock/converse/deepseek_r1")


class ConverseStreamDecoder(EventStreamDecoder):
    def __init__(self) -> None:
        super().__init__()
        self._stop_reason: str | None = None
        self._tools = ToolCalls()

    def at_end(self) -> list[StreamItem]:
        if self._stop_reason is not None:  # messageStop came, metadata did not: still complete
            return [Done(self._stop_reason, None)]
        return [Failure(UpstreamError("the provider ended the stream before messageStop"))]

    def on_message(self, headers: Mapping[str, Any], payload: bytes) -> Iterable[StreamItem]:
        item = self._on_message(headers, payload)
        return () if item is None else (item,)

    def _on_message(self, headers: Mapping[str, Any], payload: bytes) -> StreamItem | None:
        exception = exception_of(headers, payload)
        if exception is not None:
            kind, message = exception
            reason = f"Error from remote service: {kind}: {message}"
            status = _EXCEPTION_STATUS.get(kind, 502)
            if status == 504:
                return Failure(UpstreamTimeout(reason))
            headers = {"Retry-After": "1"} if status == 429 else None
            return Failure(UpstreamError(reason, upstream_status=status, headers=headers))
        if headers.get(":message-type") != "event":
            return None
        event = headers.get(":event-type")
        body = _payload(payload)
        index = body.get("contentBlockIndex", 0)
        if not isinstance(index, int):
            index = -1  # no tool block lives there
        if event == "contentBlockDelta":
            delta = _object(body.get("delta"))
            if isinstance(delta.get("text"), str) and delta["text"]:
                return Delta(delta["text"])
            reasoning = _text(_object(delta.get("reasoningContent")).get("text"))
            if reasoning:
                return Reasoning(reasoning)
            tool_input = _object(delta.get("toolUse")).get("input")
            return self._tools.add(index, tool_input) if isinstance(tool_input, str) else None
        if event == "contentBlockStart":
            tool = _object(_object(body.get("start")).get("toolUse"))
            return self._tools.start(index, _text(tool.get("toolUseId")), _text(tool.get("name"))) if tool else None
        if event == "contentBlockStop":
            call = self._tools.stop(index)
            return None if call is None else _tool_delta(call)
        if event == "messageStop":
            self._stop_reason = _text(body.get("stopReason"))
            return None
        if event == "metadata":
            usage = _object(body.get("usage"))
            return Done(self._stop_reason, {name: _count(usage.get(name)) for name in USAGE_FIELDS},
                        token_counts(usage))
        return None  # messageStart and anything new


def _tool_delta(call: ToolCall) -> StreamItem:
    tool_input = call.input()
    if isinstance(tool_input, Failure):
        return tool_input
    return Delta({"toolUse": {"toolUseId": call.call_id, "name": call.name, "input": tool_input}})


def _payload(payload: bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload) if payload else {}
    except (ValueError, RecursionError):
        return {}
    return _object(value)
