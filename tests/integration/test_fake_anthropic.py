"""The fake Anthropic API, proven faithful with the official ``anthropic`` SDK over loopback."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from mlstream.testing.fake_anthropic import DEFAULT_TEXT, FakeAnthropic, Scenario, fake_tokens

MODEL = "claude-sonnet-4-5"
MESSAGES = [{"role": "user", "content": "Who is Hamlet?"}]
TIMEOUT = 5.0
TOOL = {"name": "get_weather", "input": {"city": "Elsinore", "days": [1, 2]}, "id": "toolu_fake01"}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as provider:
        yield provider


def sdk(fake: FakeAnthropic, api_key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=api_key or fake.api_key, base_url=fake.url, max_retries=0, timeout=TIMEOUT)


def test_create_returns_the_whole_message(fake):
    message = sdk(fake).messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == DEFAULT_TEXT
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 3 and message.usage.output_tokens == len(fake_tokens(Scenario()))
    sent = fake.stats.requests[-1]
    assert sent.headers["authorization"] == f"Bearer {fake.api_key}" and sent.headers["anthropic-version"]


def test_stream_helper_assembles_thinking_text_and_tool_use(fake):
    with sdk(fake).messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES, extra_body={
            "fake": {"chunks": 4, "reasoning": "Consider the play.", "tool_use": TOOL}}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "".join(fake_tokens(Scenario(chunks=4)))
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "Consider the play."
    assert final.content[2].name == "get_weather" and final.content[2].input == TOOL["input"]
    assert final.content[2].id == "toolu_fake01"
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 4 + 3 + 3
    assert fake.stats.wait_for(lambda s: s.streams_completed == 1, TIMEOUT)


def test_raw_stream_events_in_order(fake):
    events = list(sdk(fake).messages.create(model=MODEL, max_tokens=100, messages=MESSAGES, stream=True,
                                            extra_body={"fake": {"chunks": 2}}))
    assert [event.type for event in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]  # the SDK drops ping
    assert events[0].message.usage.input_tokens == 3
    assert events[-2].delta.stop_reason == "end_turn" and events[-2].usage.output_tokens == 2


@pytest.mark.parametrize("status, error_class", [(529, anthropic.InternalServerError),
                                                 (429, anthropic.RateLimitError),
                                                 (400, anthropic.BadRequestError)])
def test_http_errors_before_the_stream(fake, status, error_class):
    with pytest.raises(error_class) as raised:
        sdk(fake).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES, stream=True,
                                  extra_headers={"X-Fake-Status": str(status)})
    assert raised.value.status_code == status
    assert raised.value.body["error"]["type"] in ("overloaded_error", "rate_limit_error", "invalid_request_error")


def test_wrong_key_is_an_authentication_error(fake):
    with pytest.raises(anthropic.AuthenticationError):
        sdk(fake, api_key="sk-ant-wrong").messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert fake.stats.auth_failures == 1


def test_error_event_mid_stream_raises_in_the_sdk(fake):
    stream = sdk(fake).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES, stream=True,
                                       extra_body={"fake": {"error_after": 2}})
    seen = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for event in stream:
            seen.append(event.type)
    assert "Overloaded" in str(raised.value)
    assert seen.count("content_block_delta") == 2


def test_cut_mid_stream_breaks_the_sdk_read(fake):
    stream = sdk(fake).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES, stream=True,
                                       extra_body={"fake": {"cut_after": 1}})
    with pytest.raises(Exception) as raised:  # the SDK's HTTP client's own protocol error
        list(stream)
    # Older SDKs let httpx's error through; anthropic 2.x wraps it in APIConnectionError.
    error = raised.value
    if isinstance(error, anthropic.APIConnectionError):
        error = error.__cause__
    assert type(error).__name__ == "RemoteProtocolError" and "incomplete chunked read" in str(error)
    assert fake.stats.streams_completed == 0
