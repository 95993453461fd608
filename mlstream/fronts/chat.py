"""A chat over any chat model, for the fronts that speak another API than OpenAI's chat
completions (Anthropic Messages, OpenAI Responses).

Such a front turns its request into a chat.completions request (its conversation in
OpenAI's messages, its tools as functions), and ``chat_call`` binds it to the model's
provider API with the translations the OpenAI front uses (``openai.translations``):

    openai/v1/chat/completions            the chat request's fields set on the rendered body,
                                          ``stream_options.include_usage`` when streaming
    bedrock/converse, anthropic/v1/messages, gemini/v1beta/generatecontent,
    sagemaker/tgi, sagemaker/lmi          the OpenAI front's translation of that request

Either way the answer comes back as a ``chat.completion`` (the binding's ``run``) and the
stream is read as ``StreamKind.CHAT``: Delta (text, or one whole tool call in the
provider's shape: ``openai.wire.tool_call`` reads them all), Reasoning, and
Done(finish reason, usage under the provider's names: ``openai.wire.openai_usage``).
Nothing here sends anything: the front hands the binding to ``Predictor.call`` or
``Predictor.stream``, for the model named or for each target of a router.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..caching import Entry
from ..inference.cache import CacheUse, Pieces

from ..errors import BadRequest
from ..inference.predict import Ask, Bound, Prepared
from ..providers import StreamKind, dialect_for
from ..providers.openai import OPENAI_CHAT
from ..models.registry import ResolvedModel
from .openai import wire
from .openai.sagemaker import chat_completion_from_sagemaker
from .openai.translations import TRANSLATIONS

Exchange = Callable[[Prepared], bytes]


def chat_call(model: ResolvedModel, chat: Mapping[str, Any], *, stream: bool, api: str,
              exchange: Exchange) -> Bound:
    """``chat`` (a chat.completions request, without ``stream``) bound to ``model``'s
    provider: its ``run`` answers a chat.completion (``exchange`` is ``Predictor.exchange``).
    ``api`` names the calling front in a refusal."""
    dialect = dialect_for(model.connector.parameters, model.connector)
    if dialect is OPENAI_CHAT:
        fields = wire.client_fields(chat)
        if stream:
            fields["stream_options"] = {"include_usage": True}
        return Bound(Ask(fields, reshape=lambda rendered: wire.overlay(rendered, fields)), dialect, StreamKind.CHAT,
                     lambda prepared: _openai_answer(exchange(prepared)))
    translation = TRANSLATIONS.get(dialect)
    if translation is None:
        raise BadRequest(f"model [{model.model_id}] speaks {dialect.name}: the {api} front serves chat models "
                         "(openai/v1/chat/completions, bedrock/converse, anthropic/v1/messages, "
                         "gemini/v1beta/generatecontent, sagemaker/tgi, sagemaker/lmi)")
    fields = translation.request(chat, stream)
    # As on the OpenAI front: the template renders with the translated fields as
    # parameters and the last user text as ${parameters.inputs}, then they are set on it.
    parameters = {**fields, "inputs": wire.last_user_text(chat)}

    def run(prepared: Prepared) -> dict[str, Any]:
        return translation.answer(wire.loads_answer(exchange(prepared)), completion_id="", created=0, model="")

    return Bound(Ask(parameters, reshape=lambda rendered: translation.body(rendered, fields)), dialect,
                 StreamKind.CHAT, run)


def _openai_answer(payload: bytes) -> dict[str, Any]:
    """An OpenAI chat.completion, normalized as the translated ones are; its usage as the
    provider sent it (with its token details)."""
    raw = wire.loads_answer(payload)
    completion = chat_completion_from_sagemaker(raw, completion_id="", created=0, model="")
    if isinstance(raw, dict) and isinstance(raw.get("usage"), dict):
        completion["usage"] = raw["usage"]
    return completion


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    """A chat.completion's first choice, read: what the fronts write in their own shapes."""

    text: str
    reasoning: str
    calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments JSON)
    finish_reason: str   # OpenAI's: stop, length, tool_calls, content_filter
    usage: Mapping[str, Any]  # OpenAI's names (prompt_tokens, ...), with any *_details


def read_completion(completion: Mapping[str, Any]) -> ChatAnswer:
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    calls = tuple(found for call in message.get("tool_calls") or () if (found := wire.tool_call(call)) is not None)
    content, reasoning = message.get("content"), message.get("reasoning_content")
    usage = completion.get("usage")
    return ChatAnswer(content if isinstance(content, str) else "", reasoning if isinstance(reasoning, str) else "",
                      calls, wire.finish_reason(choice.get("finish_reason")) or "stop",
                      usage if isinstance(usage, dict) else {})


def stream_usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """A stream's Done usage (the provider's names) under OpenAI's, zeros when it gave none."""
    return wire.openai_usage(usage) or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


# --- the response cache (inference.cache): a chat answer, stream or not ----------------------

def chat_cache_use(interface: str, body: Mapping[str, Any], *, relayed_chunks: bool = False,
                   model: str = "") -> CacheUse:
    """A chat front's request as the response cache reads it. Its non-stream answer is a
    chat.completion (a dict, or the provider's JSON text); a stream's pieces are text,
    reasoning and whole tool calls, so either serves the other. ``relayed_chunks``: the
    front relays an OpenAI provider's own chunks, read into pieces when stored. A request
    for several choices (``n``) is served only as it was made (stream or not)."""
    if body.get("n") not in (None, 1):
        return CacheUse(interface, body)
    return CacheUse(interface, body, answer_of=lambda entry: {**completion_of_pieces(entry), "model": model},
                    pieces_of=pieces_of_completion,
                    chunks=pieces_of_chunks if relayed_chunks else None)


def pieces_of_completion(answer: Any) -> tuple[Pieces, str | None, dict[str, int] | None]:
    """A chat.completion as a stream's pieces: reasoning, text, then each tool call."""
    completion = wire.loads_answer(answer.encode("utf-8")) if isinstance(answer, str) else answer
    read = read_completion(completion if isinstance(completion, Mapping) else {})
    pieces: Pieces = []
    if read.reasoning:
        pieces.append(("r", read.reasoning))
    if read.text:
        pieces.append(("d", read.text))
    pieces += [("d", _function_call(call)) for call in read.calls]
    return pieces, read.finish_reason, dict(read.usage) or None


def completion_of_pieces(entry: Entry) -> dict[str, Any]:
    """A stream's entry as a chat.completion, as a non-stream call would have answered."""
    text, reasoning, calls = [], [], []
    for kind, value in entry.pieces or ():
        if kind == "r":
            reasoning.append(value)
        elif isinstance(value, str):
            text.append(value)
        elif (call := wire.tool_call(value)) is not None:
            calls.append(_function_call(call))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    finish = wire.finish_reason(entry.finish_reason) or "stop"
    if calls and finish == "stop":
        finish = "tool_calls"
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": "", "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": stream_usage(entry.usage)}


def pieces_of_chunks(chunks: list[str | bytes]) -> tuple[Pieces, str | None, dict[str, int] | None] | None:
    """An OpenAI provider's relayed chat.completion.chunk texts as pieces: one per content or
    reasoning delta (chunked as they came), tool calls assembled whole at the end. None for
    chunks that are not one choice's (several choices, or not JSON): not stored."""
    pieces: Pieces = []
    calls: dict[int, dict[str, str]] = {}
    finish: str | None = None
    usage: dict[str, int] | None = None
    for data in chunks:
        try:
            chunk = json.loads(data)
        except ValueError:
            return None
        if not isinstance(chunk, dict):
            return None
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                return None
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
                pieces.append(("r", delta["reasoning_content"]))
            if isinstance(delta.get("content"), str) and delta["content"]:
                pieces.append(("d", delta["content"]))
            for part in delta.get("tool_calls") or ():
                if not isinstance(part, dict):
                    continue
                call = calls.setdefault(int(part.get("index") or 0), {"id": "", "name": "", "arguments": ""})
                function = part.get("function") if isinstance(part.get("function"), dict) else {}
                call["id"] = part.get("id") or call["id"]
                call["name"] = function.get("name") or call["name"]
                call["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    pieces += [("d", _function_call((call["id"], call["name"], call["arguments"])))
               for _, call in sorted(calls.items())]
    return pieces, finish, usage


def _function_call(call: tuple[str, str, str]) -> dict[str, Any]:
    call_id, name, arguments = call
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
