"""A model's guardrails as values, and running them against stand-ins for the world:
ported from ml-commons' GuardrailsTests, LocalRegexGuardrailTests, ModelGuardrailTests,
StopWordsTests and MLGuardTests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.guard import guardrails
from mlstream.models.connectors import UpstreamRequest
from mlstream.errors import BadRequest, GuardrailTriggered, IndexNotFound, UpstreamError
from mlstream.guard.guardrails import (Checks, LocalRegexGuardrail, ModelGuardrail, StopWords, check_input, check_output,
                                 gson_escaped, gson_json, parse, validate)
from mlstream.providers.bedrock import BEDROCK_CONVERSE

STOP_WORDS = {"index_name": "test_index", "source_fields": ["test_field"]}
LOCAL = {"stop_words": [STOP_WORDS], "regex": ["regex1"]}
MODEL = {"model_id": "guardrail_model_id", "response_validation_regex": "accept"}


def _checks(hits: dict[str, bool] | None = None, answer: Any = "accept", asked: list | None = None) -> Checks:
    def percolate(index: str, fields: tuple[str, ...], text: str) -> bool:
        if hits is None or index not in hits:
            raise IndexNotFound(f"no such index [{index}]")
        return hits[index]

    def ask(model_id: str, parameters: dict[str, Any]) -> Any:
        if asked is not None:
            asked.append((model_id, parameters))
        if isinstance(answer, Exception):
            raise answer
        return answer
    return Checks(percolate, ask)


# --- GuardrailsTests / LocalRegexGuardrailTests / ModelGuardrailTests / StopWordsTests: toXContent, parse ---


def test_to_doc_is_ml_commons_to_xcontent():
    parsed = parse({"type": "local_regex", "input_guardrail": LOCAL, "output_guardrail": LOCAL})
    assert json.dumps(parsed.to_doc(), separators=(",", ":")) == (
        '{"type":"local_regex",'
        '"input_guardrail":{"stop_words":[{"index_name":"test_index","source_fields":["test_field"]}],"regex":["regex1"]},'
        '"output_guardrail":{"stop_words":[{"index_name":"test_index","source_fields":["test_field"]}],"regex":["regex1"]}}')
    model = parse({"type": "model", "input_guardrail": {"model_id": "test_model_id", "response_filter": "$.test",
                                                         "response_validation_regex": "^accept$"}})
    assert json.dumps(model.to_doc()["input_guardrail"], separators=(",", ":")) == (
        '{"model_id":"test_model_id","response_filter":"$.test","response_validation_regex":"^accept$"}')
    assert StopWords("test_index", ("test_field",)).to_doc() == STOP_WORDS


def test_parse_local_regex_and_without_type():
    expected = LocalRegexGuardrail((StopWords("test_index", ("test_field",)),), ("regex1",))
    for body in ({"type": "local_regex", "input_guardrail": LOCAL, "output_guardrail": LOCAL},
                 {"input_guardrail": LOCAL, "output_guardrail": LOCAL}):  # parseNonType
        parsed = parse(body)
        assert parsed.type == "local_regex" and parsed.input == expected and parsed.output == expected


def test_parse_model_type():
    parsed = parse({"type": "model", "input_guardrail": MODEL, "output_guardrail": MODEL})
    assert parsed.type == "model"
    assert parsed.input == ModelGuardrail("guardrail_model_id", None, "accept") == parsed.output


def test_parse_none_and_empty():
    assert parse(None) is None
    parsed = parse({"type": "local_regex", "input_guardrail": {}, "output_guardrail": None})
    assert parsed.input is None and parsed.output is None
    assert parse({"input_guardrail": {"regex": []}}).input.regex is None  # an empty list is none, as in Java


@pytest.mark.parametrize("body, words", [
    ("local_regex", "must be an object"),
    ({"type": "other"}, "The type of guardrails is required, can not be null."),
    ({"type": None, "inputs": {}}, "unknown field [inputs]"),
    ({"input_guardrail": []}, "must be an object"),
    ({"input_guardrail": {"regex": "a"}}, "must be a list of strings"),
    ({"input_guardrail": {"regex": [1]}}, "must be a list of strings"),
    ({"input_guardrail": {"stop_words": {"index_name": "x"}}}, "must be a list"),
    ({"input_guardrail": {"stop_words": [{"index": "x"}]}}, "unknown field [index]"),
    ({"input_guardrail": {"stop_words": [{"source_fields": "title"}]}}, "must be a list of strings"),
    ({"input_guardrail": {"regex": ["\\p{L}"]}}, "not supported"),
    ({"type": "model", "input_guardrail": {"response_validation_regex": "a"}}, "[guardrails.input_guardrail.model_id]"),
    ({"type": "model", "input_guardrail": {"model_id": "m"}}, "response_validation_regex] is required"),
    ({"type": "model", "input_guardrail": {"model_id": "m", "response_validation_regex": "a", "x": 1}},
     "unknown field [x]"),
    ({"type": "model", "input_guardrail": LOCAL}, "unknown field [regex, stop_words]"),
])
def test_bad_guardrails_are_400(body, words):
    with pytest.raises(BadRequest) as refused:
        parse(body)
    assert words in refused.value.reason


# --- LocalRegexGuardrailTests: validate ----------------------------------------------------------

REGEX_GUARDRAIL = parse({"input_guardrail": {"stop_words": [STOP_WORDS], "regex": ["(.|\n)*stop words(.|\n)*"]}}).input


@pytest.mark.parametrize("text, passes", [
    ("\n\nHuman:hello good words.\n\nAssistant:", True),   # validateRegexListSuccess
    ("\n\nHuman:hello stop words.\n\nAssistant:", False),  # validateRegexListFailed
])
def test_regex_validation(text, passes):
    assert validate(REGEX_GUARDRAIL, text, {}, _checks({"test_index": False})) is passes


def test_stop_words_hit_and_no_hit():
    assert validate(REGEX_GUARDRAIL, "hello world", {}, _checks({"test_index": False})) is True
    assert validate(REGEX_GUARDRAIL, "hello bad word", {}, _checks({"test_index": True})) is False


def test_stop_words_search_failure_rejects():
    """Fail-closed (ml-commons #4904): a failed search rejects the input."""
    assert validate(REGEX_GUARDRAIL, "hello world", {}, _checks({})) is False
    assert validate(REGEX_GUARDRAIL, "hello world", {}, None) is False


def test_stop_words_without_index_or_fields_are_skipped():
    """MLGuardTests.validateInitializedStopWordsEmpty: StopWords(null, null) checks nothing."""
    guardrail = parse({"input_guardrail": {"stop_words": [{}], "regex": ["(.|\n)*stop words(.|\n)*"]}}).input
    assert guardrail.indices() == {}
    assert validate(guardrail, "\n\nHuman:hello good words.\n\nAssistant:", {}, _checks()) is True


def test_stop_words_fields_reach_the_percolation():
    seen = []

    def percolate(index: str, fields: tuple[str, ...], text: str) -> bool:
        seen.append((index, fields, text))
        return False
    guardrail = parse({"input_guardrail": {"stop_words": [
        {"index_name": "a", "source_fields": ["title", "body"]}, {"index_name": "b", "source_fields": ["x"]}]}}).input
    assert validate(guardrail, "text", {}, Checks(percolate, lambda *_: None))
    assert seen == [("a", ("title", "body"), "text"), ("b", ("x",), "text")]


# --- ModelGuardrailTests: validate ---------------------------------------------------------------

def _model(accept: str, response_filter: str | None = None) -> ModelGuardrail:
    body = {"model_id": "model_id", "response_validation_regex": accept}
    if response_filter is not None:
        body["response_filter"] = response_filter
    return parse({"type": "model", "input_guardrail": body}).input


@pytest.mark.parametrize("parameters", [None, {}, {"question": ""}],
                         ids=["validateParametersNull", "validateParametersEmpty", "validateParametersEmpty1"])
def test_model_guardrail_without_question_passes(parameters):
    asked: list = []
    assert validate(_model("^accept$"), "test", parameters or {}, _checks(asked=asked)) is True
    assert asked == []


def test_model_guardrail_rejects_a_non_matching_answer():
    assert validate(_model('^"\\s*[Aa]ccept\\s*"$'), "test", {"question": "violent content"},
                    _checks(answer="Reject")) is False


def test_model_guardrail_accepts_a_matching_answer():
    asked: list = []
    guardrail = _model('^"[Aa]ccept"$', response_filter="$.test")
    assert validate(guardrail, "test", {"question": "hello"}, _checks(answer="Accept", asked=asked)) is True
    assert asked == [("model_id", {"question": "hello", "response_filter": "$.test"})]


def test_model_guardrail_rejects_when_the_call_fails():
    assert validate(_model('^"[Aa]ccept"$'), "test", {"question": "any input"},
                    _checks(answer=UpstreamError("model not loaded"))) is False


def test_model_guardrail_nested_too_deep_rejects():
    guardrail = _model('^"accept"$')

    def ask(model_id: str, parameters: dict[str, Any]) -> Any:  # a guardrail model guarded by itself
        return "accept" if validate(guardrail, "x", {"question": "again"}, checks) else "reject"
    checks = Checks(lambda *_: False, ask)
    assert validate(guardrail, "x", {"question": "hello"}, checks) is False


def test_model_guardrail_reads_the_answer_as_gson_writes_it():
    assert validate(_model("^\\{\"action\":\"NONE\"\\}$"), "x", {"question": "q"}, _checks(answer={"action": "NONE"}))
    assert validate(_model("^null$"), "x", {"question": "q"}, _checks(answer=None))
    assert validate(_model("^1\\.0$"), "x", {"question": "q"}, _checks(answer=1))


# --- MLGuard: which text, which error ---------------------------------------------------------------

def test_check_input_and_output_errors_are_ml_commons_words():
    both = parse({"input_guardrail": {"regex": [".*bad.*"]}, "output_guardrail": {"regex": [".*bad.*"]}})
    with pytest.raises(GuardrailTriggered) as refused:
        check_input(both, '{"prompt": "bad"}', {}, _checks())
    assert refused.value.reason == "guardrails triggered for user input" and refused.value.http_status == 400
    with pytest.raises(GuardrailTriggered) as refused:
        check_output(both, '{"text": "bad"}', _checks())
    assert refused.value.reason == "guardrails triggered for LLM output"
    check_input(both, '{"prompt": "good"}', {}, _checks())
    check_input(None, "bad", {}, None)
    check_output(parse({"input_guardrail": {"regex": [".*"]}}), "bad", None)  # no output guardrail


def test_output_model_guardrail_is_asked_the_escaped_answer():
    """ConnectorUtils.processOutput: {"question": processTextDoc(modelResponse)}."""
    asked: list = []
    guardrail = parse({"type": "model", "output_guardrail": {"model_id": "g", "response_validation_regex": ".*"}})
    check_output(guardrail, '{"text": "a\nb"}', _checks(asked=asked))
    assert asked == [("g", {"question": '{\\"text\\": \\"a\\nb\\"}'})]


def test_gson_writes_strings_without_html_escaping():
    assert gson_json("<a href='x'>&</a>") == "\"<a href='x'>&</a>\""
    assert gson_escaped("line\u2028\"q\"\t") == "line\\u2028\\\"q\\\"\\t"
    assert gson_json({"a": [1, 2.5, None, True]}) == '{"a":[1.0,2.5,null,true]}'
    assert guardrails.MAX_NESTED_GUARDRAIL_MODELS >= 1


# --- streams: ml-commons' BedrockStreamingHandler.parseGuardrailConfig (#4550) ------------------------

@pytest.mark.parametrize("config, sent", [
    ({"guardrailIdentifier": "test-guardrail-id", "guardrailVersion": "1", "trace": "enabled"},
     {"guardrailIdentifier": "test-guardrail-id", "guardrailVersion": "1", "trace": "enabled",
      "streamProcessingMode": "async"}),
    ({"guardrailIdentifier": "test-guardrail-id"},
     {"guardrailIdentifier": "test-guardrail-id", "streamProcessingMode": "async"}),
    ({}, {"streamProcessingMode": "async"}),
    ({"guardrailIdentifier": "g", "streamProcessingMode": "sync", "other": 1},
     {"guardrailIdentifier": "g", "streamProcessingMode": "async"}),
], ids=["all-fields", "partial", "empty", "sync-overridden"])
def test_a_bedrock_guardrail_streams_asynchronously(config, sent):
    request = UpstreamRequest("POST", "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse", {},
                              json.dumps({"messages": [], "guardrailConfig": config}).encode())
    streamed = BEDROCK_CONVERSE.stream_request(request, None, {})  # type: ignore[arg-type]
    assert json.loads(streamed.body) == {"messages": [], "guardrailConfig": sent}


def test_a_converse_body_without_a_guardrail_goes_out_untouched():
    body = b'{"messages": [],  "system": []}'
    request = UpstreamRequest("POST", "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse", {}, body)
    assert BEDROCK_CONVERSE.stream_request(request, None, {}).body is body  # type: ignore[arg-type]
