"""What the decoder tests share: feeding a decoder in pieces, and an Anthropic stream."""

from __future__ import annotations

import json


def feed_all(decoder, data: bytes, cuts: list[int]) -> list:
    items = []
    previous = 0
    for cut in [*cuts, len(data)]:
        items += decoder.feed(data[previous:cut])
        previous = cut
    return items + decoder.finish()


def anthropic_event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


ANTHROPIC_STREAM = b"".join([
    anthropic_event("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-x",
        "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 0}}}),
    anthropic_event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "thinking", "thinking": ""}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "thinking_delta", "thinking": "Hmm, Hamlet."}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "signature_delta", "signature": "c2ln"}}),
    anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
    anthropic_event("content_block_start", {"type": "content_block_start", "index": 1,
                                            "content_block": {"type": "text", "text": ""}}),
    anthropic_event("ping", {"type": "ping"}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                            "delta": {"type": "text_delta", "text": "To be"}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                            "delta": {"type": "text_delta", "text": ", or not été"}}),
    anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 1}),
    anthropic_event("content_block_start", {"type": "content_block_start", "index": 2, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 2,
                                            "delta": {"type": "input_json_delta", "partial_json": '{"q": "Ham'}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 2,
                                            "delta": {"type": "input_json_delta", "partial_json": 'let"}'}}),
    anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 2}),
    anthropic_event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                                      "usage": {"output_tokens": 30}}),
    anthropic_event("message_stop", {"type": "message_stop"}),
])


def anthropic_error(kind: str) -> bytes:
    return anthropic_event("error", {"type": "error", "error": {"type": kind, "message": f"{kind} says no"}})
