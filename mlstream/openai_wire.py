"""OpenAI's API shapes, and their translation to and from Amazon Bedrock Converse. Pure.

    check_chat / check_embedding_input      what the OpenAI front refuses, with the field
    overlay                                 the client's fields on a rendered request body
    converse_request                        chat.completions request -> Converse body fields
    chat_completion_from_converse           Converse answer -> chat.completion
    finish_reason / openai_usage            a provider's stop reason and usage, OpenAI's names
    tool_call                               a provider's assembled tool call -> (id, name, arguments)
    embedding_base64                        floats -> OpenAI's base64 (little-endian float32)
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Mapping
from typing import Any

from .errors import InvalidField

# The fields the connector decides, never taken from the client: which model the provider
# runs, and whether it streams (the route decides that).
CONNECTOR_OWNED = frozenset({"model", "stream"})
# OpenAI's fields that Converse has no place for and that change nothing in the answer's
# meaning; they are accepted and dropped (README, "Use it from OpenAI clients").
_CONVERSE_IGNORED = frozenset({"user", "seed", "store", "metadata", "parallel_tool_calls", "presence_penalty",
                               "frequency_penalty", "service_tier", "stream_options", "logit_bias"})
_CONVERSE_TAKEN = frozenset({"model", "stream", "messages", "max_tokens", "max_completion_tokens", "temperature",
                             "top_p", "stop", "tools", "tool_choice", "n", "response_format", "logprobs",
                             "top_logprobs"})
_DATA_URL = re.compile(r"^data:image/(png|jpe?g|gif|webp);base64,(.*)$", re.DOTALL)

# A provider's stop reason, OpenAI's finish_reason (Bedrock/Anthropic, Gemini, OpenAI's own).
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "stop": "stop", "max_tokens": "length",
           "length": "length", "tool_use": "tool_calls", "tool_calls": "tool_calls",
           "content_filtered": "content_filter", "guardrail_intervened": "content_filter",
           "content_filter": "content_filter", "STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
           "model_context_window_exceeded": "length"}
# A provider's usage names, OpenAI's: Bedrock, Anthropic, Gemini, SageMaker TGI.
_USAGE_NAMES = (("inputTokens", "outputTokens"), ("input_tokens", "output_tokens"),
                ("promptTokenCount", "candidatesTokenCount"), ("input_length", "generated_tokens"),
                ("prompt_tokens", "completion_tokens"))


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


# --------------------------------------------------------------------------- answers


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
    if isinstance(content.get("functionCall"), dict):
        call = content["functionCall"]
        return str(call.get("id") or f"call_{call.get('name')}"), str(call.get("name") or ""), _arguments(
            call.get("args"))
    return None


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, separators=(",", ":"), ensure_ascii=False)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --------------------------------------------------------------------------- Bedrock Converse


def converse_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Converse fields for a chat.completions request: ``messages``, ``system``,
    ``inferenceConfig`` and ``toolConfig`` (only those the request has)."""
    unknown = sorted(set(body) - _CONVERSE_TAKEN - _CONVERSE_IGNORED)
    if unknown:
        raise InvalidField(f"'{unknown[0]}' is not supported for Bedrock Converse models", param=unknown[0])
    if body.get("n") not in (None, 1):
        raise InvalidField("Bedrock Converse gives one choice: 'n' must be 1", param="n")
    if body.get("logprobs"):
        raise InvalidField("Bedrock Converse gives no log probabilities", param="logprobs")
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict)
                                        or response_format.get("type") != "text"):
        raise InvalidField("only response_format {\"type\": \"text\"} is supported for Bedrock Converse "
                           "models", param="response_format")
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(check_messages(body)):
        role = message.get("role")
        where = f"messages[{index}]"
        if role in ("system", "developer"):
            system += [{"text": text} for text in _texts(message.get("content"), where)]
        elif role == "user":
            _append(messages, "user", _user_blocks(message.get("content"), where))
        elif role == "assistant":
            _append(messages, "assistant", _assistant_blocks(message, where))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidField(f"{where}: a tool message needs its 'tool_call_id'", param=f"{where}.tool_call_id")
            result = [{"text": text} for text in _texts(message.get("content"), where)]
            _append(messages, "user", [{"toolResult": {"toolUseId": call_id, "content": result}}])
        else:
            raise InvalidField(f"{where}: unknown role {role!r}", param=f"{where}.role")
    if not messages or messages[0]["role"] != "user":
        raise InvalidField("Bedrock Converse needs the conversation (after any system messages) to start with a "
                           "user message", param="messages")
    fields: dict[str, Any] = {"messages": messages}
    if system:
        fields["system"] = system
    inference = _inference_config(body)
    if inference:
        fields["inferenceConfig"] = inference
    tool_config = _tool_config(body.get("tools"), body.get("tool_choice"))
    if tool_config:
        fields["toolConfig"] = tool_config
    return fields


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


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    # Converse wants user and assistant turns to alternate: consecutive ones are one turn.
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


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


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    if not isinstance(content, list) or not content:
        raise InvalidField(f"{where}: 'content' must be a string or a list of parts", param=f"{where}.content")
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            found = _DATA_URL.match(url) if isinstance(url, str) else None
            if found is None:
                raise InvalidField(f"{where}: images must be data URLs (data:image/png;base64,...) of png, jpeg, "
                                   "gif or webp: Converse does not fetch URLs", param=f"{where}.content")
            image_format = "jpeg" if found.group(1) == "jpg" else found.group(1)
            blocks.append({"image": {"format": image_format, "source": {"bytes": found.group(2)}}})
        else:
            raise InvalidField(f"{where}: unsupported content part {kind!r} (text and image_url are)",
                               param=f"{where}.content")
    return blocks


def _assistant_blocks(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    content = message.get("content")
    blocks = [] if content in (None, "") else [{"text": t} for t in _texts(content, where)]
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
        blocks.append({"toolUse": {"toolUseId": call["id"], "name": function.get("name"), "input": arguments}})
    if not blocks:
        raise InvalidField(f"{where}: an assistant message needs content or tool_calls", param=f"{where}.content")
    return blocks


def _inference_config(body: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidField("'max_tokens' must be a positive integer", param="max_tokens")
        config["maxTokens"] = max_tokens
    for name, converse_name in (("temperature", "temperature"), ("top_p", "topP")):
        value = body.get(name)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise InvalidField(f"'{name}' must be a number", param=name)
            config[converse_name] = value
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise InvalidField("'stop' must be a string or a list of strings", param="stop")
        config["stopSequences"] = stops
    return config


def _tool_config(tools: Any, choice: Any) -> dict[str, Any] | None:
    if tools is None or choice == "none":
        return None  # "none": the model is not offered the tools
    if not isinstance(tools, list):
        raise InvalidField("'tools' must be a list", param="tools")
    specs = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidField(f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\", ...}}}}",
                               param=f"tools[{index}]")
        spec: dict[str, Any] = {"name": function["name"],
                                "inputSchema": {"json": function.get("parameters") or {"type": "object"}}}
        if isinstance(function.get("description"), str):
            spec["description"] = function["description"]
        specs.append({"toolSpec": spec})
    config: dict[str, Any] = {"tools": specs}
    if choice in (None, "auto"):
        config["toolChoice"] = {"auto": {}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        config["toolChoice"] = {"tool": {"name": choice["function"].get("name")}}
    else:
        raise InvalidField("'tool_choice' must be none, auto, required or a named function", param="tool_choice")
    return config


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
            call_id, name, arguments = found
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        elif isinstance(block.get("reasoningContent"), dict):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            if isinstance(text, str):
                reasoning.append(text)
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                             "refusal": None}
    if calls:
        reply["tool_calls"] = calls
    if reasoning:
        reply["reasoning_content"] = "".join(reasoning)
    result: dict[str, Any] = {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": reply, "logprobs": None,
                     "finish_reason": finish_reason(answer.get("stopReason")) or "stop"}]}
    usage = openai_usage(answer.get("usage") if isinstance(answer.get("usage"), dict) else None)
    if usage is not None:
        result["usage"] = usage
    return result


def loads_answer(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return None


# --------------------------------------------------------------------------- embeddings


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
