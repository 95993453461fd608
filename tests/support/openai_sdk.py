"""The ``openai`` SDK pointed at a server's OpenAI front, and what tests ask it."""

from __future__ import annotations

from typing import Any

import openai

from .timeouts import HANG_GUARD

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}
USER = [{"role": "user", "content": "Who is Hamlet?"}]


def sdk(server: Any, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=HANG_GUARD)


def async_sdk(server: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=HANG_GUARD)
