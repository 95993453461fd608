"""Anthropic Messages shapes: what the Anthropic front checks, reads and answers. Pure.

    chat_request            a Messages request -> a chat.completions request (OpenAI's
                            messages and functions), which ``fronts.chat`` sends to any
                            chat model with the OpenAI front's translations
    message                 a chat answer (``chat.ChatAnswer``) -> Anthropic's ``message``
    stop_reason / usage     OpenAI's finish_reason and usage, Anthropic's names
    estimate_tokens         ``count_tokens``' estimate: no provider is asked

    Messages                                chat.completions
    system (a string or text blocks), and   a system message
      a message of role system
    user text / image (base64, url)         user text / image_url parts (a data URL)
    user tool_result (tool_use_id,          a tool message (tool_call_id, its text), before
      content text, is_error)               the user's other parts
    assistant text / tool_use               assistant content / tool_calls (input as JSON text)
    assistant thinking, redacted_thinking   dropped (no chat counterpart)
    tools (name, description, input_schema) function tools
    tool_choice auto / any / tool / none    auto / required / {"function": {name}} / none;
      disable_parallel_tool_use             parallel_tool_calls: false
    max_tokens, temperature, top_p,         max_completion_tokens, temperature, top_p,
      stop_sequences, metadata.user_id        stop, user
    top_k, thinking, service_tier,          dropped (no counterpart on every provider)
      cache_control on any block
    other fields, document blocks,          400 naming the field
      server tools
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import InvalidField
from ..chat import ChatAnswer

# Fields a Messages request may carry that have no chat counterpart on every provider
# and change nothing in the answer's meaning: accepted and dropped.
IGNORED_FIELDS = frozenset({"top_k", "thinking", "service_tier", "context_management", "container",
                            "anthropic_version", "betas", "output_config"})
_TAKEN = frozenset({"model", "stream", "messages", "system", "max_tokens", "temperature", "top_p", "stop_sequences",
                    "tools", "tool_choice", "metadata"})
# OpenAI's finish_reason -> Anthropic's stop_reason.
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "content_filter": "refusal"}
_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# count_tokens' estimate: characters per token of English text and JSON, as a rule of thumb
# (a model's tokenizer differs; the provider's exact counts come back in every answer's usage).
CHARS_PER_TOKEN = 4


def model_reference(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidField("model: Field required (a model id or name)", param="model")
    return model


def stream_flag(body: Mapping[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise InvalidField("stream: Input should be a valid boolean", param="stream")
    return bool(stream)


def check_request(body: Mapping[str, Any]) -> None:
    """What every Messages request needs, whichever model answers."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidField("messages: Input should be a valid list of message objects", param="messages")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidField("max_tokens: Field required (an integer of at least 1)", param="max_tokens")


def relay_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client's fields for an Anthropic model, as they are: all but ``model`` (the
    connector's) and ``stream`` (the route's)."""
    return {name: value for name, value in body.items() if name not in ("model", "stream")}


def last_user_text(body: Mapping[str, Any]) -> str:
    """The last user message's text (what a connector template's ``${parameters.inputs}`` holds)."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(block["text"] for block in content
                                 if isinstance(block, dict) and isinstance(block.get("text"), str))
    return ""


def chat_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages request as a chat.completions request (no ``model``, no ``stream``)."""
    check_request(body)
    unknown = sorted(set(body) - _TAKEN - IGNORED_FIELDS)
    if unknown:
        raise InvalidField(f"{unknown[0]}: not supported for this model (only Anthropic models take it)",
                           param=unknown[0])
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for index, message in enumerate(body["messages"]):
        messages += _chat_messages(message, f"messages.{index}")
    chat: dict[str, Any] = {"messages": messages, "max_completion_tokens": body["max_tokens"]}
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise InvalidField("stop_sequences: Input should be a list of strings", param="stop_sequences")
        if stops:
            chat["stop"] = stops
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    tools = body.get("tools")
    if tools:
        chat["tools"] = [_function(tool, index) for index, tool in enumerate(_list(tools, "tools"))]
    choice = body.get("tool_choice")
    if choice is not None:
        chat.update(_tool_choice(choice))
        if not tools:
            chat.pop("tool_choice", None)
    return chat


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidField(f"{where}: Input should be a valid list", param=where)
    return value


def _system_text(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    texts = []
    for index, block in enumerate(_list(system, "system")):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InvalidField(f"system.{index}: only text blocks are allowed", param=f"system.{index}")
        texts.append(block["text"])
    return "\n\n".join(texts)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = _list(content, f"{where}.content")
    if not all(isinstance(block, dict) for block in blocks):
        raise InvalidField(f"{where}.content: each block must be an object", param=f"{where}.content")
    return blocks


def _chat_messages(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    role = message.get("role")
    blocks = _blocks(message.get("content"), where)
    if role == "user":
        return _user_messages(blocks, where)
    if role == "assistant":
        return _assistant_message(blocks, where)
    if role == "system":  # a system message within the conversation (Claude Code sends them)
        return [{"role": "system", "content": _system_text(blocks)}]
    raise InvalidField(f"{where}.role: Input should be 'user', 'assistant' or 'system'", param=f"{where}.role")


def _user_messages(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """A user turn: its tool results first (each a tool message), then its text and images."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.get("source"), at)}})
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidField(f"{at}.tool_use_id: Field required", param=f"{at}.tool_use_id")
            text = _result_text(block.get("content"), at)
            if block.get("is_error") is True:
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise InvalidField(f"{at}: a user block of type {kind!r} is not supported for this model (text, image "
                               "and tool_result are)", param=at)
    if parts and all(part["type"] == "text" for part in parts):
        return [*results, {"role": "user", "content": "".join(p["text"] for p in parts) if len(parts) == 1
                           else parts}]
    return [*results, {"role": "user", "content": parts}] if parts else results


def _image_url(source: Any, where: str) -> str:
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64" and source.get("media_type") in _MEDIA_TYPES \
            and isinstance(source.get("data"), str):
        return f"data:{source['media_type']};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str) and source["url"].startswith("https://"):
        return source["url"]
    raise InvalidField(f"{where}.source: an image must be base64 (png, jpeg, gif or webp) or an https url",
                       param=f"{where}.source")


def _result_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for block in _list(content, f"{where}.content"):
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            raise InvalidField(f"{where}.content: only text blocks are supported in a tool_result for this model",
                               param=f"{where}.content")
    return "\n".join(texts)


def _assistant_message(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise InvalidField(f"{at}: a tool_use block needs its id and name", param=at)
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"],
                                       "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise InvalidField(f"{at}: an assistant block of type {kind!r} is not supported for this model (text, "
                               "tool_use and thinking are)", param=at)
    if not texts and not calls:
        return []  # only thinking: nothing a chat model can be given
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _function(tool: Any, index: int) -> dict[str, Any]:
    at = f"tools.{index}"
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise InvalidField(f"{at}: a tool needs a name", param=at)
    if tool.get("type") not in (None, "custom"):
        raise InvalidField(f"{at}: server tools ({tool['type']}) are not supported for this model", param=at)
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise InvalidField(f"{at}.input_schema: Field required", param=f"{at}.input_schema")
    function: dict[str, Any] = {"name": tool["name"], "parameters": schema}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> dict[str, Any]:
    kind = choice.get("type") if isinstance(choice, dict) else None
    chat: dict[str, Any]
    if kind in ("auto", "any", "none"):
        chat = {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}[kind]}
    elif kind == "tool" and isinstance(choice.get("name"), str):
        chat = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        raise InvalidField("tool_choice: Input should be auto, any, tool (with a name) or none", param="tool_choice")
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        chat["parallel_tool_calls"] = False
    return chat


def stop_reason(finish_reason: str | None) -> str:
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn")


def usage(counts: Mapping[str, Any]) -> dict[str, int]:
    """OpenAI's usage (``prompt_tokens``, ...) under Anthropic's names."""
    return {"input_tokens": _count(counts.get("prompt_tokens")), "output_tokens": _count(counts.get("completion_tokens"))}


def message(answer: ChatAnswer, *, message_id: str, model: str) -> dict[str, Any]:
    """A chat answer as Anthropic's ``message``: thinking, text, then tool_use blocks."""
    content: list[dict[str, Any]] = []
    if answer.reasoning:
        content.append({"type": "thinking", "thinking": answer.reasoning, "signature": ""})
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    for call_id, name, arguments in answer.calls:
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": _input(arguments)})
    reason = stop_reason(answer.finish_reason)
    if answer.calls and reason == "end_turn":
        reason = "tool_use"
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": None, "usage": usage(answer.usage)}


def _input(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """``count_tokens``' answer: an estimate from the request's text (system, messages,
    tools as JSON) at CHARS_PER_TOKEN, at least 1. No provider is asked."""
    check_request({**body, "max_tokens": 1})
    chars = 0
    for name in ("system", "messages", "tools"):
        value = body.get(name)
        if isinstance(value, str):
            chars += len(value)
        elif value is not None:
            chars += len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return max(1, -(-chars // CHARS_PER_TOKEN))
