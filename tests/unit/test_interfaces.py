"""Model interfaces, model fields and the template's kept placeholders, without sockets.

Tables of (input, expected) from ml-commons' sources: MLNodeUtils.validateSchema (networknt's
error words), processRemoteInferenceInputDataSetParametersValue, ModelInterfaceUtils'
presets, MLDeploySetting, RemoteConnectorExecutor's skip_validating_missing_parameters.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.models import interfaces

from mlstream.models import fields as model_fields

from mlstream.wire import templating
from mlstream.errors import BadRequest, InterfaceRefused, TemplateError


def refusal(schema: Any, parameters: dict[str, Any]) -> str:
    stored = interfaces.parse_interface({"input": schema})
    with pytest.raises(InterfaceRefused) as refused:
        interfaces.check_input(stored, interfaces.input_instance(parameters))
    text = str(refused.value)
    assert text.startswith(interfaces.INPUT_REFUSED + "Validation failed: [")
    return text[len(interfaces.INPUT_REFUSED + "Validation failed: ["):text.index("] for instance: ")]


P = {"type": "object"}


@pytest.mark.parametrize(("schema", "parameters", "errors"), [
    ({"properties": {"parameters": {"properties": {"prompt": {"type": "integer"}}}}}, {"prompt": "hi"},
     "/parameters/prompt: string found, integer expected"),
    ({"properties": {"parameters": {"required": ["messages"]}}}, {},
     "/parameters: required property 'messages' not found"),
    ({"required": ["text_docs"]}, {}, ": required property 'text_docs' not found"),
    ({"properties": {"parameters": {"properties": {"n": {"type": ["string", "null"]}}}}}, {"n": 2},
     "/parameters/n: integer found, [string, null] expected"),
    ({"properties": {"parameters": {"properties": {"t": {"maximum": 1}}}}}, {"t": 1.5},
     "/parameters/t: must have a maximum value of 1"),
    ({"properties": {"parameters": {"properties": {"m": {"enum": ["a", "b"]}}}}}, {"m": "c"},
     '/parameters/m: does not have a value in the enumeration ["a", "b"]'),
    ({"properties": {"parameters": {"properties": {"x": {"minItems": 2}}}}}, {"x": [1]},
     "/parameters/x: must have at least 2 items but found 1"),
    ({"properties": {"parameters": {"properties": {"a": P}, "additionalProperties": False}}}, {"a": {}, "b": 1},
     "/parameters: property 'b' is not defined in the schema and the schema does not allow additional properties"),
    ({"properties": {"parameters": {"properties": {"s": {"minLength": 3}}}}}, {"s": "ab"},
     "/parameters/s: must be at least 3 characters long"),
    ({"properties": {"parameters": {"properties": {"a/b": {"type": "integer"}}}}}, {"a/b": "x"},
     "/parameters/a~1b: string found, integer expected"),
])
def test_errors_are_worded_as_networknt_words_them(schema, parameters, errors):
    assert refusal(schema, parameters) == errors


def test_every_error_is_listed_and_the_instance_and_schema_follow():
    schema = {"properties": {"parameters": {"properties": {"a": {"type": "integer"}}, "required": ["b"]}}}
    stored = interfaces.parse_interface({"input": schema})
    with pytest.raises(InterfaceRefused) as refused:
        interfaces.check_input(stored, interfaces.input_instance({"a": "x"}))
    assert str(refused.value).endswith(
        "[/parameters/a: string found, integer expected, /parameters: required property 'b' not found] "
        'for instance: {"algorithm":"REMOTE","parameters":{"a":"x"},"action_type":"PREDICT"} '
        f"with schema: {stored['input']}")
    assert refused.value.http_status == 400 and refused.value.error_type == "status_exception"


@pytest.mark.parametrize(("declared", "sent", "passes"), [
    ("integer", "7", True),             # JSON text read back as JSON
    ("array", "[1, 2]", True),
    ("string", "7", True),              # the schema wants text: kept
    ("string", 7, True),                # a JSON value where text is wanted: its text
    ("string", ["a"], True),
    ("integer", "seven", False),        # not JSON: stays a string
    ("boolean", "true", True),          # _predict/stream's "stream": "true"
])
def test_parameters_are_read_as_ml_commons_reads_them(declared, sent, passes):
    stored = interfaces.parse_interface({"input": {"properties": {"parameters": {"properties": {
        "p": {"type": declared}}}}}})
    instance = interfaces.input_instance({"p": sent})
    if passes:
        interfaces.check_input(stored, instance)
    else:
        with pytest.raises(InterfaceRefused):
            interfaces.check_input(stored, instance)


def test_a_dataset_instance_is_ml_commons_text_docs_input():
    assert interfaces.input_instance(None, ("a", "b")) == {"algorithm": "REMOTE", "text_docs": ["a", "b"]}
    assert interfaces.input_instance(None, ("d",), "q") == {"algorithm": "REMOTE", "query_text": "q",
                                                            "text_docs": ["d"]}


def test_the_stored_form_and_refusals():
    assert interfaces.parse_interface(None) is None
    assert interfaces.parse_interface({"input": {"type": "object"}, "extra": 1}) == {"input": '{"type":"object"}'}
    assert interfaces.parse_interface({"output": '{"type": "object"}'}) == {"output": '{"type": "object"}'}
    for bad, words in (({"input": "{"}, "[interface.input] is not JSON"),
                       ({"input": {"type": 5}}, "[interface.input] is not a JSON Schema"),
                       ("x", "[interface] must be a JSON object")):
        with pytest.raises(BadRequest, match=words.replace("[", r"\[").replace("]", r"\]")):
            interfaces.parse_interface(bad)


def test_output_checks_the_answer():
    stored = {"output": json.dumps({"required": ["inference_results"]})}
    interfaces.check_output(stored, {"inference_results": []})
    with pytest.raises(InterfaceRefused, match=r"^Error validating output schema.*: required property"):
        interfaces.check_output(stored, {})
    interfaces.check_output(None, {})
    interfaces.check_output({"input": "{}"}, {})


PRESETS = [  # (parameters, post-process function, input's parameters.required, output tensor's required)
    ({"service_name": "bedrock", "model": "ai21.j2-mid-v1"}, "x", ["inputs"], ["name", "dataAsMap"]),
    ({"service_name": "bedrock", "model": "ai21.j2-mid-v1"}, None, ["inputs"], None),
    ({"service_name": "bedrock", "model": "anthropic.claude-3-sonnet-20240229-v1:0"}, None, ["inputs"],
     ["name", "dataAsMap"]),
    ({"service_name": "bedrock", "model": "anthropic.claude-v2"}, None, ["inputs"], ["name", "dataAsMap"]),
    ({"service_name": "bedrock", "model": "cohere.embed-english-v3"}, "connector.post_process.cohere.embedding",
     ["texts"], ["name", "data_type", "shape", "data"]),
    ({"service_name": "bedrock", "model": "cohere.embed-multilingual-v3"}, None, ["texts"], ["name", "dataAsMap"]),
    ({"service_name": "bedrock", "model": "amazon.titan-embed-text-v1"},
     "CONNECTOR.POST_PROCESS.BEDROCK.EMBEDDING", ["inputText"], ["name", "data_type", "shape", "data"]),
    ({"service_name": "bedrock", "model": "amazon.titan-embed-image-v1"}, None, None, ["name", "dataAsMap"]),
    ({"service_name": "comprehend", "api_name": "DetectDominantLanguage"}, None, ["Text"], ["name", "dataAsMap"]),
    ({"service_name": "textract"}, None, ["bytes"], None),
]


@pytest.mark.parametrize(("parameters", "function", "input_required", "tensor_required"), PRESETS)
def test_presets_as_model_interface_utils_chooses_them(parameters, function, input_required, tensor_required):
    preset = interfaces.preset_interface(parameters, function)
    assert preset is not None and set(preset) == {"input", "output"}
    schema_in, schema_out = json.loads(preset["input"]), json.loads(preset["output"])
    assert schema_in["properties"]["parameters"].get("required") == input_required
    tensor = schema_out["properties"]["inference_results"]["items"]["properties"]["output"]["items"]
    assert tensor.get("required") == tensor_required
    for text in preset.values():  # each one a schema the checker takes (textract's closed)
        interfaces.parse_interface({"input": text})


@pytest.mark.parametrize("parameters", [
    {"service_name": "bedrock", "model": "anthropic.claude-3-haiku-20240307-v1:0"},
    {"service_name": "comprehend", "api_name": "DetectEntities"},
    {"model": "gpt-4o"}, {},
])
def test_no_preset_for_other_connectors(parameters):
    assert interfaces.preset_interface(parameters, None) is None


# --- model fields ---------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "stored"), [
    ({}, {"model_ttl_minutes": -1}),
    ({"model_ttl_minutes": 5}, {"model_ttl_minutes": 5}),
    ({"model_ttl_minutes": "5"}, {"model_ttl_minutes": 5}),
    ({"model_ttl_minutes": 5.0}, {"model_ttl_minutes": 5}),
    ({"is_auto_deploy_enabled": False}, {"is_auto_deploy_enabled": False, "model_ttl_minutes": -1}),
])
def test_deploy_setting_as_ml_deploy_setting_parses_it(given, stored):
    assert model_fields.deploy_setting(given) == stored


@pytest.mark.parametrize("given", [{"model_ttl_minutes": 1.5}, {"model_ttl_minutes": True},
                                   {"model_ttl_minutes": "soon"}, {"is_auto_deploy_enabled": "no"},
                                   {"ttl": 1}, [], {"model_ttl_minutes": 2**63}])
def test_deploy_setting_refusals(given):
    with pytest.raises(BadRequest):
        model_fields.deploy_setting(given)


def test_ttl_and_auto_deploy_of_a_stored_model():
    assert model_fields.ttl_minutes({}) == -1
    assert model_fields.ttl_minutes({"deploy_setting": {"model_ttl_minutes": 3}}) == 3
    assert model_fields.auto_deploy_allowed({}) is True
    assert model_fields.auto_deploy_allowed({"deploy_setting": {"is_auto_deploy_enabled": False}}) is False


def test_remote_text_embedding_model_config_needs():
    """UpdateModelTransportAction.validateModelConfig's words."""
    model_fields.check_model_config({"model_type": "bert"}, None)
    with pytest.raises(BadRequest, match="Embedding dimension must be provided"):
        model_fields.check_model_config({"model_type": "text_embedding"}, None)
    with pytest.raises(BadRequest, match="Space type must be provided"):
        model_fields.check_model_config({"model_type": "TEXT_EMBEDDING", "embedding_dimension": 3,
                                         "framework_type": "sentence_transformers"}, None)
    model_fields.check_model_config({"model_type": "text_embedding"},
                                    {"embedding_dimension": 3, "framework_type": "huggingface_transformers",
                                     "additional_config": {"space_type": "l2"}})


def test_checked_fields_take_only_the_named_fields_and_skip_nulls():
    fields = model_fields.checked_fields({"name": "n", "description": None, "other": 1, "is_enabled": False},
                                         {"name", "description", "is_enabled"})
    assert fields == {"name": "n", "is_enabled": False}


# --- a payload keeps what nothing filled ---------------------------------------------------

def test_keep_missing_keeps_parameters_but_never_credentials():
    template = '{"a": "${parameters.x}", "b": ${parameters.y:-1}, "c": "${parameters.z:-null}"}'
    assert templating.render(template, {}, {}, where="payload", keep_missing=True) == \
        '{"a": "${parameters.x}", "b": 1, "c": null}'
    assert templating.render('"${parameters.p}"', {"p": "say ${parameters.q}"}, {}, where="payload",
                             keep_missing=True) == '"say ${parameters.q}"'
    with pytest.raises(TemplateError, match="credential placeholder not filled in payload: key"):
        templating.render('"${credential.key}"', {}, {}, where="payload", keep_missing=True)
    with pytest.raises(TemplateError, match="parameter placeholder not filled in payload: x"):
        templating.render('"${parameters.x}"', {}, {}, where="payload")
