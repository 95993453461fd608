"""Connector fields ml-commons accepts, and the request clean-ups it makes, table by table.

Sources (under common/src/main/java/org/opensearch/ml/common/connector/ unless said):
ConnectorAction.java (action fields), HttpConnector.java (structured output injection),
ml-algorithms/.../remote/ConnectorUtils.java (the Bedrock Nova clean-up).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.models.connectors import clean_nova_request, inject_structured_output, parse_connector, render_request
from mlstream.errors import BadRequest
from mlstream.upstream.aws_credentials import AwsCredentials
from mlstream.upstream.signing import sign_request


def connector(**action: Any) -> dict[str, Any]:
    return {"name": "c", "protocol": "http", "parameters": {"model": "m"},
            "actions": [{"action_type": "predict", "method": "POST", "url": "https://api.openai.com/v1/x",
                         "request_body": '{"model": "${parameters.model}"}', **action}]}


# ConnectorAction.java: name, supports_structured_output; pre/post process functions
def test_action_fields_ml_commons_accepts_are_kept() -> None:
    parsed = parse_connector(connector(name="embed_1", supports_structured_output=True,
                                       pre_process_function="connector.pre_process.openai.embedding",
                                       post_process_function="connector.post_process.openai.embedding"))
    doc = parsed.public_doc()["actions"][0]
    assert doc["name"] == "embed_1"
    assert doc["supports_structured_output"] is True
    assert doc["pre_process_function"] == "connector.pre_process.openai.embedding"
    assert parse_connector(connector()).public_doc()["actions"][0].get("supports_structured_output") is None


@pytest.mark.parametrize("action, message", [
    ({"supports_structured_output": "yes"}, "supports_structured_output] must be true or false"),
    ({"name": "has space"}, "[actions[0].name] must be"),
    ({"name": "predict"}, "not an action type"),
    ({"pre_process_function": "return params.text_docs +;"},
     "[actions[0].pre_process_function] Painless syntax error at line 1, column 26"),
    ({"post_process_function": "new File('/etc/passwd')"},
     "[actions[0].post_process_function] Painless construct not supported at line 1, column 5: class File"),
    ({"post_process_function": "connector.post_process.openai.embeddingz"},
     "[actions[0].post_process_function] connector.post_process.openai.embeddingz is not a built-in"),
])
def test_action_fields_refused(action: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_connector(connector(**action))
    assert message in caught.value.reason


# HttpConnector.java injectStructuredOutputParams
STRUCTURED = [
    ("replace", '{"model":"m","response_format":{"type":"text"}}',
     {"_response_format_json": '{"type":"json_object"}'}, {"model": "m", "response_format": {"type": "json_object"}}),
    ("inject-from-object", '{"model":"m"}', {"_generationConfig_json": {"temperature": 0}},
     {"model": "m", "generationConfig": {"temperature": 0}}),
    ("merge-additions", '{"toolConfig":{"a":1}}', {"_toolConfig_additions_json": '{"b":2}'},
     {"toolConfig": {"a": 1, "b": 2}}),
    ("replace-then-merge", '{}', {"_response_format_json": '{"a":1}', "_response_format_additions_json": '{"b":2}'},
     {"response_format": {"a": 1, "b": 2}}),
    ("field-not-allowed", '{"model":"m"}', {"_model_json": '{"x":1}'}, {"model": "m"}),
    ("not-an-object-ignored", '{"model":"m"}', {"_response_format_json": '[1]'}, {"model": "m"}),
    ("array-body-untouched", '[1]', {"_response_format_json": '{"a":1}'}, [1]),
]


@pytest.mark.parametrize("body, parameters, expected", [c[1:] for c in STRUCTURED], ids=[c[0] for c in STRUCTURED])
def test_structured_output(body: str, parameters: dict[str, Any], expected: Any) -> None:
    assert json.loads(inject_structured_output(body, parameters)) == expected


def test_structured_output_only_on_actions_that_support_it() -> None:
    params = {"model": "m", "_response_format_json": '{"type":"json_object"}'}
    plain = render_request(parse_connector(connector()), params)
    assert json.loads(plain.body) == {"model": "m"}
    structured = render_request(parse_connector(connector(supports_structured_output=True)), params)
    assert json.loads(structured.body) == {"model": "m", "response_format": {"type": "json_object"}}


# ConnectorUtils.java cleanBedrockNovaRequest
NOVA = [
    ("text-kept-image-dropped",
     {"taskType": "SINGLE_EMBEDDING", "singleEmbeddingParams": {"text": {"value": "hi"},
                                                                "image": {"source": {"bytes": None}}}},
     {"taskType": "SINGLE_EMBEDDING", "singleEmbeddingParams": {"text": {"value": "hi"}}}),
    ("null-text-dropped",
     {"singleEmbeddingParams": {"text": {"value": None}, "video": {"format": "mp4", "source": {"bytes": "dmlk"}}}},
     {"singleEmbeddingParams": {"video": {"format": "mp4", "source": {"bytes": "dmlk"}}}}),
    ("all-present-kept",
     {"singleEmbeddingParams": {"audio": {"source": {"bytes": "YQ=="}}}},
     {"singleEmbeddingParams": {"audio": {"source": {"bytes": "YQ=="}}}}),
    ("no-params-untouched", {"a": None}, {"a": None}),
]


@pytest.mark.parametrize("body, expected", [c[1:] for c in NOVA], ids=[c[0] for c in NOVA])
def test_nova_clean_up(body: Any, expected: Any) -> None:
    assert json.loads(clean_nova_request(json.dumps(body))) == expected


def test_nova_clean_up_only_for_the_nova_model() -> None:
    template = ('{"singleEmbeddingParams": {"text": {"value": ${parameters.text:-null}}, '
                '"image": {"source": {"bytes": ${parameters.image:-null}}}}}')
    raw = connector(request_body=template)
    raw["parameters"] = {"model": "amazon.nova-2-multimodal-embeddings-v1:0"}
    nova = render_request(parse_connector(raw), {**raw["parameters"], "text": '"hi"'})
    assert json.loads(nova.body) == {"singleEmbeddingParams": {"text": {"value": "hi"}}}
    other = render_request(parse_connector(raw), {"model": "other", "text": '"hi"'})
    assert "image" in json.loads(other.body)["singleEmbeddingParams"]


# transport/connector/MLCreateConnectorInput.java: provisioned_by and dry_run
def test_create_input_fields_ml_commons_accepts() -> None:
    doc = parse_connector({**connector(), "provisioned_by": "ml-commons-agent", "dry_run": True}).public_doc()
    assert doc["provisioned_by"] == "ml-commons-agent"
    assert "dry_run" not in doc
    with pytest.raises(BadRequest, match=r"\[dry_run\] must be true or false"):
        parse_connector({**connector(), "dry_run": "yes"})


# AbstractConnector.java validateConnectorHeaders (BLOCKED_DYNAMIC_HEADERS)
@pytest.mark.parametrize("name", ["Authorization", "x-api-key", "Cookie", "Host", "X-Forwarded-For"])
def test_sensitive_headers_refuse_parameters(name: str) -> None:
    with pytest.raises(BadRequest, match=f"Header '{name}' cannot use"):
        parse_connector(connector(headers={name: "Bearer ${parameters.token}"}))
    parse_connector(connector(headers={name: "Bearer ${credential.k}"}) | {"credential": {"k": "v"}})


# ConnectorUtils.java validateSubstitutedHeaders
@pytest.mark.parametrize("value, message", [
    ("a\r\nX-Injected: 1", "invalid control character"),
    ("a\x7f", "invalid control character"),
    ("x" * 8200, "exceeds 8KB limit"),
])
def test_filled_headers_are_checked(value: str, message: str) -> None:
    parsed = parse_connector(connector(headers={"X-Tenant": "${parameters.tenant}"}))
    with pytest.raises(BadRequest, match=message):
        render_request(parsed, {"model": "m", "tenant": value})
    assert render_request(parsed, {"model": "m", "tenant": "a\tb"}).headers["X-Tenant"] == "a\tb"


# AwsConnector.java: region and service_name from the parameters, else from the credential
def test_aws_region_and_service_may_come_from_the_credential() -> None:
    raw = connector() | {"protocol": "aws_sigv4",
                         "credential": {"access_key": "AKID", "secret_key": "s", "region": "eu-west-1",
                                        "service_name": "bedrock"}}
    parsed = parse_connector(raw)
    assert (parsed.aws_setting("region"), parsed.aws_setting("service_name")) == ("eu-west-1", "bedrock")
    both = parse_connector(raw | {"parameters": {"model": "m", "region": "us-east-1"}})
    assert both.aws_setting("region") == "us-east-1"
    signed = sign_request(render_request(parsed, {"model": "m"}), parsed, AwsCredentials().for_connector(parsed))
    assert "/eu-west-1/bedrock/aws4_request" in signed.headers["Authorization"]
    del raw["credential"]["region"]
    with pytest.raises(BadRequest, match=r"\[parameters.region\] \(or \[credential.region\]\) is required"):
        parse_connector(raw)
