"""The OpenAI front over Gemini generateContent: a chat.completions request as
generateContent fields, a GenerateContentResponse as chat.completion. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidField, UpstreamError
from ..conversation import Image, Part, Text, ToolResult, ToolUse
from .wire import (
    CHAT_FIELDS,
    IGNORED_FIELDS,
    body_with_fields,
    chat_completion,
    completion_choice,
    conversation,
    refuse_unknown,
    sampling,
    tool_call,
    tool_choice,
    tool_functions,
)

GEMINI = "Gemini"
_GEMINI_TAKEN = CHAT_FIELDS | {"seed", "presence_penalty", "frequency_penalty"}
_GEMINI_IGNORED = IGNORED_FIELDS | {"user", "parallel_tool_calls"}
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
