"""The OpenAI front over Amazon Bedrock Converse: a chat.completions request as Converse
fields, a Converse answer as chat.completion. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..conversation import Image, Part, Text, ToolUse
from .wire import (
    body_with_fields,
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

# OpenAI's fields that Converse has no place for and that change nothing in the answer's
# meaning; they are accepted and dropped (docs/openai.md).
_CONVERSE_IGNORED = frozenset({"user", "seed", "store", "metadata", "parallel_tool_calls", "presence_penalty",
                               "frequency_penalty", "service_tier", "stream_options", "logit_bias"})
_CONVERSE_TAKEN = frozenset({"model", "stream", "messages", "max_tokens", "max_completion_tokens", "temperature",
                             "top_p", "stop", "tools", "tool_choice", "n", "response_format", "logprobs",
                             "top_logprobs"})


def converse_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Converse fields for a chat.completions request: ``messages``, ``system``,
    ``inferenceConfig`` and ``toolConfig`` (only those the request has)."""
    refuse_unknown(body, _CONVERSE_TAKEN, _CONVERSE_IGNORED, "Bedrock Converse")
    one_text_choice(body, "Bedrock Converse")
    system, turns = conversation(body, "Bedrock Converse")
    fields: dict[str, Any] = {"messages": [{"role": turn.role, "content": [_converse_block(part) for part in turn.parts]}
                                           for turn in turns]}
    if system:
        fields["system"] = [{"text": text} for text in system]
    inference = _inference_config(body)
    if inference:
        fields["inferenceConfig"] = inference
    tool_config = _tool_config(body.get("tools"), body.get("tool_choice"))
    if tool_config:
        fields["toolConfig"] = tool_config
    return fields


def converse_body(rendered: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The connector's rendered Converse body with the translated fields set on it; the
    client's ``inferenceConfig`` values over the connector's."""
    return body_with_fields(rendered, fields, "inferenceConfig")


def _converse_block(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"text": part.text}
    if isinstance(part, Image):
        return {"image": {"format": part.media_type.removeprefix("image/"),
                          "source": {"bytes": part.inline_data("Converse")}}}
    if isinstance(part, ToolUse):
        return {"toolUse": {"toolUseId": part.call_id, "name": part.name, "input": part.arguments}}
    return {"toolResult": {"toolUseId": part.call_id, "content": [{"text": text} for text in part.texts]}}


def _inference_config(body: Mapping[str, Any]) -> dict[str, Any]:
    return sampling(body, {"max_tokens": "maxTokens", "temperature": "temperature", "top_p": "topP",
                           "stop": "stopSequences"})


def _tool_config(tools: Any, choice: Any) -> dict[str, Any] | None:
    functions = tool_functions(tools)
    choice = tool_choice(choice)
    if functions is None or choice == "none":
        return None  # "none": the model is not offered the tools
    specs = []
    for function in functions:
        spec: dict[str, Any] = {"name": function["name"], "inputSchema": {"json": function["parameters"]}}
        if "description" in function:
            spec["description"] = function["description"]
        specs.append({"toolSpec": spec})
    named = {"auto": {"auto": {}}, "required": {"any": {}}}
    return {"tools": specs, "toolChoice": named.get(choice) or {"tool": {"name": choice[1]}}}


def chat_completion_from_converse(answer: Any, *, completion_id: str, created: int, model: str) -> dict[str, Any]:
    """A Converse answer as OpenAI's ``chat.completion``."""
    answer = answer if isinstance(answer, dict) else {}
    output = answer.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    blocks = message.get("content") if isinstance(message, dict) else None
    texts, reasoning, calls = [], [], []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif (found := tool_call(block)) is not None:
            calls.append(found)
        elif isinstance(block.get("reasoningContent"), dict):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            if isinstance(text, str):
                reasoning.append(text)
    choice = completion_choice(0, texts, reasoning, calls, answer.get("stopReason"))
    return chat_completion([choice], answer.get("usage"), completion_id=completion_id, created=created, model=model)
