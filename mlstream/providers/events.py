"""The values a provider's stream decoder produces, and its reader puts on a channel.

They belong with the provider interface (below the streaming core, which only
carries them) so every import between the two points down.

Errors travel as values (``Failure``), never as exceptions across threads: the
handler decides whether a failure becomes an HTTP status (nothing sent yet) or a
final ``{"error": ...}`` event (the stream is committed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import MLStreamError
from ..usage.tokens import TokenCounts


@dataclass(frozen=True, slots=True)
class Started:
    """The provider answered with 2xx headers: the stream can be committed (200)."""

    status: int = 200


@dataclass(frozen=True, slots=True)
class Delta:
    """One piece of the answer: text, or a complete tool call."""

    content: Any


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A piece of the model's reasoning (Bedrock's ``reasoningContent``, Anthropic's
    thinking, Gemini's thought parts): relayed in its own field, never as ``content``."""

    text: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One of an OpenAI-interface provider's own stream chunks (its JSON text), relayed as
    it is by the OpenAI front: role, content, tool-call and usage deltas all included.

    ``data`` is the provider's UTF-8 bytes as they came when they decoded as JSON as
    they are (then written back untouched: no decoding and encoding per chunk), else
    the text SSE decoding gave (bytes that are not UTF-8 replaced)."""

    data: str | bytes


@dataclass(frozen=True, slots=True)
class Done:
    """The provider's end marker arrived; the answer is complete."""

    finish_reason: str | None = None
    usage: dict[str, int] | None = None  # the provider's counts under its own names, for the client
    # Every count it sent, cache included, normalized for the usage record; derived from
    # what the provider sent, so not part of what makes two Done values the same.
    tokens: TokenCounts | None = field(default=None, compare=False)
    # The provider's id of its answer and the model that gave it, when its stream says
    # (for the call's span); not part of what makes two Done values the same either.
    response_id: str | None = field(default=None, compare=False)
    response_model: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Failure:
    error: MLStreamError


StreamItem = Started | Delta | Reasoning | Chunk | Done | Failure
