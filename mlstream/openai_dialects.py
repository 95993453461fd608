"""OpenAI chat completions to and from Anthropic Messages, Gemini generateContent and the
SageMaker TGI / LMI chat schema. Pure: dicts in, dicts out, refusals as InvalidField.

    anthropic_request / anthropic_body      chat.completions request -> Messages API fields,
                                            set on the connector's rendered body
    chat_completion_from_anthropic          a Messages answer -> chat.completion
    gemini_request / gemini_body            -> generateContent fields (contents, systemInstruction,
                                            generationConfig, tools, toolConfig)
    chat_completion_from_gemini             a GenerateContentResponse -> chat.completion
    sagemaker_chat_fields / _body           -> the containers' OpenAI-style ``messages`` payload
    chat_completion_from_sagemaker          a container's chat answer -> chat.completion

Each refusal names the field in ``param`` (README, "Use it from OpenAI clients").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidField, UpstreamError
from .openai_wire import (
    CONNECTOR_OWNED,
    Image,
    Part,
    Text,
    ToolResult,
    ToolUse,
    body_with_fields,
    chat_completion,
    check_messages,
    completion_choice,
    conversation,
    one_text_choice,
    refuse_unknown,
    sampling,
    tool_call,
    tool_choice,
    tool_functions,
)

# OpenAI's fields with no place in the provider's request that change nothing in the
# answer's meaning: accepted and dropped.
_IGNORED = frozenset({"store", "metadata", "service_tier", "stream_options", "logit_bias", "prediction",
                      "modalities", "reasoning_effort", "web_search_options"})
_ALWAYS_TAKEN = frozenset({"model", "stream", "messages", "max_tokens", "max_completion_tokens", "temperature",
                           "top_p", "stop", "tools", "tool_choice", "n", "response_format", "logprobs", "top_logprobs"})

# --------------------------------------------------------------------------- Anthropic Messages

ANTHROPIC = "Anthropic"
# Anthropic requires max_tokens. Used when neither the client (max_tokens,
# max_completion_tokens) nor the connector's request_body gives one.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
_ANTHROPIC_TAKEN = _ALWAYS_TAKEN | {"user", "parallel_tool_calls"}
_ANTHROPIC_IGNORED = _IGNORED | {"seed", "presence_penalty", "frequency_penalty"}


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


# --------------------------------------------------------------------------- Gemini generateContent

GEMINI = "Gemini"
_GEMINI_TAKEN = _ALWAYS_TAKEN | {"seed", "presence_penalty", "frequency_penalty"}
_GEMINI_IGNORED = _IGNORED | {"user", "parallel_tool_calls"}
_GEMINI_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


def gemini_request(body: Mapping[str, Any], *, stream: bool) -> dict[str, Any]:
    """The generateContent fields for a chat.completions request (only those it has).

    Schemas go as JSON Schema (``parametersJsonSchema``, ``responseJsonSchema``), which is
    what OpenAI's ``parameters`` and ``json_schema`` are, not Gemini's OpenAPI subset."""
    refuse_unknown(body, _GEMINI_TAKEN, _GEMINI_IGNORED, GEMINI)
    if body.get("logprobs"):
        raise InvalidField("log probabilities are not translated for Gemini models", param="logprobs")
    if stream and body.get("n") not in (None, 1):
        raise InvalidField("a Gemini stream gives one choice: 'n' must be 1 (or do not stream)", param="n")
    system, turns = conversation(body, GEMINI)
    fields: dict[str, Any] = {"contents": [{"role": "model" if turn.role == "assistant" else "user",
                                            "parts": [_gemini_part(p) for p in turn.parts]} for turn in turns]}
    if system:
        fields["systemInstruction"] = {"parts": [{"text": text} for text in system]}
    config = sampling(body, {"max_tokens": "maxOutputTokens", "temperature": "temperature", "top_p": "topP",
                             "stop": "stopSequences", "n": "candidateCount", "seed": "seed",
                             "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty"})
    config.update(_gemini_response_format(body.get("response_format")))
    if config:
        fields["generationConfig"] = config
    functions = tool_functions(body.get("tools"))
    if functions is not None:
        fields["tools"] = [{"functionDeclarations": [
            {"name": f["name"], "parametersJsonSchema": f["parameters"],
             **({"description": f["description"]} if "description" in f else {})} for f in functions]}]
        choice = tool_choice(body.get("tool_choice"))
        calling: dict[str, Any] = {"mode": _GEMINI_MODES.get(choice, "ANY")}  # type: ignore[arg-type]
        if isinstance(choice, tuple):
            calling["allowedFunctionNames"] = [choice[1]]
        fields["toolConfig"] = {"functionCallingConfig": calling}
    return fields


def gemini_body(rendered: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The connector's rendered body with the translated fields set on it; the client's
    ``generationConfig`` values over the connector's."""
    return body_with_fields(rendered, fields, "generationConfig")


def _gemini_response_format(response_format: Any) -> dict[str, Any]:
    if response_format is None:
        return {}
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    schema = response_format.get("json_schema") if kind == "json_schema" else None
    if isinstance(schema, dict) and isinstance(schema.get("schema"), dict):
        return {"responseMimeType": "application/json", "responseJsonSchema": schema["schema"]}
    raise InvalidField("'response_format' must be text, json_object, or json_schema with a 'schema'",
                       param="response_format")


def _gemini_part(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"text": part.text}
    if isinstance(part, Image):
        return {"inlineData": {"mimeType": part.media_type, "data": part.inline_data(GEMINI)}}
    if isinstance(part, ToolUse):
        return {"functionCall": {"name": part.name, "args": part.arguments}}
    if not isinstance(part, ToolResult) or part.name is None:
        raise InvalidField(f"a tool message answers {part.call_id!r}, which no earlier assistant tool call has: "
                           "Gemini needs the function's name", param="messages")
    return {"functionResponse": {"name": part.name, "response": {"content": "".join(part.texts)}}}


def chat_completion_from_gemini(answer: Any, *, completion_id: str, created: int, model: str) -> dict[str, Any]:
    """A GenerateContentResponse as ``chat.completion``: one choice per candidate; thought
    parts are ``reasoning_content``. A blocked prompt (no candidate) is a 400."""
    answer = answer if isinstance(answer, dict) else {}
    candidates = answer.get("candidates")
    feedback = answer.get("promptFeedback")
    if not candidates and isinstance(feedback, dict) and feedback.get("blockReason"):
        raise UpstreamError(f"Error from remote service: the prompt was blocked: {feedback['blockReason']}",
                            upstream_status=400)
    choices = []
    for index, candidate in enumerate(candidates if isinstance(candidates, list) else []):
        candidate = candidate if isinstance(candidate, dict) else {}
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        texts, reasoning, calls = [], [], []
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                (reasoning if part.get("thought") is True else texts).append(part["text"])
            elif (found := tool_call(part)) is not None:
                calls.append(found)
        choices.append(completion_choice(candidate.get("index", index) if isinstance(candidate.get("index"), int)
                                         else index, texts, reasoning, calls, candidate.get("finishReason")))
    if not choices:
        choices.append(completion_choice(0, [], [], [], None))
    return chat_completion(choices, answer.get("usageMetadata"), completion_id=completion_id, created=created,
                           model=model)


# --------------------------------------------------------------------------- SageMaker TGI / LMI

# A SageMaker connector's request_body is usually the containers' prompt schema
# ({"inputs", "parameters": {...}}); its generation parameters, under OpenAI's names, are
# the chat payload's defaults.
_PROMPT_PARAMETERS = {"max_new_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p",
                      "seed": "seed", "stop": "stop", "frequency_penalty": "frequency_penalty",
                      "presence_penalty": "presence_penalty"}


def sagemaker_chat_fields(body: Mapping[str, Any], *, stream: bool) -> dict[str, Any]:
    """The client's fields for a container's chat schema (TGI's Messages API, LMI's chat
    schema): every field but ``model`` and ``stream``, ``max_completion_tokens`` as
    ``max_tokens`` (which both containers know), ``stream_options`` only when streaming."""
    check_messages(body)
    fields = {name: value for name, value in body.items() if name not in CONNECTOR_OWNED}
    if "max_completion_tokens" in fields:
        fields["max_tokens"] = fields.pop("max_completion_tokens")
    if not stream:
        fields.pop("stream_options", None)
    return fields


def sagemaker_chat_body(rendered: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The payload both containers take on ``/invocations`` for a chat: the connector's
    rendered body without its prompt fields (``inputs``, ``parameters``), the generation
    parameters it had as defaults under OpenAI's names, then the client's ``fields``."""
    parameters = rendered.get("parameters")
    defaults = {openai_name: parameters[name] for name, openai_name in _PROMPT_PARAMETERS.items()
                if isinstance(parameters, dict) and parameters.get(name) is not None}
    payload = {name: value for name, value in rendered.items() if name not in ("inputs", "parameters")}
    return {**payload, **defaults, **fields}


def chat_completion_from_sagemaker(answer: Any, *, completion_id: str, created: int, model: str) -> dict[str, Any]:
    """A container's chat answer (OpenAI's shape, with its own finish reasons such as LMI's
    ``eos_token``) as ``chat.completion``."""
    answer = answer if isinstance(answer, dict) else {}
    choices = []
    given = answer.get("choices")
    for index, choice in enumerate(given if isinstance(given, list) else []):
        choice = choice if isinstance(choice, dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        content, thinking = message.get("content"), message.get("reasoning_content")
        calls = [found for call in message.get("tool_calls") or [] if (found := tool_call(call)) is not None]
        choices.append(completion_choice(index, [content] if isinstance(content, str) else [],
                                         [thinking] if isinstance(thinking, str) else [], calls,
                                         choice.get("finish_reason")))
    if not choices:
        choices.append(completion_choice(0, [], [], [], None))
    return chat_completion(choices, answer.get("usage"), completion_id=completion_id, created=created, model=model)
