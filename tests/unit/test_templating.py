"""Connector templates: one table per rule, positive and negative."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.errors import BadRequest, TemplateError
from mlstream.wire.templating import placeholders, render, render_json_body

SECRET = "sk-VERY-SECRET-value-123"
CREDENTIAL = {"openAI_key": SECRET, "other": "s3cr3t-two"}


def fill(template: str, parameters: dict[str, Any] | None = None,
         credential: dict[str, str] | None = None) -> str:
    return render(template, parameters or {}, credential or {}, where="payload")


# ---------------------------------------------------------------- ${parameters.NAME}

PLAIN = [
    ("str-as-is", "${parameters.model}", {"model": "gpt-4o"}, "gpt-4o"),
    ("str-in-json-string", '{"model": "${parameters.model}"}', {"model": "gpt-4o"},
     '{"model": "gpt-4o"}'),
    ("str-not-escaped", "${parameters.p}", {"p": 'say "hi"\n'}, 'say "hi"\n'),
    ("list-as-json", "${parameters.m}", {"m": [{"role": "user", "content": "hé"}]},
     '[{"role":"user","content":"hé"}]'),
    ("dict-as-json", "${parameters.d}", {"d": {"a": 1, "b": [True, None]}}, '{"a":1,"b":[true,null]}'),
    ("int", "${parameters.n}", {"n": 42}, "42"),
    ("float", "${parameters.t}", {"t": 0.5}, "0.5"),
    ("bool", "${parameters.s}", {"s": True}, "true"),
    ("none", "${parameters.x}", {"x": None}, "null"),
    ("empty-str", "[${parameters.x}]", {"x": ""}, "[]"),
    ("repeated", "${parameters.a}-${parameters.a}", {"a": "x"}, "x-x"),
    ("adjacent", "${parameters.a}${parameters.b}", {"a": "1", "b": "2"}, "12"),
    ("name-with-underscore", "${parameters.response_filter}", {"response_filter": "$.a"}, "$.a"),
    ("name-with-dash-digits", "${parameters.max-tokens2}", {"max-tokens2": 5}, "5"),
    ("name-with-dot", "${parameters.a.b}", {"a.b": "dotted"}, "dotted"),
    ("url", "https://${parameters.endpoint}/v1/chat/completions", {"endpoint": "api.openai.com"},
     "https://api.openai.com/v1/chat/completions"),
]


@pytest.mark.parametrize("template, parameters, expected", [c[1:] for c in PLAIN],
                         ids=[c[0] for c in PLAIN])
def test_parameter(template: str, parameters: dict[str, Any], expected: str) -> None:
    assert fill(template, parameters) == expected


# ---------------------------------------------------------------- nested ${parameters.x} in values
# ml-commons fills parameter placeholders with Apache Commons Text's StringSubstitutor
# (common/.../connector/HttpConnector.java createPayload, AbstractConnector.java
# substituteHeadersWithRuntimeParameters and getActionEndpoint), which substitutes inside
# substituted values too; the Comprehend and Textract blueprints rely on it for headers.

NESTED = [
    ("one-level", "${parameters.p}", {"p": "${parameters.q}", "q": "yes"}, "yes"),
    ("comprehend-target-header", "${parameters.api}",
     {"api": "Comprehend_${parameters.api_version}.${parameters.api_name}", "api_version": "20171127",
      "api_name": "DetectDominantLanguage"}, "Comprehend_20171127.DetectDominantLanguage"),
    ("two-levels", "[${parameters.a}]", {"a": "<${parameters.b}>", "b": "${parameters.c}!", "c": 1}, "[<1!>]"),
    ("default-inside", "${parameters.a}", {"a": "${parameters.b:-dflt}"}, "dflt"),
    ("to-string-inside", '"${parameters.a}"', {"a": "say ${parameters.b.toString()}", "b": 'q"'},
     '"say q\\""'),
    ("credential-in-value-stays-literal", "${parameters.a}", {"a": "${credential.openAI_key}"},
     "${credential.openAI_key}"),
    ("malformed-in-value-stays-literal", "${parameters.a}", {"a": "${parameters.b c}"}, "${parameters.b c}"),
    ("list-value", "${parameters.a}", {"a": ["${parameters.b}"], "b": "x"}, '["x"]'),
]


@pytest.mark.parametrize("template, parameters, expected", [c[1:] for c in NESTED],
                         ids=[c[0] for c in NESTED])
def test_nested_parameter(template: str, parameters: dict[str, Any], expected: str) -> None:
    assert render(template, parameters, CREDENTIAL, where="header X") == expected


@pytest.mark.parametrize("parameters, message", [
    ({"a": "${parameters.a}"}, "Parameter a refers to itself in payload: a -> a"),
    ({"a": "${parameters.b}", "b": "x${parameters.a}"}, "refers to itself in payload: a -> b -> a"),
    ({"a": "${parameters.nope}"}, "Some parameter placeholder not filled in payload: nope"),
    ({"a": "${parameters.p0}", **{f"p{i}": f"${{parameters.p{i + 1}}}" for i in range(20)}, "p20": "end"},
     "Parameters nest deeper than 16 levels in payload"),
])
def test_nested_parameter_errors(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        fill("${parameters.a}", parameters)
    assert message in caught.value.reason


def test_seed_connector_body_renders_valid_json() -> None:
    template = '{ "model": "${parameters.model}", "messages": ${parameters.messages} }'
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": 'Say "hello" in 日本語\nplease'},
    ]
    body = render_json_body(template, {"model": "gpt-4o-mini", "messages": messages}, CREDENTIAL)
    assert json.loads(body) == {"model": "gpt-4o-mini", "messages": messages}


# ---------------------------------------------------------------- .toString()

TO_STRING = [
    ("plain-str", "${parameters.p.toString()}", {"p": "abc"}, "abc"),
    ("quotes-and-newline", '"${parameters.p.toString()}"', {"p": 'a "q"\n\tb\\'},
     '"a \\"q\\"\\n\\tb\\\\"'),
    ("unicode-kept", '"${parameters.p.toString()}"', {"p": "é🎉"}, '"é🎉"'),
    ("list", '"${parameters.p.toString()}"', {"p": ["a", 1]}, '"[\\"a\\",1]"'),
    ("int", '"${parameters.p.toString()}"', {"p": 3}, '"3"'),
    ("dotted-name", "${parameters.a.b.toString()}", {"a.b": '"'}, '\\"'),
]


@pytest.mark.parametrize("template, parameters, expected", [c[1:] for c in TO_STRING],
                         ids=[c[0] for c in TO_STRING])
def test_to_string(template: str, parameters: dict[str, Any], expected: str) -> None:
    assert fill(template, parameters) == expected


@pytest.mark.parametrize("value", ['he said "hi"\n', "back\\slash", "\x00ctl", ["x", {"y": '"'}], 7],
                         ids=["quotes-newline", "backslash", "control-char", "nested", "int"])
def test_to_string_inside_json_string_round_trips(value: Any) -> None:
    body = render_json_body('{"prompt": "${parameters.p.toString()}"}', {"p": value}, {})
    expected = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    assert json.loads(body) == {"prompt": expected}


# ---------------------------------------------------------------- :-DEFAULT

DEFAULTS = [
    ("absent-uses-default", "${parameters.t:-0.7}", {}, "0.7"),
    ("present-wins", "${parameters.t:-0.7}", {"t": 0.2}, "0.2"),
    ("none-counts-as-absent", "${parameters.t:-0.7}", {"t": None}, "0.7"),
    ("empty-default", "[${parameters.t:-}]", {}, "[]"),
    ("default-with-spaces", "${parameters.t:-a b}", {}, "a b"),
    ("default-to-string-present", "${parameters.p.toString():-x}", {"p": '"'}, '\\"'),
    ("default-to-string-absent", "${parameters.p.toString():-x}", {}, "x"),
    ("unquoted-null-default", "${parameters.t:-null}", {}, "null"),
    ("quoted-null-absent", '{"stop": "${parameters.stop:-null}"}', {}, '{"stop": null}'),
    ("quoted-null-none", '{"stop": "${parameters.stop:-null}"}', {"stop": None}, '{"stop": null}'),
    ("quoted-null-present", '{"stop": "${parameters.stop:-null}"}', {"stop": "END"},
     '{"stop": "END"}'),
    ("quoted-null-two-in-a-row", '["${parameters.a:-null}","${parameters.b:-null}"]', {"b": "x"},
     '[null,"x"]'),
    ("quoted-other-default-keeps-quotes", '"${parameters.s:-none}"', {}, '"none"'),
    ("credential-default", "${credential.k:-anon}", {}, "anon"),
]


@pytest.mark.parametrize("template, parameters, expected", [c[1:] for c in DEFAULTS],
                         ids=[c[0] for c in DEFAULTS])
def test_default(template: str, parameters: dict[str, Any], expected: str) -> None:
    assert fill(template, parameters) == expected


# ---------------------------------------------------------------- ${credential.KEY}

CREDENTIALS = [
    ("header", "Bearer ${credential.openAI_key}", f"Bearer {SECRET}"),
    ("in-url", "https://x/?key=${credential.other}", "https://x/?key=s3cr3t-two"),
    ("with-parameter", "${credential.other}:${parameters.p}", "s3cr3t-two:v"),
]


@pytest.mark.parametrize("template, expected", [c[1:] for c in CREDENTIALS],
                         ids=[c[0] for c in CREDENTIALS])
def test_credential(template: str, expected: str) -> None:
    assert render(template, {"p": "v"}, CREDENTIAL, where="header Authorization") == expected


def test_parameters_and_credentials_are_separate_namespaces() -> None:
    with pytest.raises(TemplateError, match="credential placeholder not filled in payload: p"):
        fill("${credential.p}", {"p": "param"})


# ---------------------------------------------------------------- left as text

LITERAL = [
    ("no-placeholders", '{"a": 1}'),
    ("dollar-alone", "cost: $5"),
    ("dollar-brace-other", "${env.HOME} and ${x}"),
    ("dollar-parameters-no-brace", "$parameters.x"),
    ("unclosed", '{"a": "${parameters.x", "b": {"c": 1}}'),
    ("unclosed-at-end", "abc ${parameters.x"),
    ("unclosed-credential", "${credential."),
    ("wrong-case", "${Parameters.x}"),
]


@pytest.mark.parametrize("template", [c[1] for c in LITERAL], ids=[c[0] for c in LITERAL])
def test_left_as_text(template: str) -> None:
    assert fill(template) == template
    assert placeholders(template) == []


# ---------------------------------------------------------------- unfilled / malformed

MISSING = [
    ("one-param-payload", "payload", '{"m": ${parameters.messages}}', {},
     "Some parameter placeholder not filled in payload: messages"),
    ("url", "url", "https://${parameters.endpoint}/v1", {},
     "Some parameter placeholder not filled in url: endpoint"),
    ("header", "header Authorization", "Bearer ${parameters.token}", {},
     "Some parameter placeholder not filled in header Authorization: token"),
    ("all-sorted-once", "payload", "${parameters.b}${parameters.a}${parameters.b}${parameters.ok}",
     {"ok": 1}, "Some parameter placeholder not filled in payload: a, b"),
    ("to-string", "payload", "${parameters.p.toString()}", {},
     "Some parameter placeholder not filled in payload: p"),
    ("credential", "header Authorization", "Bearer ${credential.api_key}", {},
     "Some credential placeholder not filled in header Authorization: api_key"),
    ("both-kinds", "payload", "${credential.k}${parameters.p}", {},
     "Some parameter placeholder not filled in payload: p; "
     "Some credential placeholder not filled in payload: k"),
]


@pytest.mark.parametrize("where, template, parameters, reason", [c[1:] for c in MISSING],
                         ids=[c[0] for c in MISSING])
def test_unfilled_placeholder(where: str, template: str, parameters: dict[str, Any],
                              reason: str) -> None:
    with pytest.raises(TemplateError) as info:
        render(template, parameters, {}, where=where)
    assert info.value.reason == reason
    assert info.value.http_status == 400
    assert isinstance(info.value, BadRequest)


def test_missing_credential_error_has_no_credential_value() -> None:
    template = "Bearer ${credential.openAI_key} ${credential.missing_key} ${parameters.gone}"
    with pytest.raises(TemplateError) as info:
        render(template, {}, CREDENTIAL, where="header Authorization")
    text = str(info.value) + info.value.reason + json.dumps(info.value.to_body())
    assert "missing_key" in text and "gone" in text
    for value in CREDENTIAL.values():
        assert value not in text


MALFORMED = [
    ("space-in-name", "${parameters.foo bar}"),
    ("empty-name", "${parameters.}"),
    ("bad-char", "${credential.a/b}"),
    ("function", "${parameters.toString()}"),
]


@pytest.mark.parametrize("template", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_placeholder_is_an_error(template: str) -> None:
    with pytest.raises(TemplateError, match="Malformed placeholder in payload"):
        fill(template, {"foo bar": 1, "": 1})
    with pytest.raises(TemplateError, match="Malformed placeholder"):
        placeholders(template)


def test_non_json_value_is_template_error() -> None:
    with pytest.raises(TemplateError, match="parameters.p"):
        fill("${parameters.p}", {"p": {1, 2}})
    with pytest.raises(TemplateError, match="parameters.p"):
        fill("${parameters.p}", {"p": float("nan")})


# ---------------------------------------------------------------- render_json_body

INVALID_JSON = [
    ("string-unquoted", '{"m": ${parameters.m}}', {"m": "hello"}),
    ("trailing-comma", '{"m": "${parameters.m}",}', {"m": "x"}),
    ("raw-newline-in-string", '{"m": "${parameters.m}"}', {"m": "a\nb"}),
    ("nan", '{"m": ${parameters.m}}', {"m": "NaN"}),
    ("empty", "${parameters.m}", {"m": ""}),
]


@pytest.mark.parametrize("template, parameters", [c[1:] for c in INVALID_JSON],
                         ids=[c[0] for c in INVALID_JSON])
def test_invalid_json_body(template: str, parameters: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="^Invalid JSON in payload"):
        render_json_body(template, parameters, CREDENTIAL)


def test_invalid_json_error_has_no_credential_value_or_body() -> None:
    template = '{"key": "${credential.openAI_key}", "m": ${parameters.m}}'
    with pytest.raises(TemplateError) as info:
        render_json_body(template, {"m": "not json"}, CREDENTIAL)
    assert SECRET not in info.value.reason
    assert "not json" not in info.value.reason
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_render_json_body_unfilled_says_payload() -> None:
    with pytest.raises(TemplateError, match="not filled in payload: messages"):
        render_json_body('{"m": ${parameters.messages}}', {}, {})


# ---------------------------------------------------------------- placeholders()

PLACEHOLDERS = [
    ("seed-body", '{ "model": "${parameters.model}", "messages": ${parameters.messages} }',
     [("parameters", "model"), ("parameters", "messages")]),
    ("header", "Bearer ${credential.openAI_key}", [("credential", "openAI_key")]),
    ("suffix-and-default", '${parameters.p.toString()} "${parameters.s:-null}" ${parameters.t:-1}',
     [("parameters", "p"), ("parameters", "s"), ("parameters", "t")]),
    ("repeats-kept-in-order", "${parameters.b}${credential.k}${parameters.b}",
     [("parameters", "b"), ("credential", "k"), ("parameters", "b")]),
    ("none", "https://api.openai.com/v1/chat/completions", []),
]


@pytest.mark.parametrize("template, expected", [c[1:] for c in PLACEHOLDERS],
                         ids=[c[0] for c in PLACEHOLDERS])
def test_placeholders(template: str, expected: list[tuple[str, str]]) -> None:
    assert placeholders(template) == expected


def test_nested_values_that_expand_geometrically_are_refused_early() -> None:
    """Each level names the next 20 times: 6 levels from a kilobyte would be 6.4 GB."""
    import time

    from mlstream.wire.templating import MAX_RENDERED_CHARS

    parameters: dict[str, Any] = {f"p{i}": f"${{parameters.p{i + 1}}}" * 20 for i in range(6)}
    parameters["p6"] = "x" * 10
    started = time.monotonic()
    with pytest.raises(TemplateError, match=f"expand to more than {MAX_RENDERED_CHARS} characters"):
        render("${parameters.p0}", parameters, CREDENTIAL, where="payload")
    assert time.monotonic() - started < 30  # a hang guard only: refused long before 6.4 GB


def test_nested_values_are_not_kept_in_the_template_cache() -> None:
    from mlstream.wire.templating import _compile

    _compile.cache_clear()
    value = "unique ${parameters.b} " + "v" * 1000
    assert render("${parameters.a}!", {"a": value, "b": "x"}, CREDENTIAL, where="payload").startswith("unique x")
    assert _compile.cache_info().currsize == 1  # the connector's template only, not the value


@pytest.mark.parametrize("body", [
    '{"a": 1}', '{"a": NaN}', '{"a": -Infinity}', '{"n": 123456789012345678901234567890}',
    '{"s": "\\ud800"}', '{"a": 1} x', '[1, 2,]', '{"a": 1e400}', '"text"', '{"k": "\\u2028"}',
])
def test_the_fast_json_check_accepts_exactly_what_the_strict_stdlib_check_does(body: str) -> None:
    """orjson's check first, the stdlib's (NaN and Infinity refused) when it says no."""
    def reject(name: str):
        raise ValueError(name)

    try:
        json.loads(body, parse_constant=reject)
        expected = True
    except ValueError:
        expected = False
    try:
        render_json_body(body, {}, {})
        got = True
    except TemplateError:
        got = False
    assert got is expected
