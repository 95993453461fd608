"""Guardrails over real sockets: ml-commons' RestMLGuardrailsIT against the fake OpenAI,
then the same guardrails on ``_predict/stream`` and the OpenAI front."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ..support.clients import Client, Reply, bearer, client_with
from ..support.connectors import openai_connector
from ..support.servers import create_key
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.wire import raw_request

INPUT_REFUSED = "guardrails triggered for user input"
OUTPUT_REFUSED = "guardrails triggered for LLM output"
# RestMLGuardrailsIT: createStopWordsIndex, TestData.STOP_WORDS_DATA
STOP_WORDS_MAPPING = {"properties": {"title": {"type": "text"}, "query": {"type": "percolator"}}}
STOP_WORDS_DATA = (
    '{ "index" : { "_index" : "stop_words" } }\n'
    '{"query": {"query_string": {"query": "title: \\"stop word\\""}}}\n'
    '{ "index" : { "_index" : "stop_words" } }\n'
    '{"query": {"query_string": {"query": "title: \\"stop-word\\""}}}\n'
    '{ "index" : { "_index" : "stop_words" } }\n'
    '{"query": {"query_string": {"query": "title: \\"stop & word\\""}}}\n')
LOCAL_REGEX = {"stop_words": [{"index_name": "stop_words", "source_fields": ["title"]}], "regex": ["regex1", "regex2"]}
ACCEPT = '^"\\s*[Aa]ccept\\s*"$'  # the IT's response_validation_regex


def completion_connector(fake: Any, **parameters: Any) -> dict[str, Any]:
    """The IT's completionModelConnectorEntity, pointed at the fake."""
    connector = openai_connector(fake, path="/v1/completions")
    connector["parameters"].update({"max_tokens": 7, "temperature": 0, "model": "gpt-fake", **parameters})
    connector["actions"][0]["request_body"] = (
        '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}",  '
        '"max_tokens": ${parameters.max_tokens},  "temperature": ${parameters.temperature} }')
    return connector


def guardrail_model(client: Client, fake: Any, verdict: str) -> str:
    """The IT's guardrail model (completionModelConnectorEntityWithGuardrail): it answers ``verdict``."""
    connector = completion_connector(
        fake, model=f"gpt-fake?text={verdict}", response_filter="$.choices[0].text",
        prompt="You are a helpful assistant and an expert judge of content quality. Answer reject or accept. "
               "\\n\\nHere is the input: ${parameters.question}. \\n\\nYour answer: ")
    return client.model_for(connector)


def stop_words_index(client: Client) -> None:
    assert client.ok("PUT", "/stop_words", {"settings": {}, "mappings": STOP_WORDS_MAPPING}) == {
        "acknowledged": True, "shards_acknowledged": True, "index": "stop_words"}
    bulk = ndjson(client, "/_bulk?refresh=true", STOP_WORDS_DATA)
    assert bulk.status == 200 and bulk.body["errors"] is False
    assert [item["index"]["status"] for item in bulk.body["items"]] == [201, 201, 201]
    assert client.call("GET", "/stop_words").status == 200


def ndjson(client: Client, path: str, text: str) -> Reply:
    response = client.http.request("POST", client.base_url + path, body=text.encode(),
                                   headers={"Content-Type": "application/x-ndjson"})
    return Reply(response.status, json.loads(response.data), response.headers)


def predict(client: Client, model_id: str, parameters: dict[str, Any]) -> Any:
    return client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": parameters})


def refused(reply: Any, reason: str) -> None:
    assert reply.status == 400, reply.body
    assert reply.body["error"]["type"] == "illegal_argument_exception"
    assert reply.body["error"]["reason"] == reason


@pytest.fixture
def client(server) -> Client:
    client = Client(server.url)
    stop_words_index(client)
    return client


# --- RestMLGuardrailsIT -------------------------------------------------------------------------


def test_predict_remote_model_success(client, fake):
    model_id = client.register(client.create_connector(completion_connector(fake)),
                               guardrails={"type": "local_regex", "input_guardrail": LOCAL_REGEX,
                                           "output_guardrail": LOCAL_REGEX})
    reply = predict(client, model_id, {"prompt": "Say this is a test"})
    assert reply.status == 200, reply.body
    choices = reply.body["inference_results"][0]["output"][0]["dataAsMap"]["choices"]
    assert choices[0]["text"]
    # the model document keeps them as ml-commons writes them
    assert client.ok("GET", f"/_plugins/_ml/models/{model_id}")["guardrails"] == {
        "type": "local_regex", "input_guardrail": LOCAL_REGEX, "output_guardrail": LOCAL_REGEX}


@pytest.mark.parametrize("guardrails", [
    {"type": "local_regex", "input_guardrail": LOCAL_REGEX, "output_guardrail": LOCAL_REGEX},
    {"input_guardrail": LOCAL_REGEX, "output_guardrail": LOCAL_REGEX},  # testPredictRemoteModelFailedNonType
], ids=["local_regex", "no-type"])
def test_predict_remote_model_failed(client, fake, guardrails):
    model_id = client.register(client.create_connector(completion_connector(fake)), guardrails=guardrails)
    sent = len(fake.stats.requests)
    refused(predict(client, model_id, {"prompt": "Say this is a test of stop word."}), INPUT_REFUSED)
    assert len(fake.stats.requests) == sent  # refused before the provider was called
    assert client.ok("GET", f"/_plugins/_ml/models/{model_id}")["guardrails"]["type"] == "local_regex"


@pytest.mark.parametrize("verdict, passes", [("accept", True), ("reject", False)])
def test_predict_remote_model_with_model_guardrail(client, fake, verdict, passes):
    guard_id = guardrail_model(client, fake, verdict)
    # the guardrail model's own answer, as the IT checks it first
    answer = predict(client, guard_id, {"question": "hello"}).body
    assert answer["inference_results"][0]["output"][0]["dataAsMap"] == {"response": verdict}
    model = {"model_id": guard_id, "response_validation_regex": ACCEPT}
    model_id = client.register(client.create_connector(completion_connector(fake)),
                               guardrails={"type": "model", "input_guardrail": model, "output_guardrail": model})
    reply = predict(client, model_id, {"prompt": "${parameters.question}", "question": "hello"})
    if passes:
        assert reply.status == 200, reply.body
        assert reply.body["inference_results"][0]["output"][0]["dataAsMap"]["choices"][0]["text"]
        asked = [r.body["prompt"] for r in fake.stats.requests if "judge" in str(r.body.get("prompt"))]
        assert any("Here is the input: hello." in prompt for prompt in asked)
    else:
        refused(reply, INPUT_REFUSED)


def test_model_guardrail_without_question_passes(client, fake):
    """ModelGuardrail.validate: no ``question`` parameter, nothing to ask (ml-commons)."""
    guard_id = guardrail_model(client, fake, "reject")
    model_id = client.register(client.create_connector(completion_connector(fake)), guardrails={
        "type": "model", "input_guardrail": {"model_id": guard_id, "response_validation_regex": ACCEPT}})
    assert predict(client, model_id, {"prompt": "hello"}).status == 200


def test_output_guardrail_refuses_the_answer(client, fake):
    output = {"stop_words": [{"index_name": "stop_words", "source_fields": ["title"]}]}
    connector = completion_connector(fake, model="gpt-fake?text=here+is+a+stop+word+for+you")
    model_id = client.register(client.create_connector(connector), guardrails={"output_guardrail": output})
    refused(predict(client, model_id, {"prompt": "Say this is a test"}), OUTPUT_REFUSED)
    assert fake.stats.requests  # the provider answered; its answer was refused


def test_fail_closed_when_the_stop_word_index_is_gone(client, fake):
    model_id = client.register(client.create_connector(completion_connector(fake)),
                               guardrails={"input_guardrail": LOCAL_REGEX})
    assert predict(client, model_id, {"prompt": "Say this is a test"}).status == 200
    assert client.ok("DELETE", "/stop_words") == {"acknowledged": True}
    refused(predict(client, model_id, {"prompt": "Say this is a test"}), INPUT_REFUSED)


def test_fail_closed_when_the_guardrail_model_is_missing(client, fake):
    model_id = client.register(client.create_connector(completion_connector(fake)), guardrails={
        "type": "model", "input_guardrail": {"model_id": "no-such-model", "response_validation_regex": ACCEPT}})
    refused(predict(client, model_id, {"prompt": "x", "question": "hello"}), INPUT_REFUSED)


def test_regex_guardrail_is_java_matches(client, fake):
    """A regex refuses only when it matches the whole rendered request body."""
    whole = {"regex": ["(.|\\n)*forbidden(.|\\n)*"]}
    part = {"regex": ["forbidden"]}
    for guardrail, refuses in ((whole, True), (part, False)):
        model_id = client.register(client.create_connector(completion_connector(fake)),
                                   guardrails={"input_guardrail": guardrail})
        reply = predict(client, model_id, {"prompt": "a forbidden word"})
        assert reply.status == (400 if refuses else 200), reply.body


@pytest.mark.parametrize("guardrails, words", [
    ({"type": "regex"}, "The type of guardrails is required"),
    ({"input_guardrails": LOCAL_REGEX}, "unknown field [input_guardrails]"),
    ({"input_guardrail": {"regex": ["\\p{L}+"]}}, "\\p{L} is not supported"),
    ({"input_guardrail": {"regex": ["[a-z&&[^b]]"]}}, "intersection"),
    ({"type": "model", "input_guardrail": {"model_id": "x"}}, "response_validation_regex] is required"),
], ids=["type", "misspelt", "unicode-property", "intersection", "no-accept-regex"])
def test_bad_guardrails_are_refused_at_register(client, fake, guardrails, words):
    connector_id = client.create_connector(completion_connector(fake))
    before = client.ok("POST", "/_plugins/_ml/models/_search", {"query": {"match_all": {}}})["hits"]["total"]
    reply = client.call("POST", "/_plugins/_ml/models/_register", {
        "name": "m", "function_name": "remote", "connector_id": connector_id, "guardrails": guardrails})
    assert reply.status == 400 and words in reply.body["error"]["reason"], reply.body
    after = client.ok("POST", "/_plugins/_ml/models/_search", {"query": {"match_all": {}}})["hits"]["total"]
    assert after == before


# --- _predict/stream -----------------------------------------------------------------------------


def chat_model(client: Client, fake: Any, guardrails: dict[str, Any], model: str = "gpt-fake") -> str:
    return client.register(client.create_connector(openai_connector(fake, model=model)), guardrails=guardrails)


def test_stream_input_guardrail_refuses_before_the_stream(client, fake, server):
    model_id = chat_model(client, fake, {"input_guardrail": LOCAL_REGEX})
    sent = len(fake.stats.requests)
    body = stream_body(messages=[{"role": "user", "content": "tell me about the stop word"}])
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(body).encode())
    assert response.status == 400
    error = json.loads(response.body)["error"]
    assert error["type"] == "illegal_argument_exception" and error["reason"] == INPUT_REFUSED
    assert len(fake.stats.requests) == sent
    # a clean input streams
    ok = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                     json.dumps(stream_body()).encode())
    assert ok.status == 200 and ok.complete


def test_stream_output_is_not_checked_as_in_ml_commons(client, fake, server):
    """ml-commons runs output guardrails in processOutput, which a stream never reaches."""
    model_id = chat_model(client, fake, {"output_guardrail": LOCAL_REGEX}, model="gpt-fake?text=a+stop+word")
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert response.status == 200 and response.complete
    text = "".join(e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in response.events())
    assert text == "a stop word"
    # the same model's non-stream answer is refused
    refused(predict(client, model_id, {"messages": SEED_MESSAGES}), OUTPUT_REFUSED)


# --- the OpenAI front ------------------------------------------------------------------------------


def openai_refused(reply: Any, message: str) -> None:
    assert reply.status == 400, reply.body
    assert reply.body == {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                    "code": "content_filter"}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_front_input_refusal_is_an_openai_error(client, fake, stream):
    model_id = chat_model(client, fake, {"input_guardrail": LOCAL_REGEX})
    sent = len(fake.stats.requests)
    reply = client.call("POST", "/v1/chat/completions", {
        "model": model_id, "stream": stream, "messages": [{"role": "user", "content": "a stop word, please"}]})
    openai_refused(reply, INPUT_REFUSED)
    assert len(fake.stats.requests) == sent
    fine = client.call("POST", "/v1/chat/completions",
                       {"model": model_id, "messages": [{"role": "user", "content": "hello"}]})
    assert fine.status == 200, fine.body


def test_openai_front_output_refusal_is_an_openai_error(client, fake):
    model_id = chat_model(client, fake, {"output_guardrail": LOCAL_REGEX}, model="gpt-fake?text=stop-word")
    reply = client.call("POST", "/v1/chat/completions",
                        {"model": model_id, "messages": [{"role": "user", "content": "hello"}]})
    openai_refused(reply, OUTPUT_REFUSED)


@pytest.mark.parametrize("verdict", ["accept", "reject"])
def test_openai_front_model_input_guardrail_asks_about_the_last_user_message(client, fake, verdict):
    """ml-commons' model guardrail asks about the ``question`` parameter; on /v1 the question
    is the last user message (mlstream's choice: the OpenAI API has no parameters)."""
    guard_id = guardrail_model(client, fake, verdict)
    model_id = chat_model(client, fake, {"type": "model", "input_guardrail": {
        "model_id": guard_id, "response_validation_regex": ACCEPT}})
    reply = client.call("POST", "/v1/chat/completions", {"model": model_id, "messages": [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "is this fine"}]})
    if verdict == "accept":
        assert reply.status == 200, reply.body
    else:
        openai_refused(reply, INPUT_REFUSED)
    asked = [r.body["prompt"] for r in fake.stats.requests if "judge" in str(r.body.get("prompt"))]
    assert asked and "Here is the input: is this fine." in asked[-1]


def test_openai_front_completions_with_a_model_guardrail(client, fake):
    guard_id = guardrail_model(client, fake, "reject")
    connector = openai_connector(fake, model="gpt-fake", path="/v1/completions")
    connector["actions"][0]["request_body"] = '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}" }'
    model_id = client.register(client.create_connector(connector), guardrails={
        "type": "model", "output_guardrail": {"model_id": guard_id, "response_validation_regex": ACCEPT}})
    reply = client.call("POST", "/v1/completions", {"model": model_id, "prompt": "hello"})
    openai_refused(reply, OUTPUT_REFUSED)


# --- the document API of stop-word indices ----------------------------------------------------------


def test_document_routes_answer_as_opensearch(client):
    put = client.call("PUT", "/stop_words/_doc/a%2Fb?refresh=true", {"query": {"match": {"title": "halt"}}})
    assert put.status == 201 and put.body["_id"] == "a/b" and put.body["result"] == "created"
    assert client.call("POST", "/stop_words/_doc/a%2Fb", {"query": {"match": {"title": "halt"}}}).status == 200
    added = client.call("POST", "/stop_words/_doc", {"query": {"match": {"title": "cease"}}})
    assert added.status == 201 and len(added.body["_id"]) == 20
    got = client.call("GET", "/stop_words/_doc/a%2Fb")
    assert got.status == 200 and got.body["found"] is True and got.body["_version"] == 2
    assert client.call("PUT", "/stop_words/_create/a%2Fb", {"title": "x"}).status == 409
    assert client.call("GET", "/stop_words/_doc/none").body == {"_index": "stop_words", "_id": "none", "found": False}
    assert client.call("DELETE", "/stop_words/_doc/a%2Fb").body["result"] == "deleted"
    bulk = ndjson(client, "/stop_words/_bulk", '{"index": {"_id": "q"}}\n{"query": {"match_phrase": {"title": "x y"}}}\n')
    assert bulk.body["items"][0]["index"]["_index"] == "stop_words"
    exists = client.call("PUT", "/stop_words", {})
    assert exists.status == 400 and exists.body["error"]["type"] == "resource_already_exists_exception"
    missing = client.call("GET", "/nothing_here")
    assert missing.status == 404 and missing.body["error"]["type"] == "index_not_found_exception"
    bad = client.call("PUT", "/Stop_Words", {})
    assert bad.status == 400 and bad.body["error"]["reason"] == "Invalid index name [Stop_Words], must be lowercase"
    broken = ndjson(client, "/_bulk", '{"index": {"_index": "stop_words"}}\n{"query": {"nope": {}}}')
    assert broken.status == 400 and "terminated by a newline" in broken.body["error"]["reason"]


def test_mlstream_routes_keep_their_paths(client):
    """/healthz, /v1, /_cluster... never become index names: their answers are as before."""
    assert client.call("PUT", "/healthz", {}).status == 405
    assert client.call("DELETE", "/metrics").status == 405
    assert client.call("GET", "/healthz").body == {"status": "ok"}
    v1 = client.call("PUT", "/v1", {})
    assert v1.status == 404 and "message" in v1.body["error"]  # still the OpenAI front's 404
    assert client.call("PUT", "/_plugins", {}).status == 404


def test_document_routes_are_admin_only(make_server, tmp_path):
    server = make_server()
    user_key = create_key(tmp_path / "data", "user", "app")
    admin_key = create_key(tmp_path / "data", "admin", "ops")
    user, admin = client_with(server.url, bearer(user_key)), client_with(server.url, bearer(admin_key))
    for method, path in (("PUT", "/words"), ("GET", "/words"), ("PUT", "/words/_doc/1"), ("GET", "/words/_doc/1"),
                         ("DELETE", "/words"), ("POST", "/_bulk")):
        assert user.call(method, path, {"title": "x"}).status == 403, (method, path)
    assert admin.call("PUT", "/words", {}).status == 200


# --- docs/guardrails.md, as written ---------------------------------------------------------------


def test_the_docs_walkthrough_runs_as_written(server, fake):
    page = (Path(__file__).resolve().parents[2] / "docs" / "guardrails.md").read_text(encoding="utf-8")
    walkthrough = page.split("## Walk-through: stop words", 1)[1].split("\n## ", 1)[0]
    calls = re.findall(r'curl -X (\w+) "http://localhost:9200([^"]+)".*?(?:-d|--data-binary) ?\'\n?(.*?)\'',
                       walkthrough, re.S)
    assert [(method, path) for method, path, _ in calls] == [
        ("PUT", "/words0"), ("PUT", "/words0/_doc/1?refresh"), ("POST", "/_bulk"),
        ("POST", "/_plugins/_ml/models/_register?deploy=true"), ("POST", "/_plugins/_ml/models/<your_model_id>/_predict")]
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(fake))
    model_id = None
    for method, path, body in calls:
        if path == "/_bulk":
            reply = ndjson(client, path, body)
            assert reply.status == 200 and reply.body["errors"] is False
            continue
        body = body.replace("<your_connector_id>", connector_id)
        reply = client.call(method, path.replace("<your_model_id>", str(model_id)), json.loads(body))
        if path.endswith("/_predict"):
            refused(reply, INPUT_REFUSED)
        else:
            assert reply.status in (200, 201), reply.body
            model_id = reply.body.get("model_id", model_id)
    clean = {"parameters": {"messages": [{"role": "user", "content": "Explain a client server architecture"}]}}
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", clean).status == 200
