"""OpenAI's API shapes: what the OpenAI front checks, reads and answers. Pure.
(Each provider's translation: ``converse``, ``anthropic``, ``gemini``, ``sagemaker``.)

    check_chat / check_embedding_input      what the OpenAI front refuses, with the field
    overlay                                 the client's fields on a rendered request body
    finish_reason / openai_usage            a provider's stop reason and usage, OpenAI's names
    tool_call                               a provider's assembled tool call -> (id, name, arguments)
    conversation                            the messages as provider-neutral turns (Text, Image,
                                            ToolUse, ToolResult), for every translation
    sampling / tool_functions / tool_choice the client's fields, checked, under a provider's names
    completion_choice / chat_completion     the pieces of an answer -> chat.completion
    embedding_base64                        floats -> OpenAI's base64 (little-endian float32)
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Mapping
from typing import Any

from ...errors import InvalidField
from ..conversation import Image, Part, Text, ToolResult, ToolUse, Turn

# The fields the connector decides, never taken from the client: which model the provider
# runs, and whether it streams (the route decides that).
CONNECTOR_OWNED = frozenset({"model", "stream"})
_DATA_URL = re.compile(r"^data:image/(png|jpe?g|gif|webp);base64,(.*)$", re.DOTALL)
# A provider's stop reason, OpenAI's finish_reason (Bedrock/Anthropic, Gemini, OpenAI's own).
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "stop": "stop", "max_tokens": "length",
           "length": "length", "tool_use": "tool_calls", "tool_calls": "tool_calls",
           "content_filtered": "content_filter", "guardrail_intervened": "content_filter",
           "content_filter": "content_filter", "STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
           "model_context_window_exceeded": "length", "eos_token": "stop", "refusal": "content_filter",
           "RECITATION": "content_filter", "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter",
           "SPII": "content_filter"}
# A provider's usage names, OpenAI's: Bedrock, Anthropic, Gemini, SageMaker TGI.
_USAGE_NAMES = (("inputTokens", "outputTokens"), ("input_tokens", "output_tokens"),
                ("promptTokenCount", "candidatesTokenCount"), ("input_length", "generated_tokens"),
                ("prompt_tokens", "completion_tokens"))
# OpenAI's fields with no place in the provider's request that change nothing in the
# answer's meaning: accepted and dropped (Anthropic, Gemini).
IGNORED_FIELDS = frozenset({"store", "metadata", "service_tier", "stream_options", "logit_bias", "prediction",
                            "modalities", "reasoning_effort", "web_search_options"})
# The chat fields every translation takes.
CHAT_FIELDS = frozenset({"model", "stream", "messages", "max_tokens", "max_completion_tokens", "temperature",
                         "top_p", "stop", "tools", "tool_choice", "n", "response_format", "logprobs", "top_logprobs"})


def object_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidField("the request body must be a JSON object", param="body")
    return body


def model_reference(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidField("you must provide a model parameter: a model id or name", param="model")
    return model


def stream_flag(body: Mapping[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise InvalidField("'stream' must be a boolean", param="stream")
    return bool(stream)


def include_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise InvalidField("'stream_options' must be an object", param="stream_options")
    return options.get("include_usage") is True


def check_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise InvalidField("'messages' must be a non-empty list of message objects", param="messages")
    return messages


def client_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client's fields that go to an OpenAI-interface provider: all but CONNECTOR_OWNED."""
    return {name: value for name, value in body.items() if name not in CONNECTOR_OWNED}


def overlay(rendered: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The connector's rendered body with each client field set on it (the client's value wins)."""
    return {**rendered, **fields}


def check_embedding_input(body: Mapping[str, Any]) -> list[str]:
    """``input`` as a list of texts: a string, or a list of strings. Token arrays are refused."""
    given = body.get("input")
    if isinstance(given, str):
        texts = [given]
    elif isinstance(given, list) and given and all(isinstance(t, str) for t in given):
        texts = given
    elif isinstance(given, list) and given and all(isinstance(t, (int, list)) for t in given):
        raise InvalidField("'input' as token arrays is not supported: send the text (a string or a list "
                           "of strings)", param="input")
    else:
        raise InvalidField("'input' must be a string or a non-empty list of strings", param="input")
    if any(not text for text in texts):
        raise InvalidField("'input' cannot contain an empty string", param="input")
    return texts


def encoding_format(body: Mapping[str, Any]) -> str:
    value = body.get("encoding_format", "float")
    if value is None:
        return "float"
    if value not in ("float", "base64"):
        raise InvalidField("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
    return value


def embedding_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def model_entry(model_id: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    """One deployed model in OpenAI's model shape (and its mlstream name)."""
    created = doc.get("created_time")
    return {"id": model_id, "object": "model", "created": created // 1000 if isinstance(created, int) else 0,
            "owned_by": "mlstream", "name": doc.get("name")}


def finish_reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    return _FINISH.get(reason, reason)


def openai_usage(usage: Mapping[str, Any] | None) -> dict[str, int] | None:
    """A provider's usage under OpenAI's names (prompt, completion, total tokens)."""
    if not usage:
        return None
    for prompt_name, completion_name in _USAGE_NAMES:
        if prompt_name in usage or completion_name in usage:
            prompt = _count(usage.get(prompt_name))
            completion = _count(usage.get(completion_name))
            return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return None


def tool_call(content: Any) -> tuple[str, str, str] | None:
    """A provider's assembled tool call (Bedrock ``toolUse``, Anthropic ``tool_use``, Gemini
    ``functionCall``) as (id, name, arguments JSON); None for anything else."""
    if not isinstance(content, dict):
        return None
    if isinstance(content.get("toolUse"), dict):
        call = content["toolUse"]
        return str(call.get("toolUseId") or ""), str(call.get("name") or ""), _arguments(call.get("input"))
    if content.get("type") == "tool_use":
        return str(content.get("id") or ""), str(content.get("name") or ""), _arguments(content.get("input"))
    if content.get("type") == "function" and isinstance(content.get("function"), dict):  # OpenAI's own
        function = content["function"]
        arguments = function.get("arguments")
        return (str(content.get("id") or ""), str(function.get("name") or ""),
                arguments if isinstance(arguments, str) else _arguments(arguments))
    if isinstance(content.get("functionCall"), dict):
        call = content["functionCall"]
        return str(call.get("id") or f"call_{call.get('name')}"), str(call.get("name") or ""), _arguments(
            call.get("args"))
    return None


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, separators=(",", ":"), ensure_ascii=False)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def body_with_fields(rendered: Mapping[str, Any], fields: Mapping[str, Any], config: str) -> dict[str, Any]:
    """``fields`` set on the rendered body; of the object named ``config`` (sampling
    settings), each field the client set over the connector's, the others kept."""
    given = rendered.get(config)
    merged = {**(given if isinstance(given, dict) else {}), **fields.get(config, {})}
    body = {**rendered, **fields}
    if merged:
        body[config] = merged
    return body


def last_user_text(body: Mapping[str, Any]) -> str:
    """The last user message's text (what a blueprint's ``${parameters.inputs}`` holds)."""
    for message in reversed(check_messages(body)):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def conversation(body: Mapping[str, Any], provider: str) -> tuple[list[str], list[Turn]]:
    """The request's system texts (system and developer messages) and its turns, consecutive
    ones of a role merged (Converse, Anthropic and Gemini want them alternating, starting
    with the user)."""
    system: list[str] = []
    turns: list[Turn] = []
    names: dict[str, str] = {}  # tool call id -> its function name

    def append(role: str, parts: list[Part]) -> None:
        if turns and turns[-1].role == role:
            turns[-1].parts.extend(parts)
        else:
            turns.append(Turn(role, parts))

    for index, message in enumerate(check_messages(body)):
        role = message.get("role")
        where = f"messages[{index}]"
        if role in ("system", "developer"):
            system += _texts(message.get("content"), where)
        elif role == "user":
            append("user", _user_parts(message.get("content"), where))
        elif role == "assistant":
            parts = _assistant_parts(message, where)
            names.update((part.call_id, part.name) for part in parts if isinstance(part, ToolUse))
            append("assistant", parts)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidField(f"{where}: a tool message needs its 'tool_call_id'", param=f"{where}.tool_call_id")
            append("user", [ToolResult(call_id, names.get(call_id), tuple(_texts(message.get("content"), where)))])
        else:
            raise InvalidField(f"{where}: unknown role {role!r}", param=f"{where}.role")
    if not turns or turns[0].role != "user":
        raise InvalidField(f"{provider} needs the conversation (after any system messages) to start with a "
                           "user message", param="messages")
    return system, turns


def refuse_unknown(body: Mapping[str, Any], taken: frozenset[str], ignored: frozenset[str], provider: str) -> None:
    unknown = sorted(set(body) - taken - ignored)
    if unknown:
        raise InvalidField(f"'{unknown[0]}' is not supported for {provider} models", param=unknown[0])


def one_text_choice(body: Mapping[str, Any], provider: str) -> None:
    """Refuse what a provider with one text answer and no log probabilities cannot give."""
    if body.get("n") not in (None, 1):
        raise InvalidField(f"{provider} gives one choice: 'n' must be 1", param="n")
    if body.get("logprobs"):
        raise InvalidField(f"{provider} gives no log probabilities", param="logprobs")
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict)
                                        or response_format.get("type") != "text"):
        raise InvalidField(f"only response_format {{\"type\": \"text\"}} is supported for {provider} models",
                           param="response_format")


def _texts(content: Any, where: str) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidField(f"{where}: only text parts are allowed here", param=f"{where}.content")
            texts.append(part["text"])
        return texts
    raise InvalidField(f"{where}: 'content' must be a string or a list of parts", param=f"{where}.content")


def _user_parts(content: Any, where: str) -> list[Part]:
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list) or not content:
        raise InvalidField(f"{where}: 'content' must be a string or a list of parts", param=f"{where}.content")
    parts: list[Part] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(Text(part["text"]))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            found = _DATA_URL.match(url) if isinstance(url, str) else None
            if found is not None:
                media_type = "image/jpeg" if found.group(1) == "jpg" else f"image/{found.group(1)}"
                parts.append(Image(media_type, found.group(2), None, where))
            elif isinstance(url, str) and url.startswith("https://"):
                parts.append(Image("", None, url, where))
            else:
                raise InvalidField(f"{where}: an image must be a data URL (data:image/png;base64,...) of png, jpeg, "
                                   "gif or webp, or an https URL", param=f"{where}.content")
        else:
            raise InvalidField(f"{where}: unsupported content part {kind!r} (text and image_url are)",
                               param=f"{where}.content")
    return parts


def _assistant_parts(message: Mapping[str, Any], where: str) -> list[Part]:
    content = message.get("content")
    parts: list[Part] = [] if content in (None, "") else [Text(t) for t in _texts(content, where)]
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise InvalidField(f"{where}: 'tool_calls' must be a list", param=f"{where}.tool_calls")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            raise InvalidField(f"{where}: each tool call needs an 'id' and a 'function'", param=f"{where}.tool_calls")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            raise InvalidField(f"{where}: a tool call's 'arguments' must be JSON text",
                               param=f"{where}.tool_calls") from None
        parts.append(ToolUse(call["id"], str(function.get("name")), arguments))
    if not parts:
        raise InvalidField(f"{where}: an assistant message needs content or tool_calls", param=f"{where}.content")
    return parts


def sampling(body: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The client's sampling fields under a provider's ``names`` (OpenAI's name -> the
    provider's, of max_tokens, temperature, top_p, stop, seed, n, presence_penalty,
    frequency_penalty), checked; ``max_tokens`` stands for ``max_completion_tokens`` too."""
    config: dict[str, Any] = {}
    for name, provider_name in names.items():
        if name == "max_tokens":
            value = body.get("max_completion_tokens", body.get("max_tokens"))
            if value is not None:
                config[provider_name] = _positive(value, "max_tokens")
        elif name == "stop":
            if body.get("stop") is not None:
                stop = body["stop"]
                stops = [stop] if isinstance(stop, str) else stop
                if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
                    raise InvalidField("'stop' must be a string or a list of strings", param="stop")
                config[provider_name] = stops
        elif name in ("seed", "n"):
            if body.get(name) is not None:
                config[provider_name] = _positive(body[name], name, minimum=0 if name == "seed" else 1)
        elif body.get(name) is not None:
            value = body[name]
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise InvalidField(f"'{name}' must be a number", param=name)
            config[provider_name] = value
    return config


def _positive(value: Any, name: str, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidField(f"'{name}' must be an integer of at least {minimum}", param=name)
    return value


def tool_functions(tools: Any) -> list[dict[str, Any]] | None:
    """The request's ``tools`` as their functions ({name, parameters[, description]}), checked."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidField("'tools' must be a list", param="tools")
    functions = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidField(f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\", ...}}}}",
                               param=f"tools[{index}]")
        checked = {"name": function["name"], "parameters": function.get("parameters") or {"type": "object"}}
        if isinstance(function.get("description"), str):
            checked["description"] = function["description"]
        functions.append(checked)
    return functions


def tool_choice(choice: Any) -> str | tuple[str, str]:
    """``tool_choice`` as "auto" (also when absent), "none", "required", or ("function", name)."""
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return "function", function["name"]
    raise InvalidField("'tool_choice' must be none, auto, required or a named function", param="tool_choice")


def completion_choice(index: int, texts: list[str], reasoning: list[str], calls: list[tuple[str, str, str]],
                      reason: Any) -> dict[str, Any]:
    """One choice of a ``chat.completion``: its text, reasoning (``reasoning_content``, never
    in ``content``), tool calls and finish_reason."""
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                             "refusal": None}
    if calls:
        reply["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                               for call_id, name, arguments in calls]
    if reasoning:
        reply["reasoning_content"] = "".join(reasoning)
    finish = finish_reason(reason if isinstance(reason, str) else None) or "stop"
    if calls and finish == "stop":  # Gemini ends a function call with STOP; OpenAI says tool_calls
        finish = "tool_calls"
    return {"index": index, "message": reply, "logprobs": None, "finish_reason": finish}


def chat_completion(choices: list[dict[str, Any]], usage: Any, *, completion_id: str, created: int,
                    model: str) -> dict[str, Any]:
    result: dict[str, Any] = {"id": completion_id, "object": "chat.completion", "created": created, "model": model,
                              "choices": choices}
    counted = openai_usage(usage if isinstance(usage, dict) else None)
    if counted is not None:
        result["usage"] = counted
    return result


def loads_answer(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return None


def embedding_vectors(predict_body: Mapping[str, Any]) -> list[list[float]]:
    """The embedding tensors of ml-commons' ``inference_results``, in order."""
    vectors = []
    for result in predict_body.get("inference_results") or []:
        for tensor in result.get("output") or []:
            data = tensor.get("data") if isinstance(tensor, dict) else None
            if isinstance(data, list):
                vectors.append(data)
    return vectors


def embeddings_list(vectors: list[list[float]], encoding: str, model: str) -> dict[str, Any]:
    """OpenAI's embeddings answer. Process functions give no token counts: usage is 0."""
    data = [{"object": "embedding", "index": index,
             "embedding": embedding_base64(vector) if encoding == "base64" else vector}
            for index, vector in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 0, "total_tokens": 0}}
