"""The fake Gemini API, proven faithful with the official ``google-genai`` SDK over loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google import genai
from google.genai import errors, types

from mlstream.testing.fake_gemini import DEFAULT_TEXT, FakeGemini, Scenario, fake_tokens

MODEL = "gemini-2.5-flash"
TIMEOUT_MS = 5000
TOOL = {"name": "get_weather", "input": {"city": "Elsinore", "days": [1, 2]}, "id": "call_fake01"}


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini() as provider:
        yield provider


@pytest.fixture
def models(fake) -> Iterator:
    """The SDK's models API (its client closes its connections when collected: keep it)."""
    client = sdk(fake)
    yield client.models
    client.close()


def sdk(fake: FakeGemini, api_key: str | None = None) -> genai.Client:
    return genai.Client(api_key=api_key or fake.api_key, http_options=types.HttpOptions(
        base_url=fake.url, api_version="v1beta", timeout=TIMEOUT_MS, retry_options=types.HttpRetryOptions(attempts=1)))


def knobs(**values) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(http_options=types.HttpOptions(extra_body={"fake": values}))


def test_generate_content_returns_the_whole_answer(fake, models):
    response = models.generate_content(model=MODEL, contents="Who is Hamlet?")
    assert response.text == DEFAULT_TEXT
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    usage = response.usage_metadata
    assert usage.prompt_token_count == 3 and usage.candidates_token_count == len(fake_tokens(Scenario()))
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    sent = fake.stats.requests[-1]
    assert sent.path == f"/v1beta/models/{MODEL}:generateContent" and sent.headers["x-goog-api-key"] == fake.api_key


def test_stream_yields_thoughts_text_function_call_and_usage(fake, models):
    chunks = list(models.generate_content_stream(
        model=MODEL, contents="Who is Hamlet?", config=knobs(chunks=3, reasoning="Think it over.", tool_use=TOOL)))
    parts = [part for chunk in chunks for part in chunk.candidates[0].content.parts]
    assert "".join(p.text for p in parts if p.thought) == "Think it over."
    assert "".join(p.text or "" for p in parts if not p.thought) == "".join(fake_tokens(Scenario(chunks=3)))
    [call] = [p.function_call for p in parts if p.function_call]
    assert (call.name, call.args, call.id) == ("get_weather", TOOL["input"], "call_fake01")
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == 3 + 3 + 1
    assert fake.stats.requests[-1].path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    assert fake.stats.wait_for(lambda s: s.streams_completed == 1, TIMEOUT_MS / 1000)


def test_safety_blocks_as_the_sdk_reports_them(fake, models):
    blocked = models.generate_content(model=MODEL, contents="x", config=knobs(blocked="prompt"))
    assert blocked.prompt_feedback.block_reason == types.BlockedReason.SAFETY and not blocked.candidates
    chunks = list(models.generate_content_stream(model=MODEL, contents="x",
                                                           config=knobs(blocked="response", chunks=2)))
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.SAFETY


@pytest.mark.parametrize("status, error_class", [(429, errors.ClientError), (503, errors.ServerError),
                                                 (400, errors.ClientError)])
def test_http_errors(fake, models, status, error_class):
    with pytest.raises(error_class) as raised:
        list(models.generate_content_stream(model=MODEL, contents="x", config=knobs(status=status)))
    assert raised.value.code == status


def test_wrong_key_is_refused(fake, models):
    with pytest.raises(errors.ClientError) as raised:
        with sdk(fake, api_key="AIzaWrong") as wrong:
            wrong.models.generate_content(model=MODEL, contents="x")
    assert raised.value.code == 400 and "API key not valid" in raised.value.message
    assert fake.stats.auth_failures == 1


def test_error_event_mid_stream_raises_in_the_sdk(fake, models):
    seen = []
    with pytest.raises(errors.APIError) as raised:
        for chunk in models.generate_content_stream(model=MODEL, contents="x",
                                                              config=knobs(chunks=5, error_after=2)):
            seen.append(chunk.text)
    assert raised.value.code == 503 and seen == fake_tokens(Scenario(chunks=5))[:2]
