"""Model interfaces: the JSON Schemas a model's ``interface`` holds for its input and output.

Pure: no I/O. As ml-commons keeps them (``MLModel.INTERFACE_FIELD``):

- stored as ``{"input": "<schema as JSON text>", "output": "<...>"}``: only those two keys
  are kept, a schema given as an object is kept as its compact JSON text
  (``StringUtils.filteredParameterMap``); mlstream also refuses, at register and update,
  text that is not a JSON Schema (ml-commons would fail every later predict instead);
- preset for known connectors when the register request has none
  (``ModelInterfaceUtils.createPresetModelInterfaceByConnector``: Bedrock models by
  ``parameters.model``, Amazon Comprehend DetectDominantLanguage, Amazon Textract);
- the input checked before the provider is called, on ``_predict`` and ``_predict/stream``
  (``TransportPredictionTaskAction.validateInputSchema``), against ml-commons' own
  ``MLInput`` JSON: ``{"algorithm": "REMOTE", "parameters": {...}, "action_type":
  "PREDICT"}``, each string parameter read back as JSON unless the schema types it as a
  string (``MLNodeUtils.processRemoteInferenceInputDataSetParametersValue``);
- the output checked on a non-stream answer (``MLPredictTaskRunner.validateOutputSchema``)
  against the answer's ``inference_results`` JSON;
- with JSON Schema draft 2020-12, errors worded as networknt's json-schema-validator
  words them (``MLNodeUtils.validateSchema``): ``Validation failed: [<path>: <message>,
  ...] for instance: <json> with schema: <schema>``, the path a JSON Pointer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import BadRequest, InterfaceRefused

if TYPE_CHECKING:  # jsonschema is imported when a model first has an interface (about 5 MB)
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

__all__ = ["INTERFACE_KEYS", "check_input", "check_output", "input_instance", "parse_interface",
           "preset_interface"]

INTERFACE_KEYS = ("input", "output")
INPUT_REFUSED = ("Error validating input schema, if you think this is expected, please update your 'input' field "
                 "in the 'interface' field for this model: ")
OUTPUT_REFUSED = ("Error validating output schema, if you think this is expected, please update your 'output' "
                  "field in the 'interface' field for this model: ")
# Compiled validators kept by schema text: models are few, so this holds every live one.
_CACHE_SIZE = 256


# --------------------------------------------------------------------------- the field


def parse_interface(value: Any, *, where: str = "interface") -> dict[str, str] | None:
    """A register or update request's ``interface``, as it is stored; None for none."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"[{where}] must be a JSON object with [input] and/or [output] JSON Schemas")
    stored: dict[str, str] = {}
    for key in INTERFACE_KEYS:
        if key not in value:
            continue
        schema = value[key]
        text = schema if isinstance(schema, str) else _compact(schema)
        _validator(text, f"{where}.{key}")  # refuses text that is not a JSON Schema
        stored[key] = text
    return stored


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _validator(text: str, where: str = "interface") -> Draft202012Validator:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"[{where}] is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise BadRequest(f"[{where}] is not a JSON Schema: {exc.message}") from None
    return Draft202012Validator(schema)


# --------------------------------------------------------------------------- checks


def input_instance(parameters: Mapping[str, Any] | None, docs: tuple[Any, ...] | None = None,
                   query_text: str | None = None) -> dict[str, Any]:
    """ml-commons' ``MLInput.toXContent`` for a remote model: ``parameters`` (a remote
    call), or ``text_docs`` (and ``query_text``) for a dataset."""
    instance: dict[str, Any] = {"algorithm": "REMOTE"}
    if docs is None:
        instance["parameters"] = dict(parameters or {})
        instance["action_type"] = "PREDICT"
        return instance
    if query_text is not None:
        instance["query_text"] = query_text
    if docs:
        instance["text_docs"] = list(docs)
    return instance


def check_input(interface: Mapping[str, str] | None, instance: dict[str, Any]) -> None:
    """Raise ``InterfaceRefused`` when the model's input schema refuses ``instance``."""
    schema_text = interface.get("input") if interface else None
    if schema_text is None:
        return
    validator = _validator(schema_text)
    processed = _parameters_as_json(instance, validator.schema)
    _check(validator, schema_text, processed, INPUT_REFUSED)


def check_output(interface: Mapping[str, str] | None, answer: dict[str, Any]) -> None:
    """Raise ``InterfaceRefused`` when the model's output schema refuses a ``_predict`` answer."""
    schema_text = interface.get("output") if interface else None
    if schema_text is not None:
        _check(_validator(schema_text), schema_text, answer, OUTPUT_REFUSED)


def _check(validator: Draft202012Validator, schema_text: str, instance: Any, prefix: str) -> None:
    errors = [_networknt_text(error) for error in validator.iter_errors(instance)]
    if errors:
        raise InterfaceRefused(f"{prefix}Validation failed: [{', '.join(errors)}] for instance: "
                               f"{_compact(instance)} with schema: {schema_text}")


def _parameters_as_json(instance: dict[str, Any], schema: Any) -> dict[str, Any]:
    """``processRemoteInferenceInputDataSetParametersValue``: ml-commons holds every parameter
    as text, then reads each back as JSON unless the schema's
    ``properties.parameters.properties.<name>.type`` is "string". Here a client's JSON
    value is as it was sent, and becomes its text only where the schema wants a string."""
    parameters = instance.get("parameters")
    if not isinstance(parameters, dict):
        return instance
    declared = _path(schema, "properties", "parameters", "properties")
    processed: dict[str, Any] = {}
    for name, value in parameters.items():
        wants_text = _path(declared, name, "type") == "string"
        if isinstance(value, str) and not wants_text:
            try:
                value = json.loads(value)
            except ValueError:
                pass
        elif not isinstance(value, str) and wants_text and value is not None:
            value = _compact(value)  # ml-commons' parameter map holds its JSON text
        processed[name] = value
    return {**instance, "parameters": processed}


def _path(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


# networknt's messages (jsv-messages.properties) for the keywords a model interface uses;
# any other keyword keeps the jsonschema library's own message.
_MESSAGES = {
    "required": "required property '{0}' not found",
    "additionalProperties": "property '{0}' is not defined in the schema and the schema does not allow "
                            "additional properties",
    "enum": "does not have a value in the enumeration {0}",
    "const": "must be the constant value '{0}'",
    "minimum": "must have a minimum value of {0}",
    "maximum": "must have a maximum value of {0}",
    "exclusiveMinimum": "must have an exclusive minimum value of {0}",
    "exclusiveMaximum": "must have an exclusive maximum value of {0}",
    "minLength": "must be at least {0} characters long",
    "maxLength": "must be at most {0} characters long",
    "minItems": "must have at least {0} items but found {1}",
    "maxItems": "must have at most {0} items but found {1}",
    "minProperties": "must have at least {0} properties",
    "maxProperties": "must have at most {0} properties",
    "pattern": "does not match the regex pattern {0}",
    "multipleOf": "must be multiple of {0}",
    "uniqueItems": "must have only unique items in the array",
}


def _networknt_text(error: ValidationError) -> str:
    """One error as networknt's ``Error.toString()``: the instance location as a JSON
    Pointer ("" for the root), ": ", the message."""
    pointer = "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in error.absolute_path)
    return f"{pointer}: {_message(error)}"


def _message(error: ValidationError) -> str:
    keyword, expected, instance = error.validator, error.validator_value, error.instance
    if keyword == "type":
        wanted = ", ".join(expected) if isinstance(expected, list) else expected
        return f"{_json_type(instance)} found, {f'[{wanted}]' if isinstance(expected, list) else wanted} expected"
    template = _MESSAGES.get(str(keyword))
    if template is None:
        return error.message
    if keyword == "required":
        missing = next((name for name in expected if isinstance(instance, dict) and name not in instance), "")
        return template.format(missing)
    if keyword == "additionalProperties":
        allowed = set(_path(error.schema, "properties") or {})
        extra = next((name for name in instance if name not in allowed), "") if isinstance(instance, dict) else ""
        return template.format(extra)
    if keyword in ("minItems", "maxItems"):
        return template.format(expected, len(instance) if isinstance(instance, list) else 0)
    if keyword == "enum":
        return template.format("[" + ", ".join(_compact(v) for v in expected) + "]")
    return template.format(expected if not isinstance(expected, (dict, list)) else _compact(expected))


def _json_type(value: Any) -> str:
    """networknt's ``JsonType`` of a value: an integral number is "integer"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# --------------------------------------------------------------------------- presets
# ModelInterfaceUtils' preset schemas, as data. Every output schema wraps the answer's
# tensors the same way; what differs is one tensor's schema.

def _parameters(properties: dict[str, Any], required: list[str] | None, *, top_required: bool) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    schema: dict[str, Any] = {"type": "object", "properties": {"parameters": parameters}}
    if top_required:
        schema["required"] = ["parameters"]
    return schema


def _results(tensor: dict[str, Any], *, required: bool = True, status_type: str = "integer") -> dict[str, Any]:
    item: dict[str, Any] = {"type": "object", "properties": {
        "output": {"type": "array", "items": tensor}, "status_code": {"type": status_type}}}
    if required:
        item["required"] = ["output", "status_code"]
    schema: dict[str, Any] = {"type": "object", "properties": {"inference_results": {"type": "array", "items": item}}}
    if required:
        schema["required"] = ["inference_results"]
    return schema


def _map_tensor(data_as_map: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    tensor: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}, "dataAsMap": data_as_map}}
    if required:
        tensor["required"] = ["name", "dataAsMap"]
    return tensor


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_STRING, _NUMBER, _INTEGER = {"type": "string"}, {"type": "number"}, {"type": "integer"}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_CONVERSATIONAL_INPUT = _parameters({"inputs": _STRING}, ["inputs"], top_required=True)
_EMBEDDING_INPUT = _parameters({"texts": _array(_STRING)}, ["texts"], top_required=False)
_TITAN_TEXT_INPUT = _parameters({"inputText": _STRING}, ["inputText"], top_required=False)
_TITAN_MULTIMODAL_INPUT = _parameters({"inputText": _STRING, "inputImage": _STRING}, None, top_required=False)
_COMPREHEND_LANGUAGE_INPUT = _parameters({"Text": _STRING}, ["Text"], top_required=True)
_TEXTRACT_INPUT = _parameters({"bytes": _STRING}, ["bytes"], top_required=True)

_CONVERSATIONAL_OUTPUT = _results(_map_tensor(_object({"response": _STRING}, ["response"])))
_TOKENS = _array(_object({
    "generatedToken": _object({"token": _STRING, "logprob": _NUMBER, "raw_logprob": _NUMBER}),
    "textRange": _object({"start": _NUMBER, "end": _NUMBER})}))
_AI21_RAW_OUTPUT = _results(_map_tensor(_object({
    "id": _NUMBER,
    "prompt": _object({"text": _STRING, "tokens": _TOKENS}),
    "completions": _array(_object({
        "data": _object({"text": _STRING, "tokens": _TOKENS}),
        "finishReason": _object({"reason": _STRING, "length": _NUMBER})}))}), required=False), required=False)
_CLAUDE_V2_OUTPUT = _results(_map_tensor(_object(
    {"type": _STRING, "completion": _STRING, "stop_reason": _STRING, "stop": _STRING}, ["type", "completion"])))
_EMBEDDING_OUTPUT = _results(_object(
    {"name": _STRING, "data_type": _STRING, "shape": _array(_INTEGER), "data": _array(_NUMBER)},
    ["name", "data_type", "shape", "data"]))
_TITAN_RAW_OUTPUT = _results(_map_tensor(_object(
    {"embedding": _array(_NUMBER), "inputTextTokenCount": _INTEGER}, ["embedding", "inputTextTokenCount"])))
_COHERE_RAW_OUTPUT = _results(_map_tensor(_object(
    {"id": _STRING, "texts": _array(_STRING), "embeddings": _array(_array(_NUMBER)), "response_type": _STRING},
    ["id", "texts", "embeddings", "response_type"])))
# ml-commons' preset wants the languages under "response", as ml-commons answered when the
# preset was written (and the blueprint's sample answer still shows); since it gives an
# object answer as dataAsMap itself (AbstractConnector.parseResponse), the published
# blueprint's answer is {"Languages": [...]}, which its own preset refuses. Both are taken here.
_LANGUAGES = _object({"Languages": _array(_object({"LanguageCode": _STRING, "Score": _NUMBER},
                                                  ["LanguageCode", "Score"]))}, ["Languages"])
_COMPREHEND_LANGUAGE_OUTPUT = _results(_map_tensor({"anyOf": [_object({"response": _LANGUAGES}, ["response"]),
                                                              _LANGUAGES]}))
# ml-commons' own text of this one stops before its last closing brackets (it is not JSON,
# so its every predict would fail); here it is closed where it evidently ends.
_POINT = _object({"X": _NUMBER, "Y": _NUMBER})
_TEXTRACT_OUTPUT = _results({"type": "object", "properties": {"name": _STRING, "dataAsMap": _object({
    "Blocks": _array(_object({
        "BlockType": _STRING,
        "Geometry": _object({"BoundingBox": _object({"Height": _NUMBER, "Left": _NUMBER, "Top": _NUMBER,
                                                     "Width": _NUMBER}),
                             "Polygon": _array(_POINT)}),
        "Id": _STRING,
        "Relationships": _array(_object({"Ids": _array(_STRING), "Type": _STRING}))})),
    "DetectDocumentTextModelVersion": _STRING,
    "DocumentMetadata": _object({"Pages": _NUMBER})})}}, required=False, status_type="number")


def _interface(input_schema: dict[str, Any], output_schema: dict[str, Any]) -> dict[str, str]:
    return {"input": _compact(input_schema), "output": _compact(output_schema)}


# Bedrock model id -> (with the post-process function it names, without it). None in the
# first place: any non-blank post-process function picks the first (ai21).
_BEDROCK = {
    "ai21.j2-mid-v1": (None, _interface(_CONVERSATIONAL_INPUT, _CONVERSATIONAL_OUTPUT),
                       _interface(_CONVERSATIONAL_INPUT, _AI21_RAW_OUTPUT)),
    "anthropic.claude-3-sonnet-20240229-v1:0": ("", _interface(_CONVERSATIONAL_INPUT, _CONVERSATIONAL_OUTPUT),
                                                _interface(_CONVERSATIONAL_INPUT, _CONVERSATIONAL_OUTPUT)),
    "anthropic.claude-v2": ("", _interface(_CONVERSATIONAL_INPUT, _CLAUDE_V2_OUTPUT),
                            _interface(_CONVERSATIONAL_INPUT, _CLAUDE_V2_OUTPUT)),
    "cohere.embed-english-v3": ("connector.post_process.cohere.embedding",
                                _interface(_EMBEDDING_INPUT, _EMBEDDING_OUTPUT),
                                _interface(_EMBEDDING_INPUT, _COHERE_RAW_OUTPUT)),
    "cohere.embed-multilingual-v3": ("connector.post_process.cohere.embedding",
                                     _interface(_EMBEDDING_INPUT, _EMBEDDING_OUTPUT),
                                     _interface(_EMBEDDING_INPUT, _COHERE_RAW_OUTPUT)),
    "amazon.titan-embed-text-v1": ("connector.post_process.bedrock.embedding",
                                   _interface(_TITAN_TEXT_INPUT, _EMBEDDING_OUTPUT),
                                   _interface(_TITAN_TEXT_INPUT, _TITAN_RAW_OUTPUT)),
    "amazon.titan-embed-image-v1": ("connector.post_process.bedrock.embedding",
                                    _interface(_TITAN_MULTIMODAL_INPUT, _EMBEDDING_OUTPUT),
                                    _interface(_TITAN_MULTIMODAL_INPUT, _TITAN_RAW_OUTPUT)),
}
_COMPREHEND_LANGUAGE = _interface(_COMPREHEND_LANGUAGE_INPUT, _COMPREHEND_LANGUAGE_OUTPUT)
_TEXTRACT = _interface(_TEXTRACT_INPUT, _TEXTRACT_OUTPUT)


def preset_interface(parameters: Mapping[str, Any], post_process_function: str | None) -> dict[str, str] | None:
    """The interface ml-commons presets for a connector (its parameters, and its first
    action's post-process function), or None."""
    service = parameters.get("service_name")
    if service == "bedrock":
        entry = _BEDROCK.get(str(parameters.get("model")))
        if entry is None:
            return None
        function, with_function, without = entry
        if function is None:  # ai21: any post-process function at all
            chosen = post_process_function is not None and post_process_function.strip() != ""
        elif function == "":  # Claude: one interface either way
            chosen = True
        else:
            chosen = post_process_function is not None and post_process_function.lower() == function
        return dict(with_function if chosen else without)
    if service == "comprehend":
        return dict(_COMPREHEND_LANGUAGE) if parameters.get("api_name") == "DetectDominantLanguage" else None
    if service == "textract":
        return dict(_TEXTRACT)
    return None

