"""Connectors that carry Painless process functions, end to end over real sockets.

Each test writes its connector the way the ml-commons document it names does (the same
fields, templates and kind of script: our own scripts, written in the style of the
published ones), against a loopback fake, predicts as the document does and checks the
numbers: vectors and scores are the fakes' deterministic ones. Paths are under ``docs/``
of opensearch-project/ml-commons.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from mlstream.testing.embeddings import (
    SAGEMAKER_DIMENSIONS,
    fake_relevance,
    fake_vector,
)
from mlstream.testing.fake_bedrock import DEFAULT_TEXT, FakeBedrock
from mlstream.testing.fake_openai import FakeOpenAI
from mlstream.testing.fake_sagemaker import FakeSageMaker
from mlstream.testing.painless_scripts import (
    BGE_POST,
    BGE_PRE,
    CONVERSE_JUDGMENT_POST,
    CROSS_ENCODER_POST,
    CROSS_ENCODER_PRE,
    DEEPSEEK_POST,
    JUDGMENT_POST,
    MULTIMODAL_PRE,
    RERANK_POST,
    RERANK_PRE,
    SAGEMAKER_EMBEDDING_POST,
    TITAN_EMBEDDING_POST,
    TITAN_EMBEDDING_PRE,
)

from ..support.clients import Client
from ..support.connectors import bedrock_connector, openai_connector
from ..support.wire import raw_request

ML = "/_plugins/_ml"


@pytest.fixture
def api(server: Any) -> Client:
    return Client(server.url)


@pytest.fixture
def encoder() -> Iterator[FakeSageMaker]:
    with FakeSageMaker(container="encoder") as fake:
        yield fake


@pytest.fixture
def tgi() -> Iterator[FakeSageMaker]:
    with FakeSageMaker(container="tgi") as fake:
        yield fake


def aws_connector(fake: Any, service: str, url: str, body: str, pre: str | None, post: str | None,
                  **parameters: Any) -> dict[str, Any]:
    action: dict[str, Any] = {"action_type": "predict", "method": "POST", "url": url,
                              "headers": {"content-type": "application/json"}, "request_body": body}
    if pre is not None:
        action["pre_process_function"] = pre
    if post is not None:
        action["post_process_function"] = post
    return {
        "name": f"{service} with scripts", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": fake.region, "service_name": service,
                       "endpoint": fake.url.removeprefix("http://"), **parameters},
        "credential": {"access_key": fake.access_key, "secret_key": fake.secret_key},
        "actions": [action],
    }


def vector(text: str, dims: int) -> dict[str, Any]:
    return {"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [dims], "data": list(fake_vector(text, dims))}


def similarity(score: float) -> dict[str, Any]:
    return {"name": "similarity", "data_type": "FLOAT32", "shape": [1], "data": [score]}


def outputs(answer: dict[str, Any]) -> list[Any]:
    return [result["output"] for result in answer["inference_results"]]


# ------------------------------------------------------------------ embeddings

def test_bedrock_titan_embedding_with_scripts(bedrock: FakeBedrock, api: Client) -> None:
    """remote_inference_blueprints/bedrock_connector_titan_embedding_blueprint.md (the
    Painless variant; also tutorials/aws/semantic_search_with_bedrock_titan_embedding_model.md):
    one request per document, each document quoted into JSON by the script, the vector
    printed into JSON by the script and read back exactly."""
    model_id = api.model_for(aws_connector(
        bedrock, "bedrock", "http://${parameters.endpoint}/model/amazon.titan-embed-text-v1/invoke",
        "{ \"inputText\": \"${parameters.inputText}\" }", TITAN_EMBEDDING_PRE, TITAN_EMBEDDING_POST))
    docs = ['He said "hello"', "a back\\slash", "line one\nline two"]
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"text_docs": docs})
    assert outputs(answer) == [[vector(doc, 1536)] for doc in docs]
    assert sorted(request.body["inputText"] for request in bedrock.stats.requests) == sorted(docs)


def test_bedrock_titan_multimodal_with_scripts(bedrock: FakeBedrock, api: Client) -> None:
    """remote_inference_blueprints/bedrock_connector_titan_multimodal_embedding_blueprint.md:
    step size 2 gives the script text and image together; a missing one is null."""
    model_id = api.model_for(aws_connector(
        bedrock, "bedrock", "http://${parameters.endpoint}/model/amazon.titan-embed-image-v1/invoke",
        "{\"inputText\": \"${parameters.inputText:-null}\", \"inputImage\": \"${parameters.inputImage:-null}\"}",
        MULTIMODAL_PRE, TITAN_EMBEDDING_POST.replace("return params.message;", "return null;"),
        input_docs_processed_step_size=2))
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"text_docs": ["a red cat", "aW1hZ2U="]})
    assert outputs(answer) == [[vector("a red cat|aW1hZ2U=", 1024)]]
    assert bedrock.stats.requests[-1].body == {"inputText": "a red cat", "inputImage": "aW1hZ2U="}


def test_sagemaker_embedding_with_scripts(encoder: FakeSageMaker, api: Client) -> None:
    """tutorials/aws/semantic_search_with_CFN_template_for_Sagemaker.md: a SageMaker
    embedding endpoint whose answer (an array, so ``params.result``) a script turns into
    the sentence_embedding tensor; the script quotes each document into ``inputs``."""
    model_id = api.model_for(aws_connector(
        encoder, "sagemaker", "http://${parameters.endpoint}/endpoints/embedding-endpoint/invocations",
        "{ \"inputs\": \"${parameters.inputs}\" }",
        TITAN_EMBEDDING_PRE.replace("inputText", "inputs"), SAGEMAKER_EMBEDDING_POST))
    docs = ["What is the meaning of life?", 'Quotes: "42"']
    answer = api.ok("POST", f"{ML}/_predict/text_embedding/{model_id}", {"text_docs": docs})
    assert outputs(answer) == [[vector(doc, SAGEMAKER_DIMENSIONS)] for doc in docs]


# ------------------------------------------------------------------ rerank

RERANK_QUERY = "What is the capital city of America?"
RERANK_DOCS = ["Carson City is the capital city of the American state of Nevada.",
               'The "capital" of the United States is Washington, D.C.',
               "Capital punishment has existed in the United States."]

@pytest.mark.parametrize("model", ["amazon.rerank-v1:0", "cohere.rerank-v3-5:0"])
def test_bedrock_rerank_tutorials(bedrock: FakeBedrock, api: Client, model: str) -> None:
    """tutorials/rerank/rerank_pipeline_with_Amazon_Rerank_model_on_Amazon_Bedrock.md and
    rerank_pipeline_with_Cohere_Rerank_model_on_Amazon_Bedrock.md: the answer comes best
    first; the script puts each score back at its document's index."""
    model_id = api.model_for(aws_connector(
        bedrock, "bedrock", "http://${parameters.endpoint}/model/${parameters.model_name}/invoke",
        "{ \"documents\": ${parameters.documents}, \"query\": \"${parameters.query}\" }",
        RERANK_PRE, RERANK_POST, model_name=model))
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"query_text": RERANK_QUERY, "text_docs": RERANK_DOCS})
    assert outputs(answer) == [[similarity(fake_relevance(RERANK_QUERY, doc)) for doc in RERANK_DOCS]]
    assert bedrock.stats.requests[-1].body == {"documents": RERANK_DOCS, "query": RERANK_QUERY}


def test_sagemaker_cross_encoder_tutorial(encoder: FakeSageMaker, api: Client) -> None:
    """tutorials/rerank/rerank_pipeline_with_CrossEncoder_model_deployed_on_Sagemaker.md:
    the script declares its own ``escape`` and pairs the query with each document."""
    model_id = api.model_for(aws_connector(
        encoder, "sagemaker", "http://${parameters.endpoint}/endpoints/cross-encoder/invocations",
        "{ \"inputs\": ${parameters.inputs} }", CROSS_ENCODER_PRE, CROSS_ENCODER_POST))
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"query_text": RERANK_QUERY, "text_docs": RERANK_DOCS})
    assert outputs(answer) == [[similarity(fake_relevance(RERANK_QUERY, doc)) for doc in RERANK_DOCS]]
    # ml-commons hands the script documents already JSON-escaped (ConnectorUtils.escapeMLInput);
    # this escape escapes them again, so the provider sees the quotes with their backslash.
    assert encoder.stats.requests[-1].body == {
        "inputs": [{"text": RERANK_QUERY, "text_pair": doc.replace('"', '\\"')} for doc in RERANK_DOCS]}


def test_sagemaker_bge_rerank_tutorial(encoder: FakeSageMaker, api: Client) -> None:
    """tutorials/rerank/rerank_pipeline_with_bge-rerank-m3-v2_model_deployed_on_Sagemaker.md:
    ``{"query", "texts"}`` in, ``[{"index", "score"}]`` best first out."""
    model_id = api.model_for(aws_connector(
        encoder, "sagemaker", "http://${parameters.endpoint}/endpoints/bge-reranker/invocations",
        "{ \"query\": \"${parameters.query}\", \"texts\": ${parameters.texts} }", BGE_PRE, BGE_POST))
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"query_text": RERANK_QUERY, "text_docs": RERANK_DOCS})
    assert outputs(answer) == [[similarity(fake_relevance(RERANK_QUERY, doc)) for doc in RERANK_DOCS]]


# ------------------------------------------------------------------ LLM answers

JUDGMENT_TEXT = 'Rating: "3"\nThe document answers the query \\ partly.\r'
def test_llm_judgment_openai_compatible_blueprint(fake: FakeOpenAI, api: Client) -> None:
    """remote_inference_blueprints/llm_judgment/deepseek_chat_blueprint.md (and the Azure
    OpenAI and Ollama ones): ml-commons' ``escape`` helper, undeclared, keeps the judge's
    quotes, backslash and line breaks inside the JSON the script builds."""
    model_id = api.model_for({
        "name": "DeepSeek Chat", "description": "judge", "version": "1", "protocol": "http",
        "parameters": {"endpoint": fake.url.removeprefix("http://"), "model": "deepseek-chat"},
        "credential": {"deepSeek_key": fake.api_key},
        "actions": [{
            "action_type": "predict", "method": "POST", "url": "http://${parameters.endpoint}/v1/chat/completions",
            "headers": {"Content-Type": "application/json", "Authorization": "Bearer ${credential.deepSeek_key}",
                        "X-Fake-Text": quote(JUDGMENT_TEXT)},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
            "post_process_function": JUDGMENT_POST,
        }],
    })
    messages = [{"role": "user", "content": "Rate the document for the query."}]
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": messages}})
    assert outputs(answer) == [[{"name": "response", "dataAsMap": {"response": JUDGMENT_TEXT}}]]


def test_llm_judgment_bedrock_converse_blueprint(bedrock: FakeBedrock, api: Client) -> None:
    """remote_inference_blueprints/llm_judgment/bedrock_converse_blueprint.md."""
    connector = bedrock_connector(bedrock)
    connector["actions"][0]["post_process_function"] = CONVERSE_JUDGMENT_POST
    model_id = api.model_for(connector)
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"inputs": "Rate it."}})
    assert outputs(answer) == [[{"name": "response", "dataAsMap": {"response": DEFAULT_TEXT}}]]


def test_deepseek_rag_on_sagemaker_tutorial(tgi: FakeSageMaker, api: Client) -> None:
    """tutorials/aws/RAG_with_DeepSeek_R1_model_on_Sagemaker.md: a TGI endpoint's array
    answer is ``params.result``; the completion comes back under ``dataAsMap``."""
    model_id = api.model_for(aws_connector(
        tgi, "sagemaker", "http://${parameters.endpoint}/endpoints/deepseek-r1/invocations",
        "{ \"inputs\": \"${parameters.inputs}\", \"parameters\": {\"max_new_tokens\": 256} }", None, DEEPSEEK_POST))
    answer = api.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"inputs": "Who is Hamlet?"}})
    assert outputs(answer) == [[{"name": "response", "dataAsMap": {"completion": DEFAULT_TEXT}}]]


# ------------------------------------------------------------------ a script over plain parameters
# ml-algorithms/.../remote/ConnectorUtils.java processMLInput and
# connector/functions/preprocess/RemoteInferencePreProcessFunction.java (ml-commons'
# docs/ publish no connector using it: this one is written like the chat blueprints).

REMOTE_INPUT = "pre_process_function.process_remote_inference_input"
# A question turned into chat messages; params.question arrives escaped, so it is quoted as it is.
QUESTION_TO_MESSAGES = """
    def content = 'Answer briefly: ' + params.question;
    return '{"parameters": {"messages": [{"role": "user", "content": "' + content + '"}]}}';
"""
QUESTION = 'Is "x" \\ y?\n'


def chat_model(api: Client, fake: FakeOpenAI, pre_process: str, **parameters: Any) -> str:
    connector = openai_connector(fake)
    connector["parameters"].update(parameters)
    connector["actions"][0]["pre_process_function"] = pre_process
    return api.model_for(connector)


def sent_messages(fake: FakeOpenAI) -> Any:
    return fake.stats.requests[-1].body["messages"]


def test_a_script_pre_processes_parameters_when_the_connector_asks(fake: FakeOpenAI, api: Client) -> None:
    """The script's parameters are added to the request's, which win where both name one."""
    model_id = chat_model(api, fake, QUESTION_TO_MESSAGES, **{REMOTE_INPUT: "true"})
    api.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"question": QUESTION}})
    assert sent_messages(fake) == [{"role": "user", "content": "Answer briefly: " + QUESTION}]
    own = [{"role": "user", "content": "mine"}]
    api.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"question": QUESTION, "messages": own}})
    assert sent_messages(fake) == own
    streamed = raw_request(api.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps({"parameters": {"question": QUESTION,
                                                      "_llm_interface": "openai/v1/chat/completions"}}).encode())
    assert streamed.status == 200 and streamed.events()
    assert sent_messages(fake) == [{"role": "user", "content": "Answer briefly: " + QUESTION}]


def test_without_the_flag_parameters_pass_by_the_script(fake: FakeOpenAI, api: Client) -> None:
    """Unset (or false), the script is not run on parameters; the request may set the flag
    itself, and a script that then fails is a 400 that reaches no provider."""
    failing = "throw new IllegalArgumentException('no question: ' + params.question);"
    model_id = chat_model(api, fake, failing, **{REMOTE_INPUT: "false"})
    own = [{"role": "user", "content": "mine"}]
    api.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": own}})
    assert sent_messages(fake) == own and len(fake.stats.requests) == 1
    reply = api.call("POST", f"{ML}/models/{model_id}/_predict",
                     {"parameters": {"messages": own, "question": "q", REMOTE_INPUT: "True"}})
    assert reply.status == 400 and reply.body["error"]["type"] == "script_exception"
    assert reply.body["error"]["reason"] == "Painless runtime error at line 1: IllegalArgumentException: no question: q"
    assert len(fake.stats.requests) == 1


# ------------------------------------------------------------------ errors

def connector_count(api: Client) -> int:
    return api.ok("POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}})["hits"]["total"]["value"]


def test_a_script_that_does_not_compile_is_refused_at_creation(bedrock: FakeBedrock, api: Client) -> None:
    connector = aws_connector(bedrock, "bedrock", "http://${parameters.endpoint}/model/m/invoke", "{}",
                              "def docs = params.text_docs;\nreturn '{\"parameters\": ' + docs +;", None)
    reply = api.call("POST", f"{ML}/connectors/_create", connector)
    assert reply.status == 400 and reply.body["error"]["type"] == "script_exception"
    assert reply.body["error"]["reason"] == ("[actions[0].pre_process_function] Painless syntax error at line 2, "
                                             "column 34: expected a value, found ';'")
    assert connector_count(api) == 0
    connector["actions"][0]["pre_process_function"] = "return new java.io.File('x')"
    reply = api.call("POST", f"{ML}/connectors/_create", connector)
    assert reply.status == 400 and "not available to scripts" in reply.body["error"]["reason"]


def test_an_update_with_a_broken_script_changes_nothing(bedrock: FakeBedrock, api: Client) -> None:
    connector = aws_connector(bedrock, "bedrock", "http://${parameters.endpoint}/model/amazon.titan-embed-text-v1/invoke",
                              "{ \"inputText\": \"${parameters.inputText}\" }", TITAN_EMBEDDING_PRE, TITAN_EMBEDDING_POST)
    connector_id = api.create_connector(connector)
    broken = [{**connector["actions"][0], "post_process_function": "return params.embedding.each { x -> x }"}]
    reply = api.call("PUT", f"{ML}/connectors/{connector_id}", {"actions": broken})
    assert reply.status == 400 and "Painless" in reply.body["error"]["reason"]
    stored = api.ok("GET", f"{ML}/connectors/{connector_id}")
    assert stored["actions"][0]["post_process_function"] == TITAN_EMBEDDING_POST


def test_script_failures_at_predict_are_400s_and_the_server_goes_on(bedrock: FakeBedrock, api: Client) -> None:
    url = "http://${parameters.endpoint}/model/amazon.titan-embed-text-v1/invoke"
    body = "{ \"inputText\": \"${parameters.inputText}\" }"
    thrower = api.model_for(aws_connector(bedrock, "bedrock", url, body, TITAN_EMBEDDING_PRE,
                                          "throw new IllegalArgumentException('no vector for ' + params.inputTextTokenCount)"))
    reply = api.call("POST", f"{ML}/models/{thrower}/_predict", {"text_docs": ["a b c"]})
    assert reply.status == 400 and reply.body["error"]["type"] == "script_exception"
    assert reply.body["error"]["reason"] == "Painless runtime error at line 1: IllegalArgumentException: no vector for 3"
    looper = api.model_for(aws_connector(bedrock, "bedrock", url, body, "while (true) {}", TITAN_EMBEDDING_POST))
    reply = api.call("POST", f"{ML}/models/{looper}/_predict", {"text_docs": ["x"]})
    assert reply.status == 400 and "more than 5000000 steps (max_steps)" in reply.body["error"]["reason"]
    good = api.model_for(aws_connector(bedrock, "bedrock", url, body, TITAN_EMBEDDING_PRE, TITAN_EMBEDDING_POST))
    assert outputs(api.ok("POST", f"{ML}/models/{good}/_predict", {"text_docs": ["ok"]})) == [[vector("ok", 1536)]]
    assert json.dumps(reply.body).find(bedrock.secret_key) == -1
