"""The provider decoders, pure: bytes in, Delta/Done/Failure out, split at every offset."""

from __future__ import annotations

import json

import pytest

from mlstream.errors import UpstreamError
from mlstream.providers import common
from mlstream.providers.anthropic import AnthropicStreamDecoder
from mlstream.providers.bedrock import ConverseStreamDecoder
from mlstream.providers.common import MAX_OPEN_TOOL_CALLS
from mlstream.providers.events import Delta, Done, Failure, Reasoning
from mlstream.providers.gemini import GeminiStreamDecoder
from mlstream.providers.openai import OpenAIStreamDecoder
from mlstream.providers.sagemaker import (
    LMIStreamDecoder,
    SageMakerStreamDecoder,
    TGIStreamDecoder,
)
from mlstream.testing.eventstream import (
    encode_event,
    encode_exception,
    encode_message,
    encode_payload_part,
)

from ..support.decoders import (
    ANTHROPIC_STREAM,
    anthropic_error,
    anthropic_event,
    feed_all,
)


def openai_chunk(content: str | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    choices = [] if usage else [{"index": 0, "delta": {} if content is None else {"content": content},
                                 "finish_reason": finish}]
    body = {"object": "chat.completion.chunk", "choices": choices, **({"usage": usage} if usage else {})}
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


OPENAI_STREAM = (openai_chunk("") + b": keep-alive\n\n" + openai_chunk("Hel") + openai_chunk("lo été")
                 + openai_chunk(finish="stop")
                 + openai_chunk(usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
                 + b"data: [DONE]\n\n")
OPENAI_EXPECTED = [Delta("Hel"), Delta("lo été"),
                   Done("stop", {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})]


def test_openai_stream_split_at_every_offset():
    for cut in range(len(OPENAI_STREAM) + 1):
        assert feed_all(OpenAIStreamDecoder(chat=True), OPENAI_STREAM, [cut]) == OPENAI_EXPECTED, cut


def test_openai_stream_byte_by_byte():
    assert feed_all(OpenAIStreamDecoder(chat=True), OPENAI_STREAM, list(range(len(OPENAI_STREAM)))) == OPENAI_EXPECTED


@pytest.mark.parametrize("data, reason", [
    (openai_chunk("a"), "before [DONE]"),
    (b"data: {not json}\n\n", "not JSON"),
    (b'data: {"error": {"message": "overloaded"}}\n\n', "overloaded"),
    (b"data: [1, 2]\n\n", "not a JSON object"),
], ids=["no-done", "not-json", "error-event", "not-an-object"])
def test_openai_stream_failures(data, reason):
    items = feed_all(OpenAIStreamDecoder(chat=True), data, [])
    assert isinstance(items[-1], Failure) and reason in items[-1].error.reason
    assert isinstance(items[-1].error, UpstreamError)


def test_openai_legacy_completions_text_field():
    data = b'data: {"choices": [{"text": "Hi", "finish_reason": null}]}\n\ndata: [DONE]\n\n'
    assert feed_all(OpenAIStreamDecoder(chat=False), data, []) == [Delta("Hi"), Done(None, None)]


def bedrock_stream(*frames: bytes) -> bytes:
    return b"".join(frames)


BEDROCK_STREAM = bedrock_stream(
    encode_event("messageStart", {"role": "assistant", "p": "abc"}),
    encode_event("contentBlockDelta", {"delta": {"text": "To be"}, "contentBlockIndex": 0}),
    encode_event("contentBlockDelta", {"delta": {"text": ", or not"}, "contentBlockIndex": 0}),
    encode_event("contentBlockStop", {"contentBlockIndex": 0}),
    encode_event("contentBlockStart", {"start": {"toolUse": {"toolUseId": "t1", "name": "lookup"}},
                                       "contentBlockIndex": 1}),
    encode_event("contentBlockDelta", {"delta": {"toolUse": {"input": '{"q": "Ham'}}, "contentBlockIndex": 1}),
    encode_event("contentBlockDelta", {"delta": {"toolUse": {"input": 'let"}'}}, "contentBlockIndex": 1}),
    encode_event("contentBlockStop", {"contentBlockIndex": 1}),
    encode_event("messageStop", {"stopReason": "tool_use"}),
    encode_event("metadata", {"usage": {"inputTokens": 9, "outputTokens": 4, "totalTokens": 13},
                              "metrics": {"latencyMs": 5}}),
)
BEDROCK_EXPECTED = [Delta("To be"), Delta(", or not"),
                    Delta({"toolUse": {"toolUseId": "t1", "name": "lookup", "input": {"q": "Hamlet"}}}),
                    Done("tool_use", {"inputTokens": 9, "outputTokens": 4, "totalTokens": 13})]


def test_bedrock_stream_split_at_every_offset():
    for cut in range(0, len(BEDROCK_STREAM) + 1, 3):
        assert feed_all(ConverseStreamDecoder(), BEDROCK_STREAM, [cut]) == BEDROCK_EXPECTED, cut


@pytest.mark.parametrize("data, status, reason", [
    (encode_exception("throttlingException", "slow down"), 429, "slow down"),
    (encode_exception("validationException", "bad input"), 400, "bad input"),
    (encode_exception("modelStreamErrorException", "boom"), 502, "boom"),
    (BEDROCK_STREAM[:-7], 502, "ended inside a frame"),
    (BEDROCK_STREAM[:len(encode_event("messageStart", {"role": "assistant", "p": "abc"}))], 502, "before messageStop"),
], ids=["throttling", "validation", "model-error", "truncated", "no-message-stop"])
def test_bedrock_failures(data, status, reason):
    items = feed_all(ConverseStreamDecoder(), data, [])
    assert isinstance(items[-1], Failure)
    assert items[-1].error.http_status == status and reason in items[-1].error.reason


def test_bedrock_corrupt_crc_is_a_failure_not_an_exception():
    frame = bytearray(encode_event("contentBlockDelta", {"delta": {"text": "x"}, "contentBlockIndex": 0}))
    frame[-1] ^= 0xFF
    items = feed_all(ConverseStreamDecoder(), bytes(frame), [])
    assert len(items) == 1 and isinstance(items[0], Failure) and "corrupt" in items[0].error.reason


def test_bedrock_message_stop_without_metadata_still_completes():
    data = encode_event("messageStop", {"stopReason": "end_turn"})
    assert feed_all(ConverseStreamDecoder(), data, []) == [Done("end_turn", None)]


BEDROCK_REASONING_STREAM = bedrock_stream(
    encode_event("messageStart", {"role": "assistant"}),
    encode_event("contentBlockDelta", {"delta": {"reasoningContent": {"text": "The user asks"}}, "contentBlockIndex": 0}),
    encode_event("contentBlockDelta", {"delta": {"reasoningContent": {"text": " about Hamlet."}},
                                       "contentBlockIndex": 0}),
    encode_event("contentBlockDelta", {"delta": {"reasoningContent": {"signature": "c2ln"}}, "contentBlockIndex": 0}),
    encode_event("contentBlockDelta", {"delta": {"reasoningContent": {"redactedContent": "cmVk"}},
                                       "contentBlockIndex": 0}),
    encode_event("contentBlockStop", {"contentBlockIndex": 0}),
    encode_event("contentBlockDelta", {"delta": {"text": "A prince."}, "contentBlockIndex": 1}),
    encode_event("messageStop", {"stopReason": "end_turn"}),
    encode_event("metadata", {"usage": {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8}}),
)


def test_bedrock_reasoning_is_its_own_item_never_content():
    expected = [Reasoning("The user asks"), Reasoning(" about Hamlet."), Delta("A prince."),
                Done("end_turn", {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8})]
    for cut in range(0, len(BEDROCK_REASONING_STREAM) + 1, 5):
        assert feed_all(ConverseStreamDecoder(), BEDROCK_REASONING_STREAM, [cut]) == expected, cut




ANTHROPIC_EXPECTED = [Reasoning("Hmm, Hamlet."), Delta("To be"), Delta(", or not été"),
                      Delta({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "Hamlet"}}),
                      Done("tool_use", {"input_tokens": 12, "output_tokens": 30})]


def test_anthropic_stream_split_at_every_offset():
    for cut in range(len(ANTHROPIC_STREAM) + 1):
        assert feed_all(AnthropicStreamDecoder(), ANTHROPIC_STREAM, [cut]) == ANTHROPIC_EXPECTED, cut


def test_anthropic_stream_byte_by_byte():
    assert feed_all(AnthropicStreamDecoder(), ANTHROPIC_STREAM,
                    list(range(len(ANTHROPIC_STREAM)))) == ANTHROPIC_EXPECTED




@pytest.mark.parametrize("data, status, reason", [
    (anthropic_error("overloaded_error"), 503, "overloaded_error: overloaded_error says no"),
    (anthropic_error("rate_limit_error"), 429, "rate_limit_error says no"),
    (anthropic_error("invalid_request_error"), 400, "invalid_request_error says no"),
    (anthropic_error("api_error"), 502, "api_error says no"),
    (anthropic_error("timeout_error"), 504, "timeout_error says no"),
    (ANTHROPIC_STREAM[:ANTHROPIC_STREAM.index(b"event: message_stop")], 502, "before message_stop"),
    (anthropic_event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "t", "name": "f"}}) + anthropic_event("content_block_delta", {
            "type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}})
     + anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 0}), 502, "not a JSON object"),
    (b"event: message_start\ndata: {nope\n\n", 502, "not JSON"),
], ids=["overloaded", "rate-limit", "invalid", "api", "timeout", "no-message-stop", "bad-tool-json", "not-json"])
def test_anthropic_failures(data, status, reason):
    items = feed_all(AnthropicStreamDecoder(), data, [])
    assert isinstance(items[-1], Failure), items
    assert items[-1].error.http_status == status and reason in items[-1].error.reason
    if status in (429, 503):
        assert items[-1].error.headers["Retry-After"] == "1"


def gemini_chunk(parts: list | None = None, finish: str | None = None, usage: dict | None = None, **extra) -> bytes:
    body: dict = dict(extra)
    if parts is not None or finish is not None:
        candidate: dict = {"content": {"parts": parts or [], "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        body["candidates"] = [candidate]
    if usage:
        body["usageMetadata"] = usage
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\r\n\r\n"


GEMINI_USAGE = {"promptTokenCount": 4, "candidatesTokenCount": 6, "totalTokenCount": 10, "thoughtsTokenCount": 2}
GEMINI_STREAM = b"".join([
    gemini_chunk([{"text": "Pondering.", "thought": True}], usage={"promptTokenCount": 4}),
    gemini_chunk([{"text": "To be"}]),
    gemini_chunk([{"text": ", or not été"}, {"functionCall": {"name": "lookup", "args": {"q": "Hamlet"}}}]),
    gemini_chunk([{"text": ""}], finish="STOP", usage=GEMINI_USAGE, modelVersion="gemini-2.5-flash"),
])
GEMINI_EXPECTED = [Reasoning("Pondering."), Delta("To be"), Delta(", or not été"),
                   Delta({"functionCall": {"name": "lookup", "args": {"q": "Hamlet"}}}),
                   Done("STOP", {"promptTokenCount": 4, "candidatesTokenCount": 6, "totalTokenCount": 10})]


def test_gemini_stream_split_at_every_offset():
    for cut in range(len(GEMINI_STREAM) + 1):
        assert feed_all(GeminiStreamDecoder(), GEMINI_STREAM, [cut]) == GEMINI_EXPECTED, cut


def test_gemini_stream_byte_by_byte():
    assert feed_all(GeminiStreamDecoder(), GEMINI_STREAM, list(range(len(GEMINI_STREAM)))) == GEMINI_EXPECTED


@pytest.mark.parametrize("data, status, reason", [
    (gemini_chunk(promptFeedback={"blockReason": "SAFETY"}, usage={"promptTokenCount": 3}), 400,
     "the prompt was blocked: SAFETY"),
    (gemini_chunk([{"text": "Some"}]) + gemini_chunk([], finish="SAFETY"), 400, "the answer was blocked: SAFETY"),
    (gemini_chunk([], finish="RECITATION"), 400, "the answer was blocked: RECITATION"),
    (b'data: {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}\n\n', 503,
     "UNAVAILABLE: The model is overloaded."),
    (b'data: {"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}}\n\n', 429, "Quota"),
    (b'data: {"error": {"code": 500, "message": "Internal", "status": "INTERNAL"}}\n\n', 502, "INTERNAL"),
    (gemini_chunk([{"text": "cut"}]), 502, "before a finishReason"),
], ids=["prompt-blocked", "answer-blocked", "recitation", "unavailable", "quota", "internal", "no-finish"])
def test_gemini_failures(data, status, reason):
    items = feed_all(GeminiStreamDecoder(), data, [])
    assert isinstance(items[-1], Failure), items
    assert items[-1].error.http_status == status and reason in items[-1].error.reason


def test_gemini_stream_url_keeps_the_query_and_asks_for_sse():
    from mlstream.models.connectors import UpstreamRequest
    from mlstream.providers.gemini import GEMINI_GENERATE_CONTENT
    request = UpstreamRequest("POST", "https://g/v1beta/models/gemini-2.5-flash:generateContent?key=k&alt=json",
                              {}, b"{}")
    streamed = GEMINI_GENERATE_CONTENT.stream_request(request, None, {})  # type: ignore[arg-type]
    assert streamed.url == "https://g/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=k&alt=sse"
    assert streamed.headers["Accept"] == "text/event-stream"


def tgi_event(text: str, *, special: bool = False, last: str | None = None, details: dict | None = None) -> bytes:
    body = {"index": 1, "token": {"id": 7, "text": text, "logprob": -0.1, "special": special},
            "generated_text": last, "details": details}
    return b"data:" + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def lmi_line(text: str, *, last: str | None = None, details: dict | None = None) -> bytes:
    body = {"token": {"id": [7], "text": text, "log_prob": -0.1}, "generated_text": last, "details": details}
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


SAGEMAKER_DETAILS = {"finish_reason": "eos_token", "generated_tokens": 3, "input_length": 5, "seed": None}
SAGEMAKER_EXPECTED = [Delta("To be"), Delta(", or not été"),
                      Done("eos_token", {"input_length": 5, "generated_tokens": 3})]
TGI_BYTES = (tgi_event("To be") + tgi_event(", or not été") +
             tgi_event("</s>", special=True, last="To be, or not été", details=SAGEMAKER_DETAILS))
LMI_BYTES = (lmi_line("To be") + lmi_line(", or not été") +
             lmi_line("", last="To be, or not été", details=SAGEMAKER_DETAILS))


def payload_parts(data: bytes, size: int) -> bytes:
    """The container's bytes cut into PayloadPart frames of ``size`` bytes (cuts anywhere)."""
    return b"".join(encode_payload_part(data[i:i + size]) for i in range(0, len(data), size))


@pytest.mark.parametrize("decoder, data", [(TGIStreamDecoder, TGI_BYTES), (LMIStreamDecoder, LMI_BYTES)],
                         ids=["tgi", "lmi"])
@pytest.mark.parametrize("part_size", [1, 7, 10_000])
def test_sagemaker_stream_split_at_every_offset(decoder, data, part_size):
    frames = payload_parts(data, part_size)
    # Every offset when the frames are few; some 400 offsets when many (each costs a whole decode).
    for cut in range(0, len(frames) + 1, max(1, len(frames) // 400)):
        assert feed_all(SageMakerStreamDecoder(decoder()), frames, [cut]) == SAGEMAKER_EXPECTED, cut


def sagemaker_exception(kind: str, message: str) -> bytes:
    return encode_message({":exception-type": kind, ":content-type": "application/json",
                           ":message-type": "exception"},
                          json.dumps({"Message": message, "ErrorCode": "ModelError"}).encode())


@pytest.mark.parametrize("data, reason", [
    (payload_parts(tgi_event("a"), 4) + sagemaker_exception("ModelStreamError", "the model broke"),
     "ModelStreamError: the model broke"),
    (sagemaker_exception("InternalStreamFailure", "internal"), "InternalStreamFailure: internal"),
    (payload_parts(tgi_event("a"), 100), "before its last token"),
    (payload_parts(tgi_event("a"), 100)[:-3], "ended inside a frame"),
    (payload_parts(b'data:{"error": "Input validation error", "error_type": "validation"}\n\n', 9),
     "validation: Input validation error"),
], ids=["model-stream-error", "internal-failure", "no-last-token", "truncated-frame", "tgi-error"])
def test_sagemaker_failures(data, reason):
    items = feed_all(SageMakerStreamDecoder(TGIStreamDecoder()), data, [])
    assert isinstance(items[-1], Failure) and reason in items[-1].error.reason, items


def test_lmi_last_line_without_newline_still_ends_the_answer():
    data = payload_parts(LMI_BYTES.rstrip(b"\n"), 5)
    assert feed_all(SageMakerStreamDecoder(LMIStreamDecoder()), data, []) == SAGEMAKER_EXPECTED


def test_lmi_line_past_the_bound_is_a_failure(monkeypatch):
    monkeypatch.setattr(LMIStreamDecoder, "max_line_bytes", 1000)
    data = encode_payload_part(b"x" * 1001)
    items = feed_all(SageMakerStreamDecoder(LMIStreamDecoder()), data, [])
    assert len(items) == 1 and "malformed" in items[0].error.reason


# --- tool calls are bounded: how many are open at once, and their input in all -----------

def anthropic_tool_start(index: int) -> bytes:
    return anthropic_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
        "type": "tool_use", "id": f"toolu_{index}", "name": "lookup", "input": {}}})


def anthropic_tool_input(index: int, fragment: str) -> bytes:
    return anthropic_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "input_json_delta", "partial_json": fragment}})


def bedrock_tool_start(index: int) -> bytes:
    return encode_event("contentBlockStart", {"start": {"toolUse": {"toolUseId": f"t{index}", "name": "lookup"}},
                                              "contentBlockIndex": index})


def bedrock_tool_input(index: int, fragment: str) -> bytes:
    return encode_event("contentBlockDelta", {"delta": {"toolUse": {"input": fragment}}, "contentBlockIndex": index})


TOOL_DIALECTS = [(AnthropicStreamDecoder, anthropic_tool_start, anthropic_tool_input),
                 (ConverseStreamDecoder, bedrock_tool_start, bedrock_tool_input)]


@pytest.mark.parametrize("decoder, start, _", TOOL_DIALECTS, ids=["anthropic", "bedrock"])
def test_too_many_open_tool_calls_end_the_stream(decoder, start, _):
    at_bound = b"".join(start(index) for index in range(MAX_OPEN_TOOL_CALLS))
    assert feed_all(decoder(), at_bound, [])[:-1] == []  # (the last item: the stream ended early)
    items = decoder().feed(at_bound + start(MAX_OPEN_TOOL_CALLS) + start(MAX_OPEN_TOOL_CALLS + 1))
    assert len(items) == 1 and isinstance(items[0], Failure), items
    assert items[0].error.http_status == 502 and "more than 128 tool calls" in items[0].error.reason


@pytest.mark.parametrize("decoder, start, add", TOOL_DIALECTS, ids=["anthropic", "bedrock"])
def test_tool_call_input_past_the_bound_ends_the_stream(monkeypatch, decoder, start, add):
    monkeypatch.setattr(common, "MAX_TOOL_INPUT_CHARS", 100)
    # two calls: the bound is on a stream's tool input in all, not per call
    data = start(0) + add(0, "x" * 60) + start(1) + add(1, "y" * 40)
    assert decoder().feed(data) == []
    items = decoder().feed(data + add(1, "z") + add(1, "more"))
    assert len(items) == 1 and isinstance(items[0], Failure), items
    assert items[0].error.http_status == 502 and "longer than 100 characters" in items[0].error.reason


def test_a_streamed_request_body_keeps_an_integer_past_64_bits_exact() -> None:
    from mlstream.models.connectors import UpstreamRequest
    from mlstream.providers.openai import OPENAI_CHAT

    body = b'{"model": "m", "seed": 123456789012345678901234567890, "temperature": 0.5}'
    streamed = OPENAI_CHAT.stream_request(UpstreamRequest("POST", "http://x/v1/chat/completions", {}, body),
                                          None, {})  # type: ignore[arg-type]
    assert b'"seed":123456789012345678901234567890' in streamed.body and b'"stream":true' in streamed.body
