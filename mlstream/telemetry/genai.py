"""What a provider call is in OpenTelemetry's GenAI terms. Pure: no I/O, no SDK.

    call_facts(url, body, ...)   before sending: gen_ai.operation.name, gen_ai.provider.name,
                                 gen_ai.request.model, the request's settings, server.address/port
    answer_facts(answer)         a whole answer's gen_ai.response.id, .model, .finish_reasons
    input_messages(body)         the prompt in the conventions' JSON shape (gen_ai.input.messages,
                                 gen_ai.system_instructions), for --otel-capture-content only
    output_messages(...)         the answer in that shape (gen_ai.output.messages)
    error_type(error)            error.type: low-cardinality, one of ERROR_TYPES or a class name

The conventions (open-telemetry/semantic-conventions-genai, ``docs/gen-ai/gen-ai-spans.md``):
``gen_ai.provider.name`` says which API's format the call speaks (an OpenAI-compatible
endpoint is ``openai``); SageMaker has no well-known value, so ``aws.sagemaker`` is ours,
as the conventions allow a custom one. ``gen_ai.operation.name`` is ``chat``,
``text_completion``, ``generate_content`` (Gemini's generateContent, as the conventions
name it) or ``embeddings``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

from ..errors import ClientGone, MLStreamError, RetryCancelled, ShuttingDown, UpstreamError
from ..providers.events import Chunk, Delta, Done, Reasoning, StreamItem

# A dialect's family (the part of its name before the first "/") -> gen_ai.provider.name.
PROVIDER_BY_FAMILY = {"openai": "openai", "bedrock": "aws.bedrock", "anthropic": "anthropic",
                      "gemini": "gcp.gemini", "sagemaker": "aws.sagemaker"}
# Without a dialect (a call that never streams: embeddings, say), the provider's host says.
PROVIDER_BY_HOST = (("openai.azure.com", "azure.ai.openai"), ("api.openai.com", "openai"),
                    ("api.anthropic.com", "anthropic"), ("generativelanguage.googleapis.com", "gcp.gemini"),
                    ("aiplatform.googleapis.com", "gcp.vertex_ai"), ("api.cohere.ai", "cohere"),
                    ("api.cohere.com", "cohere"), ("api.deepseek.com", "deepseek"), ("api.mistral.ai", "mistral_ai"))
# An AWS connector's service_name -> gen_ai.provider.name.
PROVIDER_BY_AWS_SERVICE = {"bedrock": "aws.bedrock", "sagemaker": "aws.sagemaker"}
# Else the API the connector's URL path is of, wherever it is served (an embeddings
# endpoint at any host speaks OpenAI's API, as the OpenAI front takes it; Azure's host
# is named above): what names the provider of a call without a dialect on any host.
PROVIDER_BY_PATH = ((re.compile(r"/embeddings$"), "openai"),
                    (re.compile(r"/v[12]/(?:embed|rerank)$"), "cohere"),
                    (re.compile(r"/models/[^/:]+:(?:embedContent|batchEmbedContents)$"), "gcp.gemini"))
UNKNOWN_PROVIDER = "unknown"

# The request settings recorded, each with the names providers give it; searched at the
# body's top level and in the objects that group them (Bedrock's inferenceConfig, Gemini's
# generationConfig, TGI's and LMI's parameters, Titan's textGenerationConfig).
REQUEST_SETTINGS: tuple[tuple[str, type, tuple[str, ...]], ...] = (
    ("gen_ai.request.max_tokens", int, ("max_tokens", "max_completion_tokens", "maxTokens", "maxOutputTokens",
                                        "max_new_tokens", "maxTokenCount", "max_tokens_to_sample")),
    ("gen_ai.request.temperature", float, ("temperature",)),
    ("gen_ai.request.top_p", float, ("top_p", "topP")),
    ("gen_ai.request.top_k", float, ("top_k", "topK")),
)
SETTING_GROUPS = ("inferenceConfig", "generationConfig", "parameters", "textGenerationConfig")

# error.type values of ours (besides a provider's HTTP status, e.g. "429", and an
# exception's class name): what a provider call, or the request, ended with.
ERROR_TYPES = {
    "client_gone": "the client went away (or stopped reading) before the answer ended",
    "shutting_down": "the server cut the stream at its drain deadline",
    "connection": "the provider could not be reached, or its connection broke",
    "timeout": "the provider sent nothing within the read timeout (or the connect timeout)",
    "stream": "the provider's stream was malformed, cut short, or failed mid-way",
    "answer": "the provider's whole answer could not be read",
}

_BEDROCK_MODEL = re.compile(r"/model/([^/]+)/(?:converse|invoke)")
_GEMINI_MODEL = re.compile(r"/models/([^/:]+):")
_SAGEMAKER_ENDPOINT = re.compile(r"/endpoints/([^/]+)/invocations")
_AZURE_DEPLOYMENT = re.compile(r"/deployments/([^/]+)/")


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What a provider call's span and metrics say of it, known before it is sent."""

    operation: str
    provider: str
    request_model: str | None
    server_address: str
    server_port: int
    settings: tuple[tuple[str, int | float], ...] = ()  # (gen_ai.request.* name, value sent)
    stream: bool = False

    @property
    def span_name(self) -> str:
        return f"{self.operation} {self.request_model}" if self.request_model else self.operation

    def attributes(self) -> dict[str, Any]:
        """The attributes known at the span's start (those a sampler may want)."""
        attributes = self.metric_attributes()
        if self.stream:
            attributes["gen_ai.request.stream"] = True
        attributes.update(self.settings)
        return attributes

    def metric_attributes(self) -> dict[str, Any]:
        """The attributes every GenAI client metric of this call carries."""
        attributes: dict[str, Any] = {"gen_ai.operation.name": self.operation,
                                      "gen_ai.provider.name": self.provider,
                                      "server.address": self.server_address, "server.port": self.server_port}
        if self.request_model:
            attributes["gen_ai.request.model"] = self.request_model
        return attributes


@dataclass(frozen=True, slots=True)
class AnswerFacts:
    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()


def call_facts(url: str, body: Any, *, dialect: str | None, protocol: str, parameters: Mapping[str, Any],
               stream: bool) -> CallFacts:
    """``url`` (only its host, port and path are read) and ``body`` (the request's JSON, or
    None) of a call about to be made through a connector of ``protocol`` with ``parameters``."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path
    body = body if isinstance(body, dict) else {}
    return CallFacts(operation_name(dialect, path, body), provider_name(dialect, host, protocol, parameters, path),
                     request_model(path, body, parameters), host, port, request_settings(body), stream)


def provider_name(dialect: str | None, host: str, protocol: str, parameters: Mapping[str, Any],
                  path: str = "") -> str:
    """The dialect's family, else the provider's well-known host, an AWS connector's
    service, the URL path's API (``PROVIDER_BY_PATH``); else ``unknown``."""
    if dialect:
        family = dialect.split("/", 1)[0]
        if family in PROVIDER_BY_FAMILY:
            return PROVIDER_BY_FAMILY[family]
    for suffix, name in PROVIDER_BY_HOST:
        if host == suffix or host.endswith("." + suffix):
            return name
    if protocol == "aws_sigv4":
        service = parameters.get("service_name")
        if isinstance(service, str) and service:
            return PROVIDER_BY_AWS_SERVICE.get(service, f"aws.{service}")
        return "aws.bedrock"
    path = path.rstrip("/")
    for pattern, name in PROVIDER_BY_PATH:
        if pattern.search(path):
            return name
    return UNKNOWN_PROVIDER


def operation_name(dialect: str | None, path: str, body: Mapping[str, Any]) -> str:
    if "embed" in path.lower():
        return "embeddings"
    if dialect == "openai/v1/completions":
        return "text_completion"
    if dialect and dialect.startswith("gemini/"):
        return "generate_content"
    if dialect and not dialect.startswith("sagemaker/"):
        return "chat"
    if "contents" in body:
        return "generate_content"
    if "messages" in body:
        return "chat"
    if any(name in body for name in ("input", "inputText", "texts")) and not dialect:
        return "embeddings"
    return "text_completion"


def request_model(path: str, body: Mapping[str, Any], parameters: Mapping[str, Any]) -> str | None:
    """The model the request names: its body's ``model``, else the one in its URL (Bedrock's
    model id, Gemini's model, SageMaker's endpoint, Azure's deployment), else the
    connector's ``model`` parameter."""
    if isinstance(body.get("model"), str) and body["model"]:
        return body["model"]
    for pattern in (_BEDROCK_MODEL, _GEMINI_MODEL, _SAGEMAKER_ENDPOINT, _AZURE_DEPLOYMENT):
        found = pattern.search(path)
        if found:
            return unquote(found.group(1))
    model = parameters.get("model")
    return model if isinstance(model, str) and model else None


def request_settings(body: Mapping[str, Any]) -> tuple[tuple[str, int | float], ...]:
    """The sampling settings the request sends, as gen_ai.request.* attributes."""
    places = [body, *(body[group] for group in SETTING_GROUPS if isinstance(body.get(group), dict))]
    found: list[tuple[str, int | float]] = []
    for attribute, kind, names in REQUEST_SETTINGS:
        value = next((place[name] for place in places for name in names if _number(place.get(name))), None)
        if value is not None:
            found.append((attribute, kind(value)))
    return tuple(found)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_body(body: bytes | None) -> Any:
    """A request's or answer's JSON, or None."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def answer_facts(answer: Any) -> AnswerFacts:
    """A whole answer's id, model and finish reasons, whatever the provider's names:
    OpenAI's ``id``/``model``/``choices[].finish_reason``, Anthropic's ``stop_reason``,
    Bedrock Converse's ``stopReason``, Gemini's ``responseId``/``modelVersion``/
    ``candidates[].finishReason``."""
    if not isinstance(answer, dict):
        return AnswerFacts()
    response_id = _text(answer.get("id")) or _text(answer.get("responseId"))
    response_model = _text(answer.get("model")) or _text(answer.get("modelVersion"))
    reasons: list[str] = []
    for key, field in (("choices", "finish_reason"), ("candidates", "finishReason")):
        items = answer.get(key)
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and _text(item.get(field)):
                reasons.append(item[field])
    for field in ("stop_reason", "stopReason"):
        if _text(answer.get(field)):
            reasons.append(answer[field])
    return AnswerFacts(response_id, response_model, tuple(reasons))


def error_type(error: BaseException) -> str:
    """error.type for what a call or a request ended with (see ERROR_TYPES)."""
    if isinstance(error, (ClientGone, RetryCancelled)):
        return "client_gone"
    if isinstance(error, ShuttingDown):
        return "shutting_down"
    if isinstance(error, UpstreamError):
        return error.kind  # the provider's status ("429"), or connection, timeout, stream, answer
    return type(error).__name__ if isinstance(error, MLStreamError) else "_OTHER"


# --- content (--otel-capture-content) ---------------------------------------------------

def input_messages(body: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(gen_ai.input.messages, gen_ai.system_instructions) of a request body: OpenAI's and
    Anthropic's ``messages``, Bedrock Converse's ``messages`` and ``system``, Gemini's
    ``contents`` and ``systemInstruction``, a completion's ``prompt`` or TGI's ``inputs``."""
    if not isinstance(body, dict):
        return [], []
    system = _parts(body.get("system"))
    instruction = body.get("systemInstruction")
    if isinstance(instruction, dict):
        system += _parts(instruction.get("parts"))
    turns = body.get("messages") if isinstance(body.get("messages"), list) else body.get("contents")
    messages: list[dict[str, Any]] = []
    if isinstance(turns, list):
        for turn in turns:
            if isinstance(turn, dict):
                messages.append(_message(turn))
    else:
        prompt = body.get("prompt", body.get("inputs"))
        if isinstance(prompt, list):
            prompt = "\n".join(item for item in prompt if isinstance(item, str))
        if isinstance(prompt, str) and prompt:
            messages.append({"role": "user", "parts": [_text_part(prompt)]})
    return messages, system


def output_messages(answer: Any) -> list[dict[str, Any]]:
    """gen_ai.output.messages of a whole answer: one message per choice or candidate."""
    if not isinstance(answer, dict):
        return []
    if isinstance(answer.get("choices"), list):  # OpenAI: chat (message) or completion (text)
        out = []
        for choice in answer["choices"]:
            if isinstance(choice, dict):
                message = choice.get("message")
                parts = _message(message)["parts"] if isinstance(message, dict) else _parts(choice.get("text"))
                out.append(_output(parts, choice.get("finish_reason")))
        return out
    if isinstance(answer.get("candidates"), list):  # Gemini
        return [_output(_parts((candidate.get("content") or {}).get("parts")), candidate.get("finishReason"))
                for candidate in answer["candidates"] if isinstance(candidate, dict)]
    if isinstance(answer.get("output"), dict):  # Bedrock Converse
        message = answer["output"].get("message")
        parts = _parts(message.get("content")) if isinstance(message, dict) else []
        return [_output(parts, answer.get("stopReason"))]
    if "content" in answer:  # Anthropic
        return [_output(_parts(answer.get("content")), answer.get("stop_reason"))]
    return []


def streamed_output(items: Iterable[StreamItem], done: Done | None) -> list[dict[str, Any]]:
    """gen_ai.output.messages of a stream, from the items its decoder gave: the text,
    reasoning and tool calls (``Chunk`` items are a provider's own chat chunks, read here)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        if type(item) is Delta:
            if isinstance(item.content, str):
                texts.append(item.content)
            elif isinstance(item.content, dict):
                calls += _parts([item.content])
        elif type(item) is Reasoning:
            thoughts.append(item.text)
        elif type(item) is Chunk:
            texts.append(_chunk_text(item.data))
    parts = ([{"type": "reasoning", "content": "".join(thoughts)}] if thoughts else [])
    if any(texts):
        parts.append(_text_part("".join(texts)))
    return [_output(parts + calls, done.finish_reason if done is not None else None)]


def _chunk_text(data: str) -> str:
    chunk = parse_body(data.encode("utf-8"))
    if not isinstance(chunk, dict):
        return ""
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choices[0].get("text")
        return piece if isinstance(piece, str) else ""
    delta = chunk.get("delta")  # Anthropic's content_block_delta
    return delta["text"] if isinstance(delta, dict) and isinstance(delta.get("text"), str) else ""


def _output(parts: list[dict[str, Any]], finish_reason: Any) -> dict[str, Any]:
    return {"role": "assistant", "parts": parts, "finish_reason": _text(finish_reason) or "unknown"}


_ROLES = {"model": "assistant", "developer": "system"}


def _message(turn: Mapping[str, Any]) -> dict[str, Any]:
    role = _text(turn.get("role")) or "user"
    parts = _parts(turn.get("content", turn.get("parts")))
    for call in turn.get("tool_calls") or () if isinstance(turn.get("tool_calls"), list) else ():
        parts += _parts([{"type": "function", **call}] if isinstance(call, dict) else [])
    if role == "tool":
        parts = [{"type": "tool_call_response", "id": turn.get("tool_call_id"),
                  "response": turn.get("content")}]
    return {"role": _ROLES.get(role, role), "parts": parts}


def _parts(content: Any) -> list[dict[str, Any]]:
    """Message content in any provider's shape as the conventions' parts."""
    if isinstance(content, str):
        return [_text_part(content)] if content else []
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return []
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, str):
            parts.append(_text_part(block))
        elif isinstance(block, dict):
            parts.append(_part(block))
    return parts


def _part(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if isinstance(block.get("text"), str):
        return _text_part(block["text"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return {"type": "reasoning", "content": block["thinking"]}
    if kind == "function" and isinstance(block.get("function"), dict):  # OpenAI's tool call
        function = block["function"]
        return {"type": "tool_call", "id": block.get("id"), "name": function.get("name"),
                "arguments": function.get("arguments")}
    if kind == "tool_use":  # Anthropic's
        return {"type": "tool_call", "id": block.get("id"), "name": block.get("name"), "arguments": block.get("input")}
    if kind == "tool_result":
        return {"type": "tool_call_response", "id": block.get("tool_use_id"), "response": block.get("content")}
    if isinstance(block.get("toolUse"), dict):  # Bedrock Converse's
        use = block["toolUse"]
        return {"type": "tool_call", "id": use.get("toolUseId"), "name": use.get("name"), "arguments": use.get("input")}
    if isinstance(block.get("toolResult"), dict):
        result = block["toolResult"]
        return {"type": "tool_call_response", "id": result.get("toolUseId"), "response": result.get("content")}
    if isinstance(block.get("functionCall"), dict):  # Gemini's
        call = block["functionCall"]
        return {"type": "tool_call", "name": call.get("name"), "arguments": call.get("args")}
    if isinstance(block.get("functionResponse"), dict):
        response = block["functionResponse"]
        return {"type": "tool_call_response", "id": response.get("name"), "response": response.get("response")}
    # Anything else (an image, a document): its kind only, never its bytes.
    return {"type": kind if isinstance(kind, str) else next(iter(block), "unknown")}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
