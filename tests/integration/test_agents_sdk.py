"""The OpenAI Agents SDK (``openai-agents``) running an agent with one function tool
against mlstream: ``OpenAIResponsesModel`` pointed at ``/v1``, streamed and not. The
fake model answers with its text and a call of the tool; the agent runs the tool, sends
its output back (the SDK's own loop, a second model call, where the SDK skips the call it
already answered) and takes the text as the final output. What reached the provider and
the usage the SDK read are checked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

agents = pytest.importorskip("agents")

import openai  # noqa: E402

from mlstream.testing.fake_openai import DEFAULT_TEXT, TOOL_CALL_ID, Scenario  # noqa: E402

from ..support.connectors import openai_connector  # noqa: E402
from ..support.timeouts import HANG_GUARD  # noqa: E402

# The SDK's tracing exports to OpenAI's servers unless told not to.
agents.set_tracing_disabled(True)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_an_agent_with_one_function_tool_through_the_responses_front(server, client, fake, streamed):
    model_id = client.model_for(openai_connector(fake, model=Scenario(tool="get_weather").to_model()))
    asked: list[str] = []

    @agents.function_tool
    def get_weather(location: str, unit: str = "celsius") -> str:
        """The weather in a city."""
        asked.append(location)
        return f"rainy, 12 degrees {unit}"

    async def run() -> Any:
        sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=HANG_GUARD)
        agent = agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather],
                             model=agents.OpenAIResponsesModel(model=model_id, openai_client=sdk))
        if not streamed:
            return await agents.Runner.run(agent, "Weather in Elsinore?", max_turns=3)
        result = agents.Runner.run_streamed(agent, "Weather in Elsinore?", max_turns=3)
        kinds = {event.type async for event in result.stream_events()}
        assert "raw_response_event" in kinds
        return result

    result = asyncio.run(run())
    assert asked == ["Elsinore"] and result.final_output == DEFAULT_TEXT
    first, second = (request.body for request in fake.stats.requests)
    assert first["messages"] == [{"role": "system", "content": "Answer with the weather."},
                                 {"role": "user", "content": "Weather in Elsinore?"}]
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert first.get("stream", False) is streamed
    tool_result = second["messages"][-1]
    assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == TOOL_CALL_ID
    assert tool_result["content"] == "rainy, 12 degrees celsius"
    usage = result.context_wrapper.usage
    assert usage.requests == 2 and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
