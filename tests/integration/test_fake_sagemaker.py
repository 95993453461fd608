"""The fake SageMaker runtime, proven faithful with boto3's ``sagemaker-runtime`` over loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from mlstream.providers.events import Delta, Done
from mlstream.providers.sagemaker import LMIChatDecoder, LMIStreamDecoder, TGIChatDecoder, TGIStreamDecoder
from mlstream.testing.embeddings import SAGEMAKER_DIMENSIONS, fake_relevance, fake_vector
from mlstream.testing.fake_sagemaker import DEFAULT_TEXT, FakeSageMaker, Scenario, fake_tokens

from ..support.aws import isolate_aws_environment

TIMEOUT = 5.0
ENDPOINT = "hamlet-llm-endpoint"
DECODERS = {"tgi": TGIStreamDecoder, "lmi": LMIStreamDecoder}
CHAT_DECODERS = {"tgi": TGIChatDecoder, "lmi": LMIChatDecoder}
TOOL = {"id": "call_sm0001", "name": "get_weather", "input": {"location": "Elsinore"}}


@pytest.fixture(autouse=True)
def _isolated_aws_environment(monkeypatch, tmp_path):
    isolate_aws_environment(monkeypatch, tmp_path)


@pytest.fixture(params=["tgi", "lmi"])
def fake(request) -> Iterator[FakeSageMaker]:
    with FakeSageMaker(container=request.param) as provider:
        yield provider


def runtime(fake: FakeSageMaker, secret_key: str | None = None):
    return boto3.client("sagemaker-runtime", region_name=fake.region, endpoint_url=fake.url,
                        aws_access_key_id=fake.access_key, aws_secret_access_key=secret_key or fake.secret_key,
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=TIMEOUT,
                                      read_timeout=TIMEOUT))


def body(**knobs) -> bytes:
    return json.dumps({"inputs": "Who is Hamlet?", "parameters": {"max_new_tokens": 64, "details": True},
                       "fake": knobs}).encode()


def test_invoke_endpoint_returns_the_containers_json(fake):
    response = runtime(fake).invoke_endpoint(EndpointName=ENDPOINT, Body=body(), ContentType="application/json")
    answer = json.loads(response["Body"].read())
    whole = answer[0] if fake.container == "tgi" else answer
    assert whole["generated_text"] == DEFAULT_TEXT and whole["details"]["finish_reason"] == "eos_token"
    assert fake.stats.requests[-1].path == f"/endpoints/{ENDPOINT}/invocations"


def test_stream_payload_parts_carry_the_containers_stream(fake):
    response = runtime(fake).invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, Body=body(chunks=4), ContentType="application/json")
    parts = [event["PayloadPart"]["Bytes"] for event in response["Body"]]
    assert len(parts) == 2 * (4 + 1)  # every token's bytes cut in two
    # the bytes boto3 hands out are exactly what our decoder reads
    decoder = DECODERS[fake.container]()
    items = decoder.feed(b"".join(parts)) + decoder.finish()
    assert items[:-1] == [Delta(t) for t in fake_tokens(Scenario(chunks=4))]
    assert items[-1] == Done("eos_token", {"input_length": 3, "generated_tokens": 5})
    assert fake.stats.requests[-1].path == f"/endpoints/{ENDPOINT}/invocations-response-stream"
    assert fake.stats.wait_for(lambda s: s.streams_completed == 1, TIMEOUT)


@pytest.mark.parametrize("kind", ["ModelStreamError", "InternalStreamFailure"])
def test_stream_exceptions_raise_in_boto3(fake, kind):
    response = runtime(fake).invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, Body=body(chunks=4, error_after=2, error_type=kind), ContentType="application/json")
    seen = []
    with pytest.raises(EventStreamError) as raised:
        for event in response["Body"]:
            seen.append(event)
    assert raised.value.response["Error"]["Code"] == kind
    assert len(seen) == 4


def chat_body(**knobs) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "Who is Hamlet?"}], "max_tokens": 64,
                       "fake": knobs}).encode()


def test_a_chat_request_is_answered_in_the_chat_completions_schema(fake):
    response = runtime(fake).invoke_endpoint(EndpointName=ENDPOINT, Body=chat_body(tool_use=TOOL),
                                             ContentType="application/json")
    answer = json.loads(response["Body"].read())
    choice = answer["choices"][0]
    assert answer["object"] == "chat.completion" and choice["message"]["content"] == DEFAULT_TEXT
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                               "arguments": '{"location":"Elsinore"}'}
    assert choice["finish_reason"] == "tool_calls" and answer["usage"]["prompt_tokens"] == 3


def test_a_chat_stream_carries_chunks_our_chat_decoder_reads(fake):
    response = runtime(fake).invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, Body=chat_body(chunks=3, tool_use=TOOL), ContentType="application/json")
    data = b"".join(event["PayloadPart"]["Bytes"] for event in response["Body"])
    assert data.endswith(b"data: [DONE]\n\n") == (fake.container == "tgi")
    decoder = CHAT_DECODERS[fake.container]()
    items = decoder.feed(data) + decoder.finish()
    assert items[:3] == [Delta(t) for t in fake_tokens(Scenario(chunks=3))]
    assert items[3] == Delta({"type": "function", "id": "call_sm0001",
                              "function": {"name": "get_weather", "arguments": {"location": "Elsinore"}}})
    assert items[4] == Done("tool_calls", {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
    assert len(items) == 5


@pytest.mark.parametrize("status, code", [(429, "ThrottlingException"), (424, "ModelError"),
                                          (400, "ValidationError")])
def test_http_errors_are_client_errors(fake, status, code):
    with pytest.raises(ClientError) as raised:
        runtime(fake).invoke_endpoint_with_response_stream(EndpointName=ENDPOINT, Body=body(status=status),
                                                           ContentType="application/json")
    assert raised.value.response["Error"]["Code"] == code
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_wrong_secret_is_refused(fake):
    with pytest.raises(ClientError) as raised:
        runtime(fake, secret_key="wrong-secret").invoke_endpoint(EndpointName=ENDPOINT, Body=body())
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert fake.stats.auth_failures == 1


@pytest.mark.parametrize("request_body, expected", [
    ({"inputs": "a red cat"}, [list(fake_vector("a red cat", SAGEMAKER_DIMENSIONS))]),
    ({"query": "red cat", "texts": ["a dog", "a red cat"]},
     [{"index": 1, "score": fake_relevance("red cat", "a red cat")}, {"index": 0, "score": 0.0}]),
    ({"inputs": [{"text": "red cat", "text_pair": "a red cat"}, {"text": "red cat", "text_pair": "a dog"}]},
     [{"label": "LABEL_0", "score": 1.0}, {"label": "LABEL_0", "score": 0.0}]),
])
def test_encoder_endpoints_answer_embeddings_and_scores(request_body, expected):
    """The "encoder" container: Text Embeddings Inference (embed, rerank) and a cross-encoder."""
    with FakeSageMaker(container="encoder") as fake:
        response = runtime(fake).invoke_endpoint(EndpointName=ENDPOINT, Body=json.dumps(request_body).encode(),
                                                 ContentType="application/json")
        assert json.loads(response["Body"].read()) == expected
        with pytest.raises(ClientError) as caught:
            runtime(fake).invoke_endpoint(EndpointName=ENDPOINT, Body=b'{"inputs": 3}', ContentType="application/json")
        assert caught.value.response["Error"]["Code"] == "ModelError"
