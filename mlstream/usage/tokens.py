"""What a provider says a call used, under one set of names. Pure: no I/O.

    TokenCounts        input (every input token, the cached ones included), output, cached input
    token_counts(u)    a provider's usage object, whatever its names, as TokenCounts
    answer_tokens(b)   the usage in a provider's whole (non-stream) answer, found without
                       decoding the rest of it (an embedding answer can be megabytes)

The providers' names:

    OpenAI, SageMaker chat   prompt_tokens (cached included), completion_tokens,
                             prompt_tokens_details.cached_tokens
    Anthropic                input_tokens (cached excluded), output_tokens,
                             cache_read_input_tokens, cache_creation_input_tokens
    Bedrock Converse         inputTokens (cached excluded), outputTokens,
                             cacheReadInputTokens, cacheWriteInputTokens
    Gemini                   promptTokenCount (cached included), candidatesTokenCount,
                             thoughtsTokenCount (output too), cachedContentTokenCount
    SageMaker TGI / LMI      input_length, generated_tokens (a stream's details)
    Bedrock Titan embedding  inputTextTokenCount (top level)
    Cohere                   meta.billed_units.input_tokens / output_tokens
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TokenCounts:
    input: int = 0
    output: int = 0
    cached_input: int = 0  # part of ``input``

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(self.input + other.input, self.output + other.output,
                           self.cached_input + other.cached_input)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _has(usage: Mapping[str, Any], *names: str) -> bool:
    return any(name in usage for name in names)


def token_counts(usage: Any) -> TokenCounts | None:
    """``usage`` (a provider's usage object) as TokenCounts; None when it names no count."""
    if not isinstance(usage, Mapping):
        return None
    if _has(usage, "prompt_tokens", "completion_tokens"):
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        return TokenCounts(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), cached)
    if _has(usage, "input_tokens", "output_tokens"):  # Anthropic (and Cohere's billed units)
        read = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        return TokenCounts(_count(usage.get("input_tokens")) + read + written, _count(usage.get("output_tokens")),
                           read)
    if _has(usage, "inputTokens", "outputTokens"):
        read = _count(usage.get("cacheReadInputTokens"))
        written = _count(usage.get("cacheWriteInputTokens"))
        return TokenCounts(_count(usage.get("inputTokens")) + read + written, _count(usage.get("outputTokens")), read)
    if _has(usage, "promptTokenCount", "candidatesTokenCount"):
        return TokenCounts(_count(usage.get("promptTokenCount")),
                           _count(usage.get("candidatesTokenCount")) + _count(usage.get("thoughtsTokenCount")),
                           _count(usage.get("cachedContentTokenCount")))
    if _has(usage, "input_length", "generated_tokens"):
        return TokenCounts(_count(usage.get("input_length")), _count(usage.get("generated_tokens")))
    if _has(usage, "inputTextTokenCount"):
        return TokenCounts(_count(usage.get("inputTextTokenCount")))
    return None


# The keys an answer's usage may sit under, and whether the value is the usage object
# itself or a count in the answer's top level (Titan's).
_ANSWER_KEYS = ((b'"usage"', True), (b'"usageMetadata"', True), (b'"billed_units"', True),
                (b'"inputTextTokenCount"', False))
_DECODER = json.JSONDecoder()


def answer_tokens(payload: bytes) -> TokenCounts | None:
    """The usage of a whole JSON answer, or None. Only the usage is decoded: the key's last
    occurrence with an unescaped quote is a key of the answer (inside a JSON string a quote
    is escaped), and providers write their usage after the content."""
    for key, is_object in _ANSWER_KEYS:
        at = payload.rfind(key)
        if at < 0:
            continue
        tail = payload[at + len(key):].decode("utf-8", "replace")
        colon = tail.find(":")
        if colon < 0 or tail[:colon].strip():
            continue
        start = colon + 1
        while start < len(tail) and tail[start] in " \t\r\n":
            start += 1
        try:
            value, _ = _DECODER.raw_decode(tail, start)
        except ValueError:
            continue
        counts = token_counts(value if is_object else {"inputTextTokenCount": value})
        if counts is not None:
            return counts
    return None


# The names a provider request caps its output with, at its top level or in its
# parameter object (OpenAI, Anthropic, Bedrock Converse, Gemini, TGI, Cohere).
_CAP_NAMES = ("max_tokens", "max_completion_tokens", "max_output_tokens", "maxTokens", "maxOutputTokens",
              "max_new_tokens", "max_tokens_to_sample")
_CAP_HOLDERS = ("inferenceConfig", "generationConfig", "parameters", "textGenerationConfig")
# Output tokens a call is assumed to take when its request caps none (a budget reservation's size).
DEFAULT_OUTPUT_ESTIMATE = 1024


def output_cap(body: Any) -> int | None:
    """The output cap a provider request sets, if it sets one."""
    if not isinstance(body, Mapping):
        return None
    for holder in (body, *(body.get(name) for name in _CAP_HOLDERS)):
        if isinstance(holder, Mapping):
            for name in _CAP_NAMES:
                value = holder.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    return None
