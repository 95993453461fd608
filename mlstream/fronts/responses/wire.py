"""OpenAI Responses shapes: what the Responses front checks, reads and answers. Pure.

    chat_request        a Responses request (and the stored conversation it continues)
                        -> a chat.completions request, which ``fronts.chat`` sends to any
                        chat model with the OpenAI front's translations
    items_to_messages   Responses items -> chat messages (a request's input, and a stored
                        response's output when the conversation continues)
    output_items        a chat answer -> the response's output items
    response            the ``response`` object; ``usage`` in its full shape

    Responses                                 chat.completions
    instructions                              a system message, first (not carried over by
                                              previous_response_id, as OpenAI does)
    input: a string / message items           a user message / messages of their role
      input_text, output_text, input_image    text parts, image_url parts
    function_call items                       an assistant message's tool_calls
    function_call_output items                tool messages
    reasoning items                           dropped
    tools (function), tool_choice             function tools, tool_choice
    max_output_tokens, temperature, top_p,    max_completion_tokens, temperature, top_p,
      parallel_tool_calls                       parallel_tool_calls
    text.format json_schema / json_object     response_format (where the provider takes it;
                                              else its 400 names response_format)
    metadata, store, include, truncation,     kept on the response or dropped
      reasoning, user, service_tier, ...
    other fields, other tool or item types    400 naming the field
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidField
from ..chat import ChatAnswer

_TAKEN = frozenset({"model", "stream", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
                    "temperature", "top_p", "parallel_tool_calls", "text", "store", "previous_response_id",
                    "metadata"})
# Fields that change nothing in the answer's meaning here: accepted and dropped.
IGNORED_FIELDS = frozenset({"include", "truncation", "reasoning", "user", "service_tier", "prompt_cache_key",
                            "safety_identifier", "top_logprobs", "stream_options", "max_tool_calls", "background"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def model_reference(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidField("Missing required parameter: 'model' (a model id or name)", param="model")
    return model


def flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidField(f"Invalid type for '{name}': expected a boolean", param=name)
    return value


def previous_id(body: Mapping[str, Any]) -> str | None:
    value = body.get("previous_response_id")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidField("Invalid 'previous_response_id': expected a response id", param="previous_response_id")
    return value


def check_request(body: Mapping[str, Any]) -> None:
    unknown = sorted(set(body) - _TAKEN - IGNORED_FIELDS)
    if unknown:
        raise InvalidField(f"Unsupported parameter: '{unknown[0]}'", param=unknown[0])
    if body.get("background") is True:
        raise InvalidField("background responses are not supported", param="background")
    if not isinstance(body.get("input"), (str, list)):
        raise InvalidField("Missing required parameter: 'input' (a string or a list of items)", param="input")
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        raise InvalidField("Invalid type for 'instructions': expected a string", param="instructions")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidField("Invalid type for 'metadata': expected an object", param="metadata")


def input_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """This request's input as chat messages."""
    given = body["input"]
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return items_to_messages(given, "input")


def chat_request(body: Mapping[str, Any], conversation: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat request: the instructions, ``conversation`` (the earlier turns and this
    request's input, as chat messages), then the request's settings."""
    messages = ([{"role": "system", "content": body["instructions"]}] if body.get("instructions") else [])
    chat: dict[str, Any] = {"messages": messages + conversation}
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p", "parallel_tool_calls"):
        if body.get(name) is not None:
            chat[name] = body[name]
    tools = body.get("tools")
    if tools:
        chat["tools"] = [_function(tool, index) for index, tool in enumerate(_list(tools, "tools"))]
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    return chat


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidField(f"Invalid type for '{where}': expected an array", param=where)
    return value


def items_to_messages(items: list[Any], where: str) -> list[dict[str, Any]]:
    """Responses items as chat messages: consecutive function calls (and the assistant text
    just before them) one assistant message, each call's output a tool message."""
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(_list(items, where)):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise InvalidField(f"Invalid '{at}': expected an item object", param=at)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise InvalidField(f"Invalid '{at}.role': expected user, assistant, system or developer",
                                   param=f"{at}.role")
            messages.append({"role": role, "content": _content(item.get("content"), role, at)})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise InvalidField(f"Invalid '{at}': a function_call needs its call_id and name", param=at)
            arguments = item.get("arguments")
            call = {"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise InvalidField(f"Invalid '{at}': a function_call_output needs its call_id", param=at)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _output_text(item.get("output"), at)})
        elif kind == "reasoning":
            continue
        else:
            raise InvalidField(f"Invalid '{at}.type': {kind!r} is not supported (message, function_call, "
                               "function_call_output and reasoning are)", param=f"{at}.type")
    return messages


def _content(content: Any, role: str, where: str) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(_list(content, f"{where}.content")):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and role == "user" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise InvalidField(f"Invalid '{at}': a {role} message takes input_text, output_text"
                               + (" and input_image (an image_url)" if role == "user" else "") + " parts", param=at)
    if role != "user" or all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(part["text"] for part in output if isinstance(part, dict) and isinstance(part.get("text"), str))
    raise InvalidField(f"Invalid '{where}.output': expected a string", param=f"{where}.output")


def _function(tool: Any, index: int) -> dict[str, Any]:
    at = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise InvalidField(f"Invalid '{at}': only function tools (with a name) are supported, not {kind!r}",
                           param=at)
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidField("Invalid 'tool_choice': expected auto, none, required or a function", param="tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema" and isinstance(fmt.get("schema"), dict):
        schema = {"name": fmt.get("name") or "response", "schema": fmt["schema"]}
        if isinstance(fmt.get("strict"), bool):
            schema["strict"] = fmt["strict"]
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidField("Invalid 'text.format': expected text, json_object or json_schema with a schema",
                       param="text.format")


# --- the answer ---------------------------------------------------------------------


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [output_text(text)] if status == "completed" else []}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if text else []}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str,
                       status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def output_items(answer: ChatAnswer, new_id: Any) -> list[dict[str, Any]]:
    """A chat answer's output: reasoning, the message, then each function call; ``new_id(prefix)``
    gives each item its id."""
    items = []
    if answer.reasoning:
        items.append(reasoning_item(new_id("rs"), answer.reasoning))
    if answer.text or not answer.calls:
        items.append(message_item(new_id("msg"), answer.text))
    for call_id, name, arguments in answer.calls:
        items.append(function_call_item(new_id("fc"), call_id or new_id("call"), name, arguments))
    return items


def usage(counts: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's chat usage (``prompt_tokens``, ..., with any ``*_tokens_details``) in the
    Responses shape, which the Agents SDK reads whole."""
    prompt, completion = _count(counts.get("prompt_tokens")), _count(counts.get("completion_tokens"))
    prompt_details = counts.get("prompt_tokens_details")
    completion_details = counts.get("completion_tokens_details")
    cached = _count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    reasoning = _count(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion}


def status_of(finish_reason: str) -> tuple[str, dict[str, str] | None]:
    """A response's status and incomplete_details for OpenAI's chat finish_reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def response(body: Mapping[str, Any], *, response_id: str, created_at: int, model: str, status: str,
             output: list[dict[str, Any]], usage_counts: dict[str, Any] | None,
             incomplete: dict[str, str] | None = None, error: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``response`` object, echoing the request's settings."""
    text = body.get("text") if isinstance(body.get("text"), dict) else {}
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "background": False, "error": error, "incomplete_details": incomplete,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": model, "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "store": flag(body, "store", True),
        "temperature": body.get("temperature"), "text": {"format": text.get("format") or {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "top_p": body.get("top_p"), "truncation": body.get("truncation") or "disabled",
        "usage": usage_counts, "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
