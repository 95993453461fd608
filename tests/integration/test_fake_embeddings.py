"""The fakes' embedding, rerank, Comprehend, Textract and Claude-on-InvokeModel APIs,
proven with the providers' own SDKs where one is installed (openai; boto3 for
bedrock-runtime, bedrock-agent-runtime, comprehend, textract) and over raw HTTP for
Cohere (its SDK is not a test dependency)."""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Iterator
from typing import Any

import boto3
import openai
from botocore.config import Config
import pytest
import urllib3

from mlstream.testing.embeddings import fake_relevance, fake_vector, quantized
from mlstream.testing.fake_bedrock import FakeBedrock
from mlstream.testing.fake_openai import FakeOpenAI
from mlstream.testing.tokens import DEFAULT_TEXT  # what both fakes answer by default

from ..support.timeouts import HANG_GUARD


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        yield fake


def aws(fake: FakeBedrock, service: str, config: Config | None = None) -> Any:
    return boto3.client(service, region_name=fake.region, endpoint_url=fake.url, config=config,
                        aws_access_key_id=fake.access_key, aws_secret_access_key=fake.secret_key)


def cohere(fake: FakeOpenAI, path: str, body: Any, key: str | None = None, **headers: str) -> Any:
    http = urllib3.PoolManager(retries=False, timeout=HANG_GUARD)
    response = http.request("POST", fake.url + path, json=body,
                            headers={"Authorization": f"Bearer {key or fake.api_key}", **headers})
    return response.status, json.loads(response.data), response.headers


# ------------------------------------------------------------------ OpenAI and Azure, openai SDK

def test_openai_sdk_embeddings_float_and_base64(fake: FakeOpenAI) -> None:
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key=fake.api_key, max_retries=0)
    floats = client.embeddings.create(model="text-embedding-3-small", input=["hello", "world"],
                                      encoding_format="float")
    assert [d.embedding for d in floats.data] == [list(fake_vector(t, 1536)) for t in ("hello", "world")]
    assert [d.index for d in floats.data] == [0, 1] and floats.usage.prompt_tokens == 2
    packed = client.embeddings.create(model="text-embedding-3-small", input="hello", dimensions=8)
    as_float32 = struct.unpack("<8f", struct.pack("<8f", *fake_vector("hello", 8)))
    assert packed.data[0].embedding == pytest.approx(list(as_float32))
    raw = client.embeddings.with_raw_response.create(model="m", input="x", dimensions=2, encoding_format="base64")
    assert len(base64.b64decode(json.loads(raw.text)["data"][0]["embedding"])) == 8


def test_azure_openai_sdk_embeddings(fake: FakeOpenAI) -> None:
    client = openai.AzureOpenAI(azure_endpoint=fake.url, api_key=fake.api_key, api_version="2024-02-01",
                                max_retries=0)
    answer = client.embeddings.create(model="my-deployment", input="hi", dimensions=4, encoding_format="float")
    assert answer.data[0].embedding == list(fake_vector("hi", 4))
    assert fake.stats.requests[-1].path.startswith("/openai/deployments/my-deployment/embeddings?api-version=")
    wrong = openai.AzureOpenAI(azure_endpoint=fake.url, api_key="nope", api_version="2024-02-01", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.embeddings.create(model="my-deployment", input="hi")


@pytest.mark.parametrize("knob, error", [("status=429", openai.RateLimitError), ("status=503", openai.InternalServerError),
                                         ("status=401", openai.AuthenticationError)])
def test_openai_sdk_sees_the_fault_knobs(fake: FakeOpenAI, knob: str, error: type) -> None:
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key=fake.api_key, max_retries=0)
    with pytest.raises(error):
        client.embeddings.create(model=f"text-embedding-3-small?{knob}", input="x")


def test_slow_knob_delays_the_answer(fake: FakeOpenAI) -> None:
    start = time.monotonic()
    status, _, _ = cohere(fake, "/v1/embeddings", {"model": "m", "input": "x", "dimensions": 2},
                             **{"X-Fake-First-Delay-Ms": "200"})
    assert status == 200 and time.monotonic() - start >= 0.2


# ------------------------------------------------------------------ Cohere, raw HTTP

def test_cohere_v1_embed_floats_and_by_type(fake: FakeOpenAI) -> None:
    status, body, _ = cohere(fake, "/v1/embed", {"texts": ["a", "b"], "model": "embed-english-v3.0",
                                                 "input_type": "search_document"})
    assert status == 200 and body["response_type"] == "embeddings_floats"
    assert body["embeddings"] == [list(fake_vector("a", 1024)), list(fake_vector("b", 1024))]
    status, body, _ = cohere(fake, "/v1/embed", {"texts": ["a"], "embedding_types": ["int8", "ubinary"]})
    assert body["embeddings"] == {"int8": [quantized(fake_vector("a", 1024), "int8")],
                                  "ubinary": [quantized(fake_vector("a", 1024), "ubinary")]}
    assert len(body["embeddings"]["ubinary"][0]) == 128


def test_cohere_v2_embed_is_by_type(fake: FakeOpenAI) -> None:
    status, body, _ = cohere(fake, "/v2/embed", {"texts": ["a"], "model": "embed-v4.0", "input_type": "search_query",
                                                 "embedding_types": ["float", "binary"]})
    assert status == 200
    assert body["embeddings"]["float"] == [list(fake_vector("a", 1024))]
    assert all(-128 <= v <= 127 for v in body["embeddings"]["binary"][0])


def test_cohere_rerank_best_first_top_n(fake: FakeOpenAI) -> None:
    docs = ["the sky is blue", "a red fox", "red fox jumps high"]
    status, body, _ = cohere(fake, "/v1/rerank", {"query": "red fox jumps", "documents": docs, "top_n": 2})
    assert status == 200
    assert body["results"] == [{"index": 2, "relevance_score": 1.0},
                               {"index": 1, "relevance_score": fake_relevance("red fox jumps", docs[1])}]


def test_cohere_errors(fake: FakeOpenAI) -> None:
    assert cohere(fake, "/v1/embed", {"texts": ["a"]}, key="wrong")[0] == 401
    assert cohere(fake, "/v1/embed", {"texts": []})[0] == 400
    status, _, headers = cohere(fake, "/v1/rerank", {"query": "q", "documents": ["d"]},
                                **{"X-Fake-Status": "429", "X-Fake-Retry-After": "2"})
    assert status == 429 and headers["Retry-After"] == "2"


# ------------------------------------------------------------------ Bedrock and AWS, boto3

def invoke(fake: FakeBedrock, model_id: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = aws(fake, "bedrock-runtime").invoke_model(modelId=model_id, body=json.dumps(body),
                                                        contentType="application/json")
    return json.loads(answer["body"].read())


def test_boto3_invoke_model_titan(bedrock: FakeBedrock) -> None:
    assert invoke(bedrock, "amazon.titan-embed-text-v1", {"inputText": "hello there"}) == {
        "embedding": list(fake_vector("hello there", 1536)), "inputTextTokenCount": 2}
    v2 = invoke(bedrock, "amazon.titan-embed-text-v2:0", {"inputText": "x", "dimensions": 256,
                                                          "embeddingTypes": ["float", "binary"]})
    assert v2["embeddingsByType"]["float"] == list(fake_vector("x", 256))
    assert set(v2["embeddingsByType"]["binary"]) <= {0, 1}
    image = invoke(bedrock, "amazon.titan-embed-image-v1", {"inputText": None, "inputImage": "aW1n"})
    assert image["embedding"] == list(fake_vector("|aW1n", 1024))


def test_boto3_invoke_model_rerank(bedrock: FakeBedrock) -> None:
    """InvokeModel on amazon.rerank-v1:0 (and Cohere Rerank on Bedrock): best first."""
    docs = ["a dog", "the red cat", "a red car"]
    answer = invoke(bedrock, "amazon.rerank-v1:0", {"query": "red cat", "documents": docs})
    assert answer == {"results": [{"index": 1, "relevance_score": 1.0}, {"index": 2, "relevance_score": 0.5},
                                  {"index": 0, "relevance_score": 0.0}]}
    assert invoke(bedrock, "cohere.rerank-v3-5:0", {"query": "red cat", "documents": docs, "top_n": 1,
                                                    "api_version": 2})["results"] == answer["results"][:1]


def test_boto3_invoke_model_cohere_and_nova(bedrock: FakeBedrock) -> None:
    cohere_answer = invoke(bedrock, "cohere.embed-english-v3", {"texts": ["a", "b"], "input_type": "search_document"})
    assert cohere_answer["embeddings"] == [list(fake_vector("a", 1024)), list(fake_vector("b", 1024))]
    nova = invoke(bedrock, "amazon.nova-2-multimodal-embeddings-v1:0", {
        "taskType": "SINGLE_EMBEDDING",
        "singleEmbeddingParams": {"embeddingPurpose": "GENERIC_INDEX", "embeddingDimension": 384,
                                  "text": {"truncationMode": "END", "value": "hi"}}})
    assert nova == {"embeddings": [{"embeddingType": "TEXT", "embedding": list(fake_vector("hi", 384))}]}


def test_boto3_invoke_model_faults(bedrock: FakeBedrock) -> None:
    # one attempt: botocore's backoff between retries of a throttled call is its own business
    client = aws(bedrock, "bedrock-runtime", Config(retries={"total_max_attempts": 1}))
    client.meta.events.register("before-send.*", lambda request, **_: request.headers.__setitem__(
        "X-Fake-Throttle", "http"))
    with pytest.raises(client.exceptions.ThrottlingException):
        client.invoke_model(modelId="amazon.titan-embed-text-v1", body=json.dumps({"inputText": "x"}))
    assert len(bedrock.stats.requests) == 1
    with pytest.raises(aws(bedrock, "bedrock-runtime").exceptions.ValidationException):
        invoke(bedrock, "amazon.titan-embed-text-v1", {"text": "no inputText"})


def test_boto3_rerank(bedrock: FakeBedrock) -> None:
    docs = ["blue sky", "red fox jumps", "fox"]
    answer = aws(bedrock, "bedrock-agent-runtime").rerank(
        queries=[{"type": "TEXT", "textQuery": {"text": "red fox"}}],
        sources=[{"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": d}}}
                 for d in docs],
        rerankingConfiguration={"type": "BEDROCK_RERANKING_MODEL", "bedrockRerankingConfiguration": {
            "numberOfResults": 2,
            "modelConfiguration": {"modelArn": "arn:aws:bedrock:us-east-1::foundation-model/amazon.rerank-v1:0"}}})
    assert answer["results"] == [{"index": 1, "relevanceScore": 1.0}, {"index": 2, "relevanceScore": 0.5}]


def test_boto3_comprehend_and_textract(bedrock: FakeBedrock) -> None:
    languages = aws(bedrock, "comprehend").detect_dominant_language(Text="Hello, how are you?")["Languages"]
    assert languages == [{"LanguageCode": "en", "Score": 0.99}]
    blocks = aws(bedrock, "textract").detect_document_text(Document={"Bytes": b"\x89PNG"})["Blocks"]
    assert blocks[1]["BlockType"] == "LINE" and blocks[1]["Text"] == "fake text of 8 base64 bytes"


def test_boto3_invoke_model_anthropic_messages(bedrock: FakeBedrock) -> None:
    answer = invoke(bedrock, "anthropic.claude-3-sonnet-20240229-v1:0", {
        "anthropic_version": "bedrock-2023-05-31", "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Who is Hamlet?"}]}]})
    assert answer["type"] == "message" and answer["stop_reason"] == "end_turn"
    assert answer["content"] == [{"type": "text", "text": DEFAULT_TEXT}]
    assert answer["usage"]["input_tokens"] == 3
    with pytest.raises(aws(bedrock, "bedrock-runtime").exceptions.ValidationException):
        invoke(bedrock, "anthropic.claude-3-sonnet-20240229-v1:0", {"messages": []})


def test_azure_openai_sdk_chat(fake: FakeOpenAI) -> None:
    client = openai.AzureOpenAI(azure_endpoint=fake.url, api_key=fake.api_key, api_version="2024-02-01",
                                max_retries=0)
    answer = client.chat.completions.create(model="gpt-4-deployment", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == DEFAULT_TEXT and answer.model == "gpt-4-deployment"


def test_cohere_chat_v1_and_v2(fake: FakeOpenAI) -> None:
    status, body, _ = cohere(fake, "/v1/chat", {"message": "What is the weather like in London?", "model": "command"})
    assert status == 200 and body["text"] == DEFAULT_TEXT and body["finish_reason"] == "COMPLETE"
    status, body, _ = cohere(fake, "/v2/chat", {"model": "command-r-plus", "stream": False,
                                                "messages": [{"role": "user", "content": "Hello"}]})
    assert status == 200 and body["message"]["content"] == [{"type": "text", "text": DEFAULT_TEXT}]
    assert cohere(fake, "/v2/chat", {"model": "command-r-plus"})[0] == 400


def test_boto3_invoke_model_claude_v2_text_and_inference_profiles(bedrock: FakeBedrock) -> None:
    answer = invoke(bedrock, "anthropic.claude-v2", {"prompt": "\n\nHuman: hi\n\nAssistant:",
                                                     "max_tokens_to_sample": 300})
    assert answer["completion"] == " " + DEFAULT_TEXT and answer["stop_reason"] == "stop_sequence"
    profile = invoke(bedrock, "us.anthropic.claude-3-7-sonnet-20250219-v1:0", {
        "anthropic_version": "bedrock-2023-05-31", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    assert profile["content"][0]["text"] == DEFAULT_TEXT
