"""ml-commons' published connector blueprints, end to end over real sockets.

Each test writes its connector the way the blueprint it names does (same fields,
functions, templates and parameters; only the host is the loopback fake), predicts
the way the blueprint does, and checks the answer against the blueprint's documented
shape. Vectors and scores are the fakes' deterministic ones (``embeddings.fake_vector``,
``fake_relevance``), so the numbers are checked too. Blueprint paths are under
docs/remote_inference_blueprints/ of opensearch-project/ml-commons unless said.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from mlstream.inference.predict import MAX_UPSTREAM_REQUESTS_PER_CALL
from mlstream.app.compose import Server
from mlstream.testing.embeddings import fake_relevance, fake_vector, quantized
from mlstream.testing.fake_batch import FakeOpenAIBatches, FakeSageMakerBatch
from mlstream.testing.fake_bedrock import DEFAULT_TEXT, FakeBedrock
from mlstream.testing.fake_openai import FakeOpenAI

from ..support.clients import Client
from ..support.connectors import (aws_credential, bedrock_invoke_connector, host, openai_embedding_connector,
                                  titan_connector)

# The AWS JSON services (Comprehend, Textract) are called on the host's root URL.
AWS_ROOT_TRUST = r"^http://127\.0\.0\.1:\d+(/.*)?$"


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        yield fake


@pytest.fixture
def api(make_server: Callable[..., Server]) -> Client:
    return Client(make_server(trusted_endpoints=(AWS_ROOT_TRUST,)).url)


def embedding(text: str, dims: int, data_type: str = "FLOAT32", kind: str = "float") -> dict[str, Any]:
    data = quantized(fake_vector(text, dims), kind)
    return {"name": "sentence_embedding", "data_type": data_type, "shape": [len(data)], "data": data}


def similarity(score: float) -> dict[str, Any]:
    return {"name": "similarity", "data_type": "FLOAT32", "shape": [1], "data": [score]}


def predict(api: Client, model_id: str, body: dict[str, Any], path: str | None = None) -> Any:
    return api.ok("POST", path or f"/_plugins/_ml/models/{model_id}/_predict", body)


def bodies(fake: Any) -> list[Any]:
    return [request.body for request in fake.stats.requests]


# ------------------------------------------------------------------------- OpenAI


def test_openai_embedding_blueprint_parameters(fake: FakeOpenAI, api: Client) -> None:
    """openai_connector_embedding_blueprint.md: step 4, ``parameters.input``."""
    model_id = api.model_for(openai_embedding_connector(fake))
    answer = predict(api, model_id, {"parameters": {"input": ["What is the meaning of life?"]}})
    assert answer == {"inference_results": [{
        "output": [embedding("What is the meaning of life?", 1536)], "status_code": 200}]}
    assert bodies(fake) == [{"input": ["What is the meaning of life?"], "model": "text-embedding-ada-002"}]


@pytest.mark.parametrize("path", ["/_plugins/_ml/_predict/text_embedding/{id}",
                                  "/_plugins/_ml/models/{id}/_predict?algorithm=text_embedding",
                                  "/_plugins/_ml/models/{id}/_predict"])
def test_openai_embedding_blueprint_text_docs(fake: FakeOpenAI, api: Client, path: str) -> None:
    """openai_connector_embedding_blueprint.md, called as neural-search does: ``text_docs``,
    one upstream request for all of them, one tensor per document in input order."""
    model_id = api.model_for(openai_embedding_connector(fake))
    docs = ["today is sunny", 'a "quoted" doc\nwith a newline', "today is sunny"]
    answer = predict(api, model_id, {"text_docs": docs, "return_number": True,
                                     "target_response": ["sentence_embedding"]}, path.format(id=model_id))
    assert answer == {"inference_results": [{"output": [embedding(d, 1536) for d in docs], "status_code": 200}]}
    assert bodies(fake) == [{"input": docs, "model": "text-embedding-ada-002"}]


def test_openai_embedding_standard_blueprint(fake: FakeOpenAI, api: Client) -> None:
    """standard_blueprints/openai_connector_embedding_standard_blueprint.md: no process
    functions, so the provider's JSON comes back as ``response``; ``text_docs`` still
    fills ``input`` (connector.pre_process.default.embedding, as ml-commons defaults)."""
    connector = openai_embedding_connector(fake)
    del connector["actions"][0]["pre_process_function"], connector["actions"][0]["post_process_function"]
    model_id = api.model_for(connector)
    for body in ({"parameters": {"input": ["Say this is a test"]}}, {"text_docs": ["Say this is a test"]}):
        output = predict(api, model_id, body)["inference_results"][0]["output"]
        assert output[0]["name"] == "response"
        assert output[0]["dataAsMap"]["data"][0]["embedding"] == list(fake_vector("Say this is a test", 1536))


def test_azure_openai_embedding_blueprint(fake: FakeOpenAI, api: Client) -> None:
    """azure_openai_connector_embedding_blueprint.md (its endpoint ends in "/" too)."""
    model_id = api.model_for({
        "name": "Azure OpenAI embedding", "description": "d", "version": "1", "protocol": "http",
        "parameters": {"endpoint": host(fake) + "/", "deploy-name": "my-ada", "model": "text-embedding-ada-002",
                       "api-version": "2023-05-15"},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict", "method": "POST",
            "url": "http://${parameters.endpoint}/openai/deployments/${parameters.deploy-name}/embeddings"
                   "?api-version=${parameters.api-version}",
            "headers": {"api-key": "${credential.openAI_key}"},
            "request_body": "{ \"input\": ${parameters.input}}",
            "pre_process_function": "connector.pre_process.openai.embedding",
            "post_process_function": "connector.post_process.openai.embedding",
        }],
    })
    answer = predict(api, model_id, {"parameters": {"input": ["What is the meaning of life?"]}})
    assert answer["inference_results"][0]["output"] == [embedding("What is the meaning of life?", 1536)]
    assert fake.stats.requests[-1].path.endswith("/openai/deployments/my-ada/embeddings?api-version=2023-05-15")


def test_provider_failure_is_the_calls_failure_with_no_partial_result(fake: FakeOpenAI, api: Client) -> None:
    model_id = api.model_for(openai_embedding_connector(fake, headers={
        "Authorization": "Bearer ${credential.openAI_key}", "X-Fake-Status": "429", "X-Fake-Retry-After": "3"}))
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"text_docs": ["a", "b"]})
    assert reply.status == 429, reply.body
    assert "inference_results" not in reply.body and "Rate limit" in reply.body["error"]["reason"]
    assert fake.api_key not in json.dumps(reply.body)


# ------------------------------------------------------------------------- Cohere

def cohere_connector(fake: FakeOpenAI, body: str, pre: str, post: str, path: str = "/v1/embed",
                     **parameters: Any) -> dict[str, Any]:
    return {
        "name": "Cohere Embed Model", "description": "The connector to Cohere's public embed API", "version": "1",
        "protocol": "http",
        "credential": {"cohere_key": fake.api_key},
        "parameters": {"model": "embed-english-v3.0", "input_type": "search_document", "truncate": "END",
                       **parameters},
        "actions": [{
            "action_type": "predict", "method": "POST", "url": f"http://{host(fake)}{path}",
            "headers": {"Authorization": "Bearer ${credential.cohere_key}", "Request-Source": "unspecified:opensearch"},
            "request_body": body, "pre_process_function": pre, "post_process_function": post,
        }],
    }


COHERE_EMBED_BODY = ("{ \"texts\": ${parameters.texts}, \"truncate\": \"${parameters.truncate}\", "
                     "\"model\": \"${parameters.model}\", \"input_type\": \"${parameters.input_type}\" }")


def test_cohere_embedding_blueprint(fake: FakeOpenAI, api: Client) -> None:
    """cohere_connector_embedding_blueprint.md: ``parameters.texts``, and ``text_docs``."""
    model_id = api.model_for(cohere_connector(fake, COHERE_EMBED_BODY, "connector.pre_process.cohere.embedding",
                                              "connector.post_process.cohere.embedding"))
    answer = predict(api, model_id, {"parameters": {"texts": ["Say this is a test"]}})
    assert answer["inference_results"] == [{"output": [embedding("Say this is a test", 1024)], "status_code": 200}]
    answer = predict(api, model_id, {"text_docs": ["one", "two"]}, f"/_plugins/_ml/_predict/text_embedding/{model_id}")
    assert answer["inference_results"][0]["output"] == [embedding("one", 1024), embedding("two", 1024)]
    assert bodies(fake)[-1] == {"texts": ["one", "two"], "truncate": "END", "model": "embed-english-v3.0",
                                "input_type": "search_document"}


@pytest.mark.parametrize("kind, data_type", [("float", "FLOAT32"), ("int8", "INT8"), ("uint8", "UINT8"),
                                             ("binary", "BINARY"), ("ubinary", "UBINARY")])
def test_cohere_v2_embedding_types(fake: FakeOpenAI, api: Client, kind: str, data_type: str) -> None:
    """The cohere_v2.embedding.* post-process functions on Cohere's /v2/embed (connector
    modelled on cohere_connector_embedding_blueprint.md with v2's embedding_types)."""
    body = ("{ \"texts\": ${parameters.texts}, \"model\": \"${parameters.model}\", "
            "\"input_type\": \"${parameters.input_type}\", \"embedding_types\": [\"" + kind + "\"] }")
    model_id = api.model_for(cohere_connector(fake, body, "connector.pre_process.cohere.embedding",
                                              f"connector.post_process.cohere_v2.embedding.{kind}", path="/v2/embed"))
    answer = predict(api, model_id, {"text_docs": ["hello world"]})
    assert answer["inference_results"][0]["output"] == [embedding("hello world", 1024, data_type, kind)]


def test_cohere_image_embedding_blueprint(fake: FakeOpenAI, api: Client) -> None:
    """cohere_connector_image_embedding_blueprint.md: ``parameters.images``."""
    body = ("{ \"images\": ${parameters.images}, \"truncate\": \"${parameters.truncate}\", "
            "\"model\": \"${parameters.model}\", \"input_type\": \"${parameters.input_type}\" }")
    model_id = api.model_for(cohere_connector(fake, body, "connector.pre_process.cohere.multimodal_embedding",
                                              "connector.post_process.cohere.embedding", input_type="image"))
    image = "data:image/png;base64,iVBORw0KGgo="
    answer = predict(api, model_id, {"text_docs": [image]})
    assert bodies(fake)[-1]["images"] == [image]
    assert answer["inference_results"][0]["output"] == [embedding(image, 1024)]


RERANK_DOCS = ["Carson City is the capital city of the American state of Nevada.",
               "Washington, D.C. is the capital of the United States.",
               "Capital punishment has existed in the United States since before it was a country."]
RERANK_QUERY = "What is the capital of the United States?"


def test_cohere_rerank_tutorial(fake: FakeOpenAI, api: Client) -> None:
    """docs/tutorials/rerank/rerank_pipeline_with_Cohere_Rerank_model.md: similarity tensors
    in the order of the documents sent (Cohere answers best first)."""
    connector = cohere_connector(
        fake, "{ \"documents\": ${parameters.documents}, \"query\": \"${parameters.query}\", "
              "\"model\": \"${parameters.model}\", \"top_n\": ${parameters.top_n} }",
        "connector.pre_process.cohere.rerank", "connector.post_process.cohere.rerank", path="/v1/rerank")
    connector["parameters"] = {"model": "rerank-english-v2.0"}
    model_id = api.model_for(connector)
    expected = [similarity(fake_relevance(RERANK_QUERY, d)) for d in RERANK_DOCS]
    answer = predict(api, model_id, {"parameters": {"query": RERANK_QUERY, "documents": RERANK_DOCS, "top_n": 3}})
    assert answer == {"inference_results": [{"output": expected, "status_code": 200}]}
    # as the rerank search processor calls it
    answer = predict(api, model_id, {"query_text": RERANK_QUERY, "text_docs": RERANK_DOCS},
                     f"/_plugins/_ml/_predict/text_similarity/{model_id}")
    assert answer["inference_results"][0]["output"] == expected
    assert bodies(fake)[-1] == {"documents": RERANK_DOCS, "query": RERANK_QUERY, "model": "rerank-english-v2.0",
                                "top_n": 3}


# ------------------------------------------------------------------------- Bedrock


def test_bedrock_titan_embedding_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_titan_embedding_blueprint.md: ``parameters.inputText``; and
    ``text_docs``: one upstream request per document (bedrock.embedding), one
    ``inference_results`` entry each, in input order."""
    model_id = api.model_for(titan_connector(bedrock))
    answer = predict(api, model_id, {"parameters": {"inputText": "What is the meaning of life?"}})
    assert answer == {"inference_results": [{"output": [embedding("What is the meaning of life?", 1536)],
                                             "status_code": 200}]}
    docs = [f"document number {i} says \"{i}\"" for i in range(7)]
    answer = predict(api, model_id, {"text_docs": docs}, f"/_plugins/_ml/_predict/text_embedding/{model_id}")
    assert answer == {"inference_results": [{"output": [embedding(d, 1536)], "status_code": 200} for d in docs]}
    assert sorted(b["inputText"] for b in bodies(bedrock)[1:]) == sorted(docs)


def test_bedrock_titan_step_size_groups_documents(bedrock: FakeBedrock, api: Client) -> None:
    """input_docs_processed_step_size overrides the one-per-document default
    (RemoteConnectorExecutor.calculateChunkSize); Titan's template takes the first of each group."""
    model_id = api.model_for(titan_connector(bedrock, input_docs_processed_step_size=2))
    answer = predict(api, model_id, {"text_docs": ["a", "b", "c"]})
    assert [r["output"] for r in answer["inference_results"]] == [[embedding("a", 1536)], [embedding("c", 1536)]]


def test_bedrock_requests_of_one_call_run_at_most_max_connection_at_once(bedrock: FakeBedrock, api: Client) -> None:
    connector = titan_connector(bedrock)
    connector["client_config"] = {"max_connection": 2}
    connector["actions"][0]["headers"]["X-Fake-First-Delay-Ms"] = "100"
    model_id = api.model_for(connector)
    docs = [f"doc {i}" for i in range(6)]
    bedrock.stats.reset()
    answer = predict(api, model_id, {"text_docs": docs})
    assert [r["output"] for r in answer["inference_results"]] == [[embedding(d, 1536)] for d in docs]
    # six 100 ms answers: run two at a time, never more (nor one after another)
    assert len(bedrock.stats.requests) == 6
    assert bedrock.stats.peak_requests_in_flight == 2


def test_bedrock_requests_of_one_call_are_bounded(bedrock: FakeBedrock, api: Client) -> None:
    # One request per document: 1025 documents would be 1025 requests; nothing is sent.
    model_id = api.model_for(titan_connector(bedrock))
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                     {"text_docs": [""] * (MAX_UPSTREAM_REQUESTS_PER_CALL + 1)})
    assert reply.status == 400, reply.body
    assert "at most 1024 requests (1024 documents)" in reply.body["error"]["reason"]
    assert bedrock.stats.requests == []
    # the step size sets how many documents that is
    model_id = api.model_for(titan_connector(bedrock, input_docs_processed_step_size=2))
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                     {"text_docs": ["d"] * (2 * MAX_UPSTREAM_REQUESTS_PER_CALL + 1)})
    assert reply.status == 400 and "(2048 documents)" in reply.body["error"]["reason"], reply.body
    assert bedrock.stats.requests == []


def test_a_split_predict_cut_short_by_shutdown_is_a_503(bedrock: FakeBedrock,
                                                        make_server: Callable[..., Server]) -> None:
    # One fan-out worker: the first call's second request takes it, the second call's waits.
    server = make_server(trusted_endpoints=(AWS_ROOT_TRUST,), stream_workers=1)
    api = Client(server.url)
    connector = titan_connector(bedrock)
    connector["client_config"] = {"max_connection": 2}
    connector["actions"][0]["headers"]["X-Fake-First-Delay-Ms"] = "300"
    model_id = api.model_for(connector)
    path = f"/_plugins/_ml/models/{model_id}/_predict"
    with ThreadPoolExecutor(max_workers=2) as callers:
        first = callers.submit(api.call, "POST", path, {"text_docs": ["a", "b"]})
        assert bedrock.stats.wait_for(lambda stats: stats.requests_in_flight == 2)
        second = callers.submit(api.call, "POST", path, {"text_docs": ["c", "d"]})
        assert bedrock.stats.wait_for(lambda stats: stats.requests_in_flight == 3)
        server.app.predictor.close()  # as on shutdown: the waiting request is cancelled
        assert first.result().status == 200
        cut = second.result()
    assert cut.status == 503, cut.body
    assert "shutting down" in cut.body["error"]["reason"]


def test_bedrock_one_failed_document_fails_the_call(bedrock: FakeBedrock, api: Client) -> None:
    connector = titan_connector(bedrock)
    connector["actions"][0]["headers"]["X-Fake-Throttle"] = "http"
    model_id = api.model_for(connector)
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"text_docs": ["a", "b", "c", "d"]})
    assert reply.status == 429, reply.body
    assert "inference_results" not in reply.body
    assert bedrock.secret_key not in json.dumps(reply.body)


def test_bedrock_titan_multimodal_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_titan_multimodal_embedding_blueprint.md: "${parameters.x:-null}"
    sends null for what is missing; step size 2 pairs text and image."""
    model_id = api.model_for(bedrock_invoke_connector(
        bedrock, "amazon.titan-embed-image-v1",
        "{\"inputText\": \"${parameters.inputText:-null}\", \"inputImage\": \"${parameters.inputImage:-null}\"}",
        "connector.pre_process.bedrock.multimodal_embedding", "connector.post_process.bedrock.embedding",
        input_docs_processed_step_size=2))
    answer = predict(api, model_id, {"parameters": {"inputText": "Say this is a test"}})
    assert answer["inference_results"][0]["output"] == [embedding("Say this is a test|", 1024)]
    assert bodies(bedrock)[-1] == {"inputText": "Say this is a test", "inputImage": None}
    answer = predict(api, model_id, {"text_docs": ["a red cat", "aW1hZ2U="]})
    assert answer["inference_results"][0]["output"] == [embedding("a red cat|aW1hZ2U=", 1024)]


def test_bedrock_cohere_embedding_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_cohere_cohere.embed-english-v3_blueprint.md: both calls it shows."""
    model_id = api.model_for(bedrock_invoke_connector(
        bedrock, "cohere.embed-english-v3",
        "{ \"texts\": ${parameters.texts}, \"truncate\": \"${parameters.truncate}\", "
        "\"input_type\": \"${parameters.input_type}\" }",
        "connector.pre_process.cohere.embedding", "connector.post_process.cohere.embedding",
        truncate="END", input_type="search_document"))
    answer = predict(api, model_id, {"parameters": {"texts": ["Hello world", "This is a test"]}})
    assert answer["inference_results"][0]["output"] == [embedding("Hello world", 1024), embedding("This is a test", 1024)]
    answer = predict(api, model_id, {"text_docs": ["today is sunny", "today is sunny"], "return_number": True,
                                     "target_response": ["sentence_embedding"]},
                     f"/_plugins/_ml/_predict/text_embedding/{model_id}")
    assert answer["inference_results"][0]["output"] == [embedding("today is sunny", 1024)] * 2


NOVA_BODY = (
    "{\n  \"taskType\": \"SINGLE_EMBEDDING\",\n  \"singleEmbeddingParams\": {\n    \"embeddingPurpose\": "
    "\"GENERIC_INDEX\",\n    \"embeddingDimension\": ${parameters.dimensions},\n    \"text\": {\n      "
    "\"truncationMode\": \"${parameters.truncationMode:-null}\",\n      \"value\": \"${parameters.text:-null}\"\n    "
    "},\n    \"image\": {\n      \"detailLevel\": \"${parameters.detailLevel:-null}\",\n      \"format\": "
    "\"${parameters.imageFormat:-null}\",\n      \"source\": {\n        \"bytes\": \"${parameters.image:-null}\"\n"
    "      }\n    },\n    \"video\": {\n      \"format\": \"${parameters.videoFormat:-null}\",\n      \"source\": "
    "{\n        \"bytes\": \"${parameters.video:-null}\"\n      },\n      \"embeddingMode\": "
    "\"${parameters.embeddingMode:-null}\"\n    },\n    \"audio\": {\n      \"format\": "
    "\"${parameters.audioFormat:-null}\",\n      \"source\": {\n        \"bytes\": \"${parameters.audio:-null}\"\n"
    "      }\n    }\n  }\n}")


def test_bedrock_nova_multimodal_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_nova_multimodal_model_blueprint.md: the empty modality sections
    are dropped before sending (ConnectorUtils.cleanBedrockNovaRequest)."""
    model_id = api.model_for(bedrock_invoke_connector(
        bedrock, "amazon.nova-2-multimodal-embeddings-v1:0", NOVA_BODY,
        "connector.pre_process.bedrock.nova.embedding", "connector.post_process.bedrock.nova.embedding",
        input_docs_processed_step_size=1, dimensions=256, truncationMode="END", imageFormat="png"))
    answer = predict(api, model_id, {"text_docs": ["a photo of a cat", '{"image": "aW1hZ2U="}']},
                     f"/_plugins/_ml/models/{model_id}/_predict?algorithm=text_embedding")
    assert [r["output"] for r in answer["inference_results"]] == [[embedding("a photo of a cat", 256)],
                                                                  [embedding("aW1hZ2U=", 256)]]
    # the two requests ran at once: find each by its content
    text, image = sorted((b["singleEmbeddingParams"] for b in bodies(bedrock)), key=lambda p: "image" in p)
    assert text == {"embeddingPurpose": "GENERIC_INDEX", "embeddingDimension": 256,
                    "text": {"truncationMode": "END", "value": "a photo of a cat"}}
    assert image == {"embeddingPurpose": "GENERIC_INDEX", "embeddingDimension": 256,
                     "image": {"detailLevel": None, "format": "png", "source": {"bytes": "aW1hZ2U="}}}


def test_bedrock_rerank_functions(bedrock: FakeBedrock, api: Client) -> None:
    """connector.pre_process.bedrock.rerank / post_process.bedrock.rerank on the
    bedrock-agent-runtime Rerank API (request fields of BedrockRerankPreProcessFunction)."""
    model_id = api.model_for({
        "name": "Amazon Bedrock Rerank", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": bedrock.region, "service_name": "bedrock", "endpoint": host(bedrock),
                       "model_id": "amazon.rerank-v1:0"},
        "credential": aws_credential(bedrock),
        "actions": [{
            "action_type": "predict", "method": "POST", "url": "http://${parameters.endpoint}/rerank",
            "headers": {"content-type": "application/json"},
            "request_body": "{ \"queries\": ${parameters.queries}, \"rerankingConfiguration\": { "
                            "\"bedrockRerankingConfiguration\": { \"modelConfiguration\": { \"modelArn\": "
                            "\"arn:aws:bedrock:${parameters.region}::foundation-model/${parameters.model_id}\" }, "
                            "\"numberOfResults\": ${parameters.numberOfResults} }, \"type\": "
                            "\"BEDROCK_RERANKING_MODEL\" }, \"sources\": ${parameters.sources} }",
            "pre_process_function": "connector.pre_process.bedrock.rerank",
            "post_process_function": "connector.post_process.bedrock.rerank",
        }],
    })
    answer = predict(api, model_id, {"query_text": RERANK_QUERY, "text_docs": RERANK_DOCS})
    assert answer == {"inference_results": [{"output": [similarity(fake_relevance(RERANK_QUERY, d))
                                                        for d in RERANK_DOCS], "status_code": 200}]}


# ------------------------------------------------------------------------- Comprehend, Textract

def test_amazon_comprehend_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """amazon_comprehend_connector_blueprint.md: the X-Amz-Target header is a parameter made
    of parameters; the whole answer comes back (response_filter "$")."""
    model_id = api.model_for({
        "name": "Amazon Comprehend", "description": "Test connector for Amazon Comprehend", "version": 1,
        "protocol": "aws_sigv4",
        "credential": aws_credential(bedrock),
        "parameters": {"service_name": "comprehend", "region": bedrock.region, "api_version": "20171127",
                       "api_name": "DetectDominantLanguage",
                       "api": "Comprehend_${parameters.api_version}.${parameters.api_name}",
                       "response_filter": "$", "endpoint": host(bedrock)},
        "actions": [{
            "action_type": "predict", "method": "POST", "url": "http://${parameters.endpoint}",
            "headers": {"X-Amz-Target": "${parameters.api}", "content-type": "application/x-amz-json-1.1"},
            "request_body": "{ \"Text\": \"${parameters.Text}\"}",
        }],
    })
    answer = predict(api, model_id, {"parameters": {"Text": "Il fait beau, \"vraiment\" — est-ce la vie?"}})
    assert answer == {"inference_results": [{"output": [{"name": "response", "dataAsMap": {
        "Languages": [{"LanguageCode": "fr", "Score": 0.99}]}}], "status_code": 200}]}
    request = bedrock.stats.requests[-1]
    assert request.headers["x-amz-target"] == "Comprehend_20171127.DetectDominantLanguage"
    assert request.body == {"Text": "Il fait beau, \"vraiment\" — est-ce la vie?"}


def test_amazon_textract_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """amazon_textract_connector_blueprint.md."""
    model_id = api.model_for({
        "name": "Amazon Textract", "description": "Test connector for Amazon Textract", "version": 1,
        "protocol": "aws_sigv4",
        "credential": aws_credential(bedrock),
        "parameters": {"service_name": "textract", "region": bedrock.region, "api_name": "DetectDocumentText",
                       "api": "Textract.${parameters.api_name}", "response_filter": "$", "endpoint": host(bedrock)},
        "actions": [{
            "action_type": "predict", "method": "POST",
            "headers": {"content-type": "application/x-amz-json-1.1", "X-Amz-Target": "${parameters.api}"},
            "url": "http://${parameters.endpoint}",
            "request_body": "{  \"Document\": { \"Bytes\": \"${parameters.bytes}\" }  } ",
        }],
    })
    answer = predict(api, model_id, {"parameters": {"bytes": "iVBORw0KGgo="}})
    data = answer["inference_results"][0]["output"][0]["dataAsMap"]
    assert data["DocumentMetadata"] == {"Pages": 1}
    assert data["Blocks"][1]["Text"] == "fake text of 12 base64 bytes"


# ------------------------------------------------------------------------- chat

def openai_chat_connector(fake: FakeOpenAI, request_body: str, **parameters: Any) -> dict[str, Any]:
    # open_ai_connector_chat_blueprint.md (with supports_structured_output, as published)
    return {
        "name": "OpenAI Chat Connector", "description": "The connector to public OpenAI model service for GPT 3.5",
        "version": 1, "protocol": "http",
        "parameters": {"endpoint": host(fake), "model": "gpt-3.5-turbo", **parameters},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict", "method": "POST",
            "url": "http://${parameters.endpoint}/v1/chat/completions",
            "supports_structured_output": True,
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": request_body,
        }],
    }


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "deepseek-chat", "qwen3:4b"],
                         ids=["open_ai_connector_chat", "deepseek_connector_chat", "ollama_connector_chat"])
def test_openai_compatible_chat_blueprints(fake: FakeOpenAI, api: Client, model: str) -> None:
    """open_ai_connector_chat_blueprint.md, deepseek_connector_chat_blueprint.md and
    ollama_connector_chat_blueprint.md: the same connector shape (supports_structured_output
    included) on OpenAI's wire format, called with ``parameters.messages``."""
    model_id = api.model_for(openai_chat_connector(
        fake, "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }", model=model))
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hello!"}]
    answer = predict(api, model_id, {"parameters": {"messages": messages}})
    data = answer["inference_results"][0]["output"][0]["dataAsMap"]
    assert data["object"] == "chat.completion" and data["choices"][0]["message"]["role"] == "assistant"
    assert bodies(fake)[-1] == {"model": model, "messages": messages}


def test_openai_chat_blueprint_with_structured_output(fake: FakeOpenAI, api: Client) -> None:
    """open_ai_connector_chat_blueprint.md: supports_structured_output is accepted, kept,
    and acted on: a _response_format_json parameter sets the body's response_format."""
    connector_id = api.create_connector(openai_chat_connector(
        fake, "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }"))
    stored = api.ok("GET", f"/_plugins/_ml/connectors/{connector_id}")
    assert stored["actions"][0]["supports_structured_output"] is True
    model_id = api.register(connector_id)
    messages = [{"role": "user", "content": "Hello!"}]
    answer = predict(api, model_id, {"parameters": {"messages": messages}})
    assert answer["inference_results"][0]["output"][0]["dataAsMap"]["object"] == "chat.completion"
    schema = {"type": "json_schema", "json_schema": {"name": "facts", "schema": {"type": "object"}}}
    predict(api, model_id, {"parameters": {"messages": messages, "_response_format_json": json.dumps(schema)}})
    assert bodies(fake)[-1] == {"model": "gpt-3.5-turbo", "messages": messages, "response_format": schema}


def test_azure_openai_chat_blueprint(fake: FakeOpenAI, api: Client) -> None:
    """azure_openai_connector_chat_blueprint.md."""
    model_id = api.model_for({
        "name": "Azure OpenAI chat", "description": "d", "version": "1", "protocol": "http",
        "parameters": {"endpoint": host(fake), "deploy-name": "gpt-4-deployment", "model": "gpt-4",
                       "api-version": "2024-02-01", "temperature": 0.7},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict", "method": "POST",
            "url": "http://${parameters.endpoint}/openai/deployments/${parameters.deploy-name}/chat/completions"
                   "?api-version=${parameters.api-version}",
            "headers": {"api-key": "${credential.openAI_key}"},
            "request_body": "{ \"messages\": ${parameters.messages}, \"temperature\": ${parameters.temperature} }",
        }],
    })
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}]
    answer = predict(api, model_id, {"parameters": {"messages": messages}})
    data = answer["inference_results"][0]["output"][0]["dataAsMap"]
    assert data["choices"][0]["message"]["content"] and data["model"] == "gpt-4-deployment"
    assert bodies(fake)[-1] == {"messages": messages, "temperature": 0.7}


@pytest.mark.parametrize("version", [1, 2])
def test_cohere_chat_blueprints(fake: FakeOpenAI, api: Client, version: int) -> None:
    """cohere_connector_chat_blueprint.md (v1: ``message``) and
    cohere_connector_chat_v2_blueprint.md (v2: ``messages``, supports_structured_output)."""
    body = ("{ \"message\": \"${parameters.message}\", \"model\": \"${parameters.model}\" }" if version == 1 else
            "{ \"model\": \"${parameters.model}\", \"stream\": false, \"messages\": ${parameters.messages} }")
    connector = {
        "name": "Cohere Chat Model", "description": "d", "version": "1", "protocol": "http",
        "credential": {"cohere_key": fake.api_key},
        "parameters": {"model": "command" if version == 1 else "command-r-plus"},
        "actions": [{
            "action_type": "predict", "method": "POST", "url": f"http://{host(fake)}/v{version}/chat",
            "headers": {"Authorization": "Bearer ${credential.cohere_key}", "Request-Source": "unspecified:opensearch"},
            "request_body": body,
        }],
    }
    if version == 2:
        connector["actions"][0]["supports_structured_output"] = True
    model_id = api.model_for(connector)
    parameters: dict[str, Any] = ({"message": 'What is the weather like in "London"?'} if version == 1 else
                                  {"messages": [{"role": "user", "content": "Hello"}]})
    data = predict(api, model_id, {"parameters": parameters})["inference_results"][0]["output"][0]["dataAsMap"]
    text = data["text"] if version == 1 else data["message"]["content"][0]["text"]
    assert text and data["finish_reason"] == "COMPLETE"
    if version == 1:
        assert bodies(fake)[-1]["message"] == 'What is the weather like in "London"?'


def test_llm_judgment_openai_blueprint_prompts_with_quotes(fake: FakeOpenAI, api: Client) -> None:
    """llm_judgment/openai_chat_blueprint.md: prompts full of quotes, backslashes and
    newlines go into a JSON string of the template and reach the provider intact."""
    model_id = api.model_for(openai_chat_connector(
        fake, "{\"model\":\"${parameters.model}\",\"messages\":[{\"role\":\"system\",\"content\":"
              "\"${parameters.system_prompt}\"},{\"role\":\"user\",\"content\":\"${parameters.user_prompt}\"}]}"))
    system = 'You are a relevance judge. Answer with JSON like {"rating": 0.0}.'
    user = 'Query: "red \\ shoes"\nDocument:\t"Crimson sneakers, size 9"'
    answer = predict(api, model_id, {"parameters": {"system_prompt": system, "user_prompt": user}})
    assert answer["inference_results"][0]["status_code"] == 200
    assert bodies(fake)[-1]["messages"] == [{"role": "system", "content": system}, {"role": "user", "content": user}]


def test_bedrock_claude3_invoke_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_anthropic_claude3_blueprint.md: InvokeModel with Anthropic's Messages
    API, the answer cut down by its response_filter."""
    model_id = api.model_for({
        "name": "Amazon Bedrock Connector: Claude 3", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": bedrock.region, "service_name": "bedrock", "anthropic_version": "bedrock-2023-05-31",
                       "max_tokens_to_sample": 8000, "temperature": 0.0001, "response_filter": "$.content[0].text",
                       "model": "anthropic.claude-3-sonnet-20240229-v1:0", "endpoint": host(bedrock)},
        "credential": aws_credential(bedrock),
        "actions": [{
            "action_type": "predict", "method": "POST", "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/invoke",
            "request_body": "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                            "\"${parameters.inputs}\"}]}],\"anthropic_version\":\"${parameters.anthropic_version}\","
                            "\"max_tokens\":${parameters.max_tokens_to_sample}}",
        }],
    })
    answer = predict(api, model_id, {"parameters": {"inputs": "What is the meaning of \"life\"?"}})
    assert answer == {"inference_results": [{"output": [{"name": "response", "dataAsMap": {"response": DEFAULT_TEXT}}],
                                             "status_code": 200}]}
    assert bodies(bedrock)[-1]["messages"][0]["content"][0]["text"] == 'What is the meaning of "life"?'


def test_bedrock_claude_v2_text_completion_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_anthropic_claude_blueprint.md: the legacy prompt API; its template
    writes "\\n\\nHuman:" escapes that must reach the provider as newlines."""
    model_id = api.model_for({
        "name": "Amazon Bedrock Connector: Claude v2", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": bedrock.region, "service_name": "bedrock", "anthropic_version": "bedrock-2023-05-31",
                       "endpoint": host(bedrock), "model": "anthropic.claude-v2"},
        "credential": aws_credential(bedrock),
        "actions": [{
            "action_type": "predict", "method": "POST", "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/invoke",
            "request_body": "{\"prompt\":\"\\n\\nHuman: ${parameters.inputs}\\n\\nAssistant:\",\"max_tokens_to_sample\":"
                            "300,\"temperature\":0.5,\"top_k\":250,\"top_p\":1,\"stop_sequences\":[\"\\\\n\\\\nHuman:\"]}",
        }],
    })
    answer = predict(api, model_id, {"parameters": {"inputs": "Who won the world series in 2020?"}})
    assert answer["inference_results"][0]["output"][0]["dataAsMap"]["completion"] == " " + DEFAULT_TEXT
    sent = bodies(bedrock)[-1]
    assert sent["prompt"] == "\n\nHuman: Who won the world series in 2020?\n\nAssistant:"
    assert sent["stop_sequences"] == ["\\n\\nHuman:"]


def test_bedrock_claude37_inference_profile_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_anthropic_claude3.7_blueprint.md: an inference-profile model id and
    ``parameters.messages`` given whole."""
    model_id = api.model_for({
        "name": "Amazon Bedrock claude v3.7", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": bedrock.region, "service_name": "bedrock", "anthropic_version": "bedrock-2023-05-31",
                       "max_tokens": 8000, "temperature": 1, "endpoint": host(bedrock),
                       "model": "us.anthropic.claude-3-7-sonnet-20250219-v1:0"},
        "credential": aws_credential(bedrock),
        "actions": [{
            "action_type": "predict", "method": "POST", "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/invoke",
            "request_body": "{ \"anthropic_version\": \"${parameters.anthropic_version}\", \"max_tokens\": "
                            "${parameters.max_tokens}, \"temperature\": ${parameters.temperature}, \"messages\": "
                            "${parameters.messages} }",
        }],
    })
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello world"}]}]
    answer = predict(api, model_id, {"parameters": {"messages": messages}})
    assert answer["inference_results"][0]["output"][0]["dataAsMap"]["content"] == [{"type": "text",
                                                                                   "text": DEFAULT_TEXT}]
    assert bodies(bedrock)[-1] == {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8000, "temperature": 1,
                                   "messages": messages}


def test_bedrock_converse_blueprint_with_structured_output(bedrock: FakeBedrock, api: Client) -> None:
    """bedrock_connector_converse_blueprint.md: supports_structured_output, so a
    _toolConfig_json parameter becomes the request's toolConfig."""
    model_id = api.model_for({
        "name": "Amazon Bedrock Converse", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": bedrock.region, "service_name": "bedrock",
                       "response_filter": "$.output.message.content[0].text",
                       "model": "anthropic.claude-sonnet-4-5-20251101-v1:0", "endpoint": host(bedrock)},
        "credential": aws_credential(bedrock),
        "actions": [{
            "action_type": "predict", "method": "POST", "supports_structured_output": True,
            "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/converse",
            "request_body": "{\"system\":[{\"text\":\"${parameters.system_prompt}\"}],\"messages\":[{\"role\":"
                            "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"${parameters.user_prompt}\"}]}]}",
        }],
    })
    tool_config = {"tools": [{"toolSpec": {"name": "extract_facts", "inputSchema": {"json": {"type": "object"}}}}],
                   "toolChoice": {"tool": {"name": "extract_facts"}}}
    answer = predict(api, model_id, {"parameters": {"system_prompt": 'Extract "facts".', "user_prompt": "I like tea.",
                                                    "_toolConfig_json": json.dumps(tool_config)}})
    assert answer["inference_results"][0]["output"][0]["dataAsMap"] == {"response": DEFAULT_TEXT}
    sent = bodies(bedrock)[-1]
    assert sent["toolConfig"] == tool_config and sent["system"] == [{"text": 'Extract "facts".'}]


def test_dry_run_checks_the_connector_and_stores_nothing(fake: FakeOpenAI, api: Client) -> None:
    """MLCreateConnectorInput.java dry_run: the answer's id is "dryRunConnector"."""
    assert api.ok("POST", "/_plugins/_ml/connectors/_create",
                  {**openai_embedding_connector(fake), "dry_run": True}) == {"connector_id": "dryRunConnector"}
    bad = openai_embedding_connector(fake, post_process_function="return params +;")
    assert api.call("POST", "/_plugins/_ml/connectors/_create", {**bad, "dry_run": True}).status == 400
    hits = api.ok("POST", "/_plugins/_ml/connectors/_search", {"query": {"match_all": {}}})["hits"]
    assert hits["total"]["value"] == 0


# ------------------------------------------------------------------------- batch inference

@pytest.fixture
def openai_batches() -> Iterator[FakeOpenAIBatches]:
    with FakeOpenAIBatches() as fake:
        yield fake


@pytest.fixture
def transform_jobs() -> Iterator[FakeSageMakerBatch]:
    with FakeSageMakerBatch() as fake:
        yield fake


def test_openai_batch_inference_blueprint(openai_batches: FakeOpenAIBatches, api: Client) -> None:
    """batch_inference_openAI_connector_blueprint.md: steps 1a to 3, then the task polled
    as the Batch Predict API page of OpenSearch's docs does it."""
    group_id = api.ok("POST", "/_plugins/_ml/model_groups/_register",
                      {"name": "openAI_model_group", "description": "Your openAI model group"})["model_group_id"]
    connector_id = api.create_connector({
        "name": "OpenAI Embedding model", "description": "OpenAI embedding model for testing offline batch",
        "version": "1", "protocol": "http",
        "parameters": {"model": "text-embedding-ada-002", "input_file_id": "file-YbowBByiyVJN89oSZo2Enu9W",
                       "endpoint": "/v1/embeddings"},
        "credential": {"openAI_key": openai_batches.api_key},
        "actions": [
            {"action_type": "predict", "method": "POST", "url": f"http://{host(openai_batches)}/v1/embeddings",
             "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
             "request_body": "{ \"input\": ${parameters.input}, \"model\": \"${parameters.model}\" }",
             "pre_process_function": "connector.pre_process.openai.embedding",
             "post_process_function": "connector.post_process.openai.embedding"},
            {"action_type": "batch_predict", "method": "POST", "url": f"http://{host(openai_batches)}/v1/batches",
             "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
             "request_body": "{ \"input_file_id\": \"${parameters.input_file_id}\", \"endpoint\": "
                             "\"${parameters.endpoint}\", \"completion_window\": \"24h\" }"}],
    })
    model_id = api.ok("POST", "/_plugins/_ml/models/_register?deploy=true", {
        "name": "OpenAI model for realtime embedding and offline batch inference", "function_name": "remote",
        "model_group_id": group_id, "description": "OpenAI text embedding model", "connector_id": connector_id,
    })["model_id"]
    started = api.ok("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict",
                     {"parameters": {"model": "text-embedding-ada-002"}})
    job = started["remote_job"]
    assert started["status"] == "CREATED" and set(started) == {"task_id", "status", "remote_job"}
    assert job["object"] == "batch" and job["status"] == "validating" and job["dlq"] is None
    assert job["input_file_id"] == "file-YbowBByiyVJN89oSZo2Enu9W" and job["endpoint"] == "/v1/embeddings"
    assert openai_batches.stats.requests[-1].body == {
        "input_file_id": "file-YbowBByiyVJN89oSZo2Enu9W", "endpoint": "/v1/embeddings", "completion_window": "24h"}

    task = api.ok("GET", f"/_plugins/_ml/tasks/{started['task_id']}")
    assert {k: task[k] for k in ("model_id", "task_type", "function_name", "state", "input_type", "is_async")} == {
        "model_id": model_id, "task_type": "BATCH_PREDICTION", "function_name": "REMOTE", "state": "RUNNING",
        "input_type": "REMOTE", "is_async": False}
    # No batch_predict_status action: ml-commons' own, GET <batch_predict url>/<id>.
    assert openai_batches.stats.requests[-1].method == "GET"
    assert openai_batches.stats.requests[-1].path == f"/v1/batches/{job['id']}"
    openai_batches.set_status(job["id"], "in_progress")
    assert api.ok("GET", f"/_plugins/_ml/tasks/{started['task_id']}")["state"] == "RUNNING"
    openai_batches.set_status(job["id"], "completed")
    done = api.ok("GET", f"/_plugins/_ml/tasks/{started['task_id']}")
    assert done["state"] == "COMPLETED" and done["remote_job"]["status"] == "completed"
    assert done["remote_job"]["output_file_id"].startswith("file-") and done["last_update_time"] >= task["create_time"]
    assert openai_batches.api_key not in json.dumps(done)


def test_sagemaker_batch_inference_blueprint(transform_jobs: FakeSageMakerBatch, api: Client) -> None:
    """batch_inference_sagemaker_connector_blueprint.md: steps 1b to 3 (the URL names the
    operation, as the blueprint writes it); the job's status from DescribeTransformJob."""
    connector_id = api.create_connector({
        "name": "DJL Sagemaker Connector: all-MiniLM-L6-v2", "version": "1",
        "description": "The connector to sagemaker embedding model all-MiniLM-L6-v2", "protocol": "aws_sigv4",
        "credential": {"access_key": transform_jobs.access_key, "secret_key": transform_jobs.secret_key},
        "parameters": {
            "region": "us-east-1", "service_name": "sagemaker",
            "DataProcessing": {"InputFilter": "$.content", "JoinSource": "Input", "OutputFilter": "$"},
            "ModelName": "DJL-Text-Embedding-Model-imageforjsonlines",
            "TransformInput": {"ContentType": "application/json",
                               "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                                               "S3Uri": "s3://offlinebatch/sagemaker_djl_batch_input.json"}},
                               "SplitType": "Line"},
            "TransformJobName": "SM-offline-batch-transform-07-12-13-30",
            "TransformOutput": {"AssembleWith": "Line", "Accept": "application/json",
                                "S3OutputPath": "s3://offlinebatch/output"},
            "TransformResources": {"InstanceCount": 1, "InstanceType": "ml.c5.xlarge"},
            "BatchStrategy": "SingleRecord"},
        "actions": [
            {"action_type": "predict", "method": "POST", "headers": {"content-type": "application/json"},
             "url": f"http://{host(transform_jobs)}/endpoints/OpenSearch-sagemaker-060124023703/invocations",
             "request_body": "${parameters.input}", "pre_process_function": "connector.pre_process.default.embedding",
             "post_process_function": "connector.post_process.default.embedding"},
            {"action_type": "batch_predict", "method": "POST", "headers": {"content-type": "application/json"},
             "url": f"http://{host(transform_jobs)}/CreateTransformJob",
             "request_body": "{ \"BatchStrategy\": \"${parameters.BatchStrategy}\", \"ModelName\": "
                             "\"${parameters.ModelName}\", \"DataProcessing\" : ${parameters.DataProcessing}, "
                             "\"TransformInput\": ${parameters.TransformInput}, \"TransformJobName\" : "
                             "\"${parameters.TransformJobName}\", \"TransformOutput\" : ${parameters.TransformOutput}, "
                             "\"TransformResources\" : ${parameters.TransformResources}}"}],
    })
    model_id = api.register(connector_id, name="SageMaker model for realtime embedding and offline batch inference",
                            description="SageMaker hosted DJL model")
    started = api.ok("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict",
                     {"parameters": {"TransformJobName": "SM-offline-batch-transform-07-15-11-30"}})
    arn = "arn:aws:sagemaker:us-east-1:123456789012:transform-job/sm-offline-batch-transform-07-15-11-30"
    assert started["remote_job"] == {"TransformJobArn": arn, "dlq": None}
    sent = transform_jobs.stats.requests[-1].body
    assert sent["TransformJobName"] == "SM-offline-batch-transform-07-15-11-30"
    assert sent["DataProcessing"] == {"InputFilter": "$.content", "JoinSource": "Input", "OutputFilter": "$"}
    assert sent["TransformResources"] == {"InstanceCount": 1, "InstanceType": "ml.c5.xlarge"}

    task = api.ok("GET", f"/_plugins/_ml/tasks/{started['task_id']}")
    assert task["state"] == "RUNNING" and task["remote_job"]["TransformJobStatus"] == "InProgress"
    # ml-commons' own status action: DescribeTransformJob, the job's name from its ARN.
    described = transform_jobs.stats.requests[-1]
    assert described.path == "/DescribeTransformJob"
    assert described.body == {"TransformJobName": "sm-offline-batch-transform-07-15-11-30"}
    transform_jobs.set_status("SM-offline-batch-transform-07-15-11-30", "Completed")
    done = api.ok("GET", f"/_plugins/_ml/tasks/{started['task_id']}")
    assert done["state"] == "COMPLETED" and done["remote_job"]["TransformJobArn"] == arn
    assert done["remote_job"]["TransformOutput"]["S3OutputPath"] == "s3://offlinebatch/output"
    assert transform_jobs.secret_key not in json.dumps(done)
