"""The OpenAI front over Anthropic Messages: a chat.completions request as Messages fields,
a Messages answer as chat.completion. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidField
from ..conversation import Image, Part, Text, ToolUse
from .wire import (
    CHAT_FIELDS,
    IGNORED_FIELDS,
    chat_completion,
    completion_choice,
    conversation,
    one_text_choice,
    refuse_unknown,
    sampling,
    tool_call,
    tool_choice,
    tool_functions,
)

ANTHROPIC = "Anthropic"
# Anthropic requires max_tokens. Used when neither the client (max_tokens,
# max_completion_tokens) nor the connector's request_body gives one.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
_ANTHROPIC_TAKEN = CHAT_FIELDS | {"user", "parallel_tool_calls"}
_ANTHROPIC_IGNORED = IGNORED_FIELDS | {"seed", "presence_penalty", "frequency_penalty"}


def anthropic_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages API fields for a chat.completions request (only those it has)."""
    refuse_unknown(body, _ANTHROPIC_TAKEN, _ANTHROPIC_IGNORED, ANTHROPIC)
    one_text_choice(body, ANTHROPIC)
    system, turns = conversation(body, ANTHROPIC)
    fields: dict[str, Any] = {"messages": [{"role": turn.role, "content": [_anthropic_block(p) for p in turn.parts]}
                                           for turn in turns]}
    if system:
        fields["system"] = [{"type": "text", "text": text} for text in system]
    fields.update(sampling(body, {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p",
                                  "stop": "stop_sequences"}))
    functions = tool_functions(body.get("tools"))
    if functions is not None:
        fields["tools"] = [{"name": f["name"], "input_schema": f["parameters"],
                            **({"description": f["description"]} if "description" in f else {})} for f in functions]
        choice = tool_choice(body.get("tool_choice"))
        named = {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"}}
        fields["tool_choice"] = named.get(choice) or {"type": "tool", "name": choice[1]}
        if body.get("parallel_tool_calls") is False and choice != "none":
            fields["tool_choice"]["disable_parallel_tool_use"] = True
    user = body.get("user")
    if user is not None:
        if not isinstance(user, str):
            raise InvalidField("'user' must be a string", param="user")
        fields["metadata"] = {"user_id": user}
    return fields


def anthropic_body(rendered: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The connector's rendered body with the translated fields set on it: its ``model``,
    its ``max_tokens`` unless the client gave one (else ANTHROPIC_DEFAULT_MAX_TOKENS), and
    any other field of its own are kept; its ``messages`` are the client's."""
    body = {**rendered, **fields}
    if not isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = ANTHROPIC_DEFAULT_MAX_TOKENS
    return body


def _anthropic_block(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Image):
        source = ({"type": "base64", "media_type": part.media_type, "data": part.data} if part.data is not None
                  else {"type": "url", "url": part.url})
        return {"type": "image", "source": source}
    if isinstance(part, ToolUse):
        return {"type": "tool_use", "id": part.call_id, "name": part.name, "input": part.arguments}
    return {"type": "tool_result", "tool_use_id": part.call_id,
            "content": [{"type": "text", "text": text} for text in part.texts]}


def chat_completion_from_anthropic(answer: Any, *, completion_id: str, created: int, model: str) -> dict[str, Any]:
    """A Messages API answer as ``chat.completion``: text blocks the content, thinking blocks
    ``reasoning_content``, tool_use blocks the tool calls."""
    answer = answer if isinstance(answer, dict) else {}
    texts, reasoning, calls = [], [], []
    blocks = answer.get("content")
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif (found := tool_call(block)) is not None:
            calls.append(found)
    choice = completion_choice(0, texts, reasoning, calls, answer.get("stop_reason"))
    return chat_completion([choice], answer.get("usage"), completion_id=completion_id, created=created, model=model)
