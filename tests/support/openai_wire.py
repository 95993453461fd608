"""OpenAI's wire format from the outside: SSE bytes read back, request bodies generated."""

from __future__ import annotations

import json

from hypothesis import strategies as st


def events_of(data: bytes) -> list[object]:
    """Every ``data:`` payload of an OpenAI SSE body: parsed JSON, or the ``[DONE]`` text."""
    out = []
    for block in data.decode().split("\n\n"):
        if block:
            assert block.startswith("data: ")
            payload = block[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=20)
message = st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "x"])},
                                optional={"content": json_values, "tool_calls": json_values, "tool_call_id": json_values})
# Chat completion request bodies, mostly almost valid.
bodies = st.fixed_dictionaries({"messages": st.lists(message, max_size=4) | json_values},
                               optional={name: json_values for name in ("max_tokens", "temperature", "top_p", "stop",
                                                                        "tools", "tool_choice", "n", "response_format")})
