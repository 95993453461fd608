"""The OpenAI front over SageMaker TGI / LMI containers: their own chat completions schema
(``messages``, OpenAI's fields) in place of the connector's prompt body. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .wire import (
    CONNECTOR_OWNED,
    chat_completion,
    check_messages,
    completion_choice,
    tool_call,
)

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
