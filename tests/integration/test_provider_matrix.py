"""Every streamed provider added beside OpenAI and Bedrock, through one test matrix.

Each ``ProviderCase`` says how a user writes the provider's connector and what its
answers look like; the tests are the same for all: the stream contract, the
non-stream answer, tool use, reasoning apart from content, usage and finish reason
in the last event, errors before and after the first event, cancellation when the
client hangs up, and backpressure from a client that reads nothing. The fakes are
``mlstream.testing.scripted`` fakes, so the knobs (``parameters.fake``) are the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from mlstream.testing import fake_anthropic, fake_gemini, fake_sagemaker
from mlstream.testing.fake_anthropic import FakeAnthropic
from mlstream.testing.fake_gemini import FakeGemini
from mlstream.testing.fake_sagemaker import FakeSageMaker
from mlstream.testing.scripted import DEFAULT_TEXT, Scenario, fake_tokens

from ..support.clients import Client
from ..support.connectors import maps
from ..support.streams import held_in_channel, post_stream, stream_channel
from ..support.timeouts import HANG_GUARD, poll_until
from ..support.wire import raw_request, read_response

TOOL = {"name": "get_weather", "input": {"city": "Elsinore", "days": [1, 2], "units": "metric"}, "id": "call_abc123"}
IDLE_WINDOW = 1.0  # how long a client reads nothing in the backpressure test


@dataclass(frozen=True)
class ProviderCase:
    interface: str
    fake: Callable[[], Any]                          # a context manager yielding the fake
    connector: Callable[[Any], dict[str, Any]]        # the connector a user would write, at the fake
    answer_text: Callable[[Any], str]                 # the text of a non-stream answer (dataAsMap)
    usage_fields: frozenset[str]
    finish: str                                       # the finish reason of a plain answer
    tool_finish: str
    tool_event: Callable[[dict[str, Any]], Any]       # the content of the tool call's event
    stream_flag: Callable[[Any], bool]                # the recorded request asked for a stream
    secrets: Callable[[Any], list[str]]              # what must never reach the client
    errors: dict[str, tuple[dict[str, Any], int, str]] = field(default_factory=dict)
    reasoning: bool = True                            # the provider streams thinking
    tools: bool = True                                # the provider streams tool calls
    inferred: bool = False                            # the connector's URL names the interface

    def __str__(self) -> str:
        return self.interface


# --- Anthropic -------------------------------------------------------------------------------

ANTHROPIC = ProviderCase(
    interface="anthropic/v1/messages",
    fake=FakeAnthropic,
    connector=lambda fake: fake_anthropic.connector(fake.url, fake.api_key),
    answer_text=lambda answer: "".join(b["text"] for b in answer["content"] if b["type"] == "text"),
    usage_fields=frozenset({"input_tokens", "output_tokens"}),
    finish="end_turn",
    tool_finish="tool_use",
    tool_event=lambda tool: {"type": "tool_use", "id": tool["id"], "name": tool["name"], "input": tool["input"]},
    stream_flag=lambda sent: sent.body.get("stream") is True,
    secrets=lambda fake: [fake.api_key],
    inferred=True,
    errors={
        "overloaded-http": ({"status": 529}, 503, "Overloaded"),
        "rate-limited-http": ({"status": 429}, 429, "rate limit"),
        "overloaded-event": ({"error_after": 0}, 503, "overloaded_error: Overloaded"),
        "invalid-event": ({"error_after": 0, "error_type": "invalid_request_error"}, 400, "invalid_request_error"),
    },
)


# --- Gemini ----------------------------------------------------------------------------------

GEMINI = ProviderCase(
    interface="gemini/v1beta/generatecontent",
    fake=FakeGemini,
    connector=lambda fake: fake_gemini.connector(fake.url, fake.api_key),
    answer_text=lambda answer: "".join(p.get("text", "") for p in answer["candidates"][0]["content"]["parts"]
                                       if not p.get("thought")),
    usage_fields=frozenset({"promptTokenCount", "candidatesTokenCount", "totalTokenCount"}),
    finish="STOP",
    tool_finish="STOP",
    tool_event=lambda tool: {"functionCall": {"id": tool["id"], "name": tool["name"], "args": tool["input"]}},
    stream_flag=lambda sent: sent.path.endswith(":streamGenerateContent?alt=sse"),
    secrets=lambda fake: [fake.api_key],
    inferred=True,
    errors={
        "quota-http": ({"status": 429}, 429, "quota"),
        "unavailable-event": ({"error_after": 0}, 503, "UNAVAILABLE: The model is overloaded."),
        "prompt-blocked": ({"blocked": "prompt"}, 400, "the prompt was blocked: SAFETY"),
        "answer-blocked": ({"blocked": "response", "chunks": 0}, 400, "the answer was blocked: SAFETY"),
    },
)


# --- SageMaker: an endpoint serving TGI or LMI ----------------------------------------------

def sagemaker_case(container: str, answer_text: Callable[[Any], str]) -> ProviderCase:
    return ProviderCase(
        interface=f"sagemaker/{container}",
        fake=partial(FakeSageMaker, container=container),
        connector=lambda fake: fake_sagemaker.connector(fake.url, fake.access_key, fake.secret_key, fake.region),
        answer_text=answer_text,
        usage_fields=frozenset({"input_length", "generated_tokens"}),
        finish="eos_token",
        tool_finish="eos_token",
        tool_event=lambda tool: None,
        stream_flag=lambda sent: sent.path.endswith("/invocations-response-stream") and sent.body["stream"] is True,
        secrets=lambda fake: [fake.secret_key],
        reasoning=False,
        tools=False,
        errors={
            "throttled-http": ({"status": 429}, 429, "ThrottlingException"),
            "model-error-http": ({"status": 424}, 424, "ModelError"),
            "model-stream-error": ({"error_after": 0}, 502, "ModelStreamError: The model container failed"),
        },
    )


SAGEMAKER_TGI = sagemaker_case("tgi", lambda answer: answer["response"][0]["generated_text"])
SAGEMAKER_LMI = sagemaker_case("lmi", lambda answer: answer["generated_text"])

CASES = [ANTHROPIC, GEMINI, SAGEMAKER_TGI, SAGEMAKER_LMI]


@pytest.fixture(params=CASES, ids=str)
def case(request) -> ProviderCase:
    return request.param


@pytest.fixture
def provider(case: ProviderCase) -> Iterator[Any]:
    with case.fake() as fake:
        yield fake


def stream_parameters(case: ProviderCase, **knobs: Any) -> dict[str, Any]:
    return {"parameters": {"inputs": "Who is Hamlet?", "fake": knobs, "_llm_interface": case.interface}}


def stream(client: Client, case: ProviderCase, model_id: str, **knobs: Any):
    return raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                       json.dumps(stream_parameters(case, **knobs)).encode())


def predict(client: Client, model_id: str, **knobs: Any):
    return client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                       {"parameters": {"inputs": "Who is Hamlet?", "fake": knobs}})


# --- the matrix ------------------------------------------------------------------------------

def test_stream_contract_usage_and_finish_reason(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    response = stream(client, case, model_id)
    assert response.status == 200 and response.complete
    assert response.headers["content-type"].startswith("text/event-stream")
    events = maps(response)
    assert [e["content"] for e in events[:-1]] == fake_tokens(Scenario())
    assert all(set(e) == {"content", "is_last"} and e["is_last"] is False for e in events[:-1])
    last = events[-1]
    assert last["is_last"] is True and last["content"] == ""
    assert last["finish_reason"] == case.finish
    assert set(last["usage"]) == case.usage_fields and all(isinstance(v, int) for v in last["usage"].values())
    sent = provider.stats.requests[-1]
    assert case.stream_flag(sent)
    assert provider.stats.wait_for(lambda s: s.streams_completed == 1, HANG_GUARD)
    # the same request without streaming: the provider's own answer, the same usage numbers
    whole = predict(client, model_id)
    assert whole.status == 200, whole.body
    answer = whole.body["inference_results"][0]["output"][0]["dataAsMap"]
    assert case.answer_text(answer) == DEFAULT_TEXT
    assert not case.stream_flag(provider.stats.requests[-1])


def test_interface_name_is_case_and_space_insensitive(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    body = stream_parameters(case)
    body["parameters"]["_llm_interface"] = f"  {case.interface.upper()} "
    response = raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(body).encode())
    assert response.status == 200 and "".join(m["content"] for m in maps(response)) == DEFAULT_TEXT
    if case.inferred:
        del body["parameters"]["_llm_interface"]
        response = raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                               json.dumps(body).encode())
        assert response.status == 200 and "".join(m["content"] for m in maps(response)) == DEFAULT_TEXT


@pytest.mark.parametrize("case", [case for case in CASES if case.tools], ids=str)
def test_tool_use_is_assembled_into_one_event(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    events = maps(stream(client, case, model_id, chunks=3, tool_use=TOOL))
    assert [e["content"] for e in events if isinstance(e["content"], dict)] == [case.tool_event(TOOL)]
    assert "".join(e["content"] for e in events if isinstance(e["content"], str)) == \
        "".join(fake_tokens(Scenario(chunks=3)))
    assert events[-1]["is_last"] and events[-1]["finish_reason"] == case.tool_finish


@pytest.mark.parametrize("case", [case for case in CASES if case.reasoning], ids=str)
def test_reasoning_is_its_own_field(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    events = maps(stream(client, case, model_id, chunks=2, reasoning="Think about the play."))
    thinking = [e for e in events if "reasoning_content" in e]
    assert "".join(e["reasoning_content"] for e in thinking) == "Think about the play."
    assert all(e["content"] == "" and e["is_last"] is False for e in thinking)
    assert "".join(e["content"] for e in events) == "".join(fake_tokens(Scenario(chunks=2)))


def test_errors_before_the_first_event_are_statuses(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    for name, (knobs, status, message) in case.errors.items():
        response = stream(client, case, model_id, **knobs)
        assert response.status == status, (name, response.status, response.body)
        body = json.loads(response.body)
        assert body["status"] == status and message in body["error"]["reason"], (name, body)
        if status in (429, 503):
            assert int(response.headers["retry-after"]) >= 1, name
        assert not any(secret.encode() in response.body for secret in case.secrets(provider))


def test_error_after_the_first_event_is_the_final_event(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    response = stream(client, case, model_id, chunks=6, error_after=3)
    assert response.status == 200 and response.complete
    events = response.events()
    assert set(events[-1]) == {"error"} and events[-1]["error"].startswith("Error from remote service")
    assert [e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in events[:-1]] == \
        fake_tokens(Scenario(chunks=6))[:3]


def test_cut_connection_mid_stream_is_the_final_event(client, case, provider):
    model_id = client.model_for(case.connector(provider))
    response = stream(client, case, model_id, chunks=6, cut_after=2)
    assert response.status == 200 and response.complete
    events = response.events()
    assert set(events[-1]) == {"error"}, events[-1]
    assert len(events) == 3


def test_hang_up_cancels_the_provider_call(make_server, case, provider):
    server = make_server(stream_workers=2)
    client = Client(server.url)
    model_id = client.model_for(case.connector(provider))
    sock = post_stream(server.url, model_id, stream_parameters(case, chunks=1000, delay_ms=50))
    with sock:
        assert sock.recv(1)  # the response has started
    assert provider.stats.wait_for(lambda s: s.client_disconnects == 1, HANG_GUARD)
    assert server.app.pool.wait_idle(HANG_GUARD)
    assert provider.stats.streams_completed == 0


def test_a_client_reading_nothing_stalls_the_provider(make_server, case, provider):
    queue_chunks = 8
    server = make_server(stream_queue_chunks=queue_chunks)
    client = Client(server.url)
    model_id = client.model_for(case.connector(provider))
    scenario = Scenario(chunks=20_000, chunk_bytes=1000)  # a 20 MB answer
    sock = post_stream(server.url, model_id, stream_parameters(case, chunks=scenario.chunks, chunk_bytes=1000),
                       rcvbuf=64 * 1024)
    with sock, sock.makefile("rb") as reader:
        assert provider.stats.wait_for(lambda s: s.streams_started == 1, HANG_GUARD)
        channel = stream_channel(server)
        assert poll_until(lambda: held_in_channel(channel) >= queue_chunks, HANG_GUARD)
        # the provider is held back: it never gets to the end while nobody reads
        assert not provider.stats.wait_for(lambda s: s.streams_completed == 1, IDLE_WINDOW)
        assert held_in_channel(channel) == queue_chunks
        response = read_response(reader)  # the client resumes: the answer arrives whole
    contents = [m["content"] for m in maps(response)]
    assert len(contents) == scenario.chunks + 1 and contents[:3] == fake_tokens(scenario)[:3]

