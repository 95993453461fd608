"""A conversation, provider-neutral: what a front's messages become before a provider's
translation renders them (``fronts.openai``'s providers). Values only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidField


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image part: ``data`` (base64) with its ``media_type`` for a data URL, else ``url``."""

    media_type: str
    data: str | None
    url: str | None
    where: str  # the message it came from, for a refusal's param

    def inline_data(self, provider: str) -> str:
        """The image's base64 data, for a provider that fetches no URL."""
        if self.data is None:
            raise InvalidField(f"{self.where}: images must be data URLs (data:image/png;base64,...) of png, jpeg, "
                               f"gif or webp: {provider} does not fetch URLs", param=f"{self.where}.content")
        return self.data


@dataclass(frozen=True, slots=True)
class ToolUse:
    """An assistant's tool call, its arguments parsed."""

    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool message: the call it answers (and that call's function name, which Gemini needs)."""

    call_id: str
    name: str | None
    texts: tuple[str, ...]


Part = Text | Image | ToolUse | ToolResult


@dataclass(frozen=True, slots=True)
class Turn:
    role: str  # "user" or "assistant"; tool results are the user's
    parts: list[Part]
