"""Telemetry without sockets: a call in the GenAI conventions' terms (``telemetry.genai``),
when export is on, and that off it costs no import of OpenTelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlstream import telemetry
from mlstream.errors import (ClientGone, EndpointRefused, MLStreamError, RetryCancelled, ShuttingDown, UpstreamError,
                             UpstreamTimeout)
from mlstream.providers import DIALECTS, StreamKind
from mlstream.providers.events import Chunk, Delta, Done, Reasoning
from mlstream.settings.server import ServerSettings
from mlstream.telemetry import genai

from ..support.decoders import feed_all
from ..support.timeouts import SUBPROCESS_HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def facts(url: str, body: object = None, dialect: str | None = None, protocol: str = "http",
          parameters: dict | None = None, stream: bool = False) -> genai.CallFacts:
    return genai.call_facts(url, body, dialect=dialect, protocol=protocol, parameters=parameters or {},
                            stream=stream)


@pytest.mark.parametrize("url, body, dialect, protocol, parameters, expected", [
    ("https://api.openai.com/v1/chat/completions", CHAT, "openai/v1/chat/completions", "http", {},
     ("chat", "openai", "gpt-4o", "api.openai.com", 443)),
    ("https://api.openai.com/v1/completions", {"model": "gpt-3.5-turbo-instruct", "prompt": "x"},
     "openai/v1/completions", "http", {},
     ("text_completion", "openai", "gpt-3.5-turbo-instruct", "api.openai.com", 443)),
    ("https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
     {"messages": []}, "bedrock/converse/claude", "aws_sigv4", {"service_name": "bedrock"},
     ("chat", "aws.bedrock", "anthropic.claude-3-haiku-20240307-v1:0", "bedrock-runtime.us-east-1.amazonaws.com", 443)),
    ("https://api.anthropic.com/v1/messages", {"model": "claude-sonnet-4", "messages": []}, "anthropic/v1/messages",
     "http", {}, ("chat", "anthropic", "claude-sonnet-4", "api.anthropic.com", 443)),
    ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
     {"contents": []}, "gemini/v1beta/generatecontent", "http", {},
     ("generate_content", "gcp.gemini", "gemini-2.0-flash", "generativelanguage.googleapis.com", 443)),
    ("https://runtime.sagemaker.us-west-2.amazonaws.com/endpoints/my-tgi/invocations-response-stream",
     {"inputs": "x"}, "sagemaker/tgi", "aws_sigv4", {"service_name": "sagemaker"},
     ("text_completion", "aws.sagemaker", "my-tgi", "runtime.sagemaker.us-west-2.amazonaws.com", 443)),
    ("https://runtime.sagemaker.us-west-2.amazonaws.com/endpoints/my-lmi/invocations", {"messages": []},
     "sagemaker/lmi", "aws_sigv4", {"service_name": "sagemaker"},
     ("chat", "aws.sagemaker", "my-lmi", "runtime.sagemaker.us-west-2.amazonaws.com", 443)),
    # without a dialect (a call that never streams), the path, the host and the connector say
    ("https://api.openai.com/v1/embeddings", {"model": "text-embedding-3-small", "input": ["a"]}, None, "http", {},
     ("embeddings", "openai", "text-embedding-3-small", "api.openai.com", 443)),
    ("https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.titan-embed-text-v2:0/invoke", {"inputText": "a"},
     None, "aws_sigv4", {"service_name": "bedrock"},
     ("embeddings", "aws.bedrock", "amazon.titan-embed-text-v2:0", "bedrock-runtime.us-east-1.amazonaws.com", 443)),
    ("https://api.cohere.ai/v1/embed", {"texts": ["a"]}, None, "http", {"model": "embed-english-v3.0"},
     ("embeddings", "cohere", "embed-english-v3.0", "api.cohere.ai", 443)),
    ("https://x.openai.azure.com/openai/deployments/my-gpt/chat/completions?api-version=1", {"messages": []}, None,
     "http", {}, ("chat", "azure.ai.openai", "my-gpt", "x.openai.azure.com", 443)),
    # on a host of no provider, the connector's URL path says whose API it is
    ("http://127.0.0.1:8000/v1/embeddings", {"model": "text-embedding-ada-002", "input": ["a"]}, None, "http", {},
     ("embeddings", "openai", "text-embedding-ada-002", "127.0.0.1", 8000)),
    ("http://embed.example.internal/v2/embed", {"texts": ["a"]}, None, "http", {"model": "embed-v4.0"},
     ("embeddings", "cohere", "embed-v4.0", "embed.example.internal", 80)),
    ("http://127.0.0.1:8001/v1beta/models/text-embedding-004:batchEmbedContents", {"requests": []}, None, "http", {},
     ("embeddings", "gcp.gemini", "text-embedding-004", "127.0.0.1", 8001)),
    ("http://127.0.0.1:8080/generate", {"inputs": "x"}, None, "http", {}, ("text_completion", "unknown", None,
                                                                           "127.0.0.1", 8080)),
], ids=["openai-chat", "openai-completions", "bedrock", "anthropic", "gemini", "sagemaker-tgi", "sagemaker-chat",
        "openai-embeddings", "titan-embeddings", "cohere-embed", "azure", "openai-compatible-embeddings",
        "cohere-at-any-host", "gemini-embeddings-at-any-host", "unknown"])
def test_a_call_in_the_conventions_terms(url, body, dialect, protocol, parameters, expected):
    found = facts(url, body, dialect, protocol, parameters)
    assert (found.operation, found.provider, found.request_model, found.server_address, found.server_port) == expected


def test_every_dialect_has_a_provider_of_the_conventions_or_a_documented_one():
    documented = {"openai", "aws.bedrock", "anthropic", "gcp.gemini", "aws.sagemaker"}
    for dialect in DIALECTS:
        assert genai.provider_name(dialect.name, "127.0.0.1", "http", {}) in documented, dialect.name


def test_the_span_name_and_its_attributes_at_start():
    found = facts("https://api.openai.com/v1/chat/completions", {**CHAT, "max_tokens": 9, "temperature": 0.5},
                  "openai/v1/chat/completions", stream=True)
    assert found.span_name == "chat gpt-4o"
    assert found.attributes() == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
        "server.address": "api.openai.com", "server.port": 443, "gen_ai.request.stream": True,
        "gen_ai.request.max_tokens": 9, "gen_ai.request.temperature": 0.5}
    assert facts("http://h/x").span_name == "text_completion"  # no model known


@pytest.mark.parametrize("body, expected", [
    ({"max_tokens": 10, "temperature": 0, "top_p": 1}, {"max_tokens": 10, "temperature": 0.0, "top_p": 1.0}),
    ({"max_completion_tokens": 7}, {"max_tokens": 7}),
    ({"inferenceConfig": {"maxTokens": 5, "temperature": 0.2, "topP": 0.9}},
     {"max_tokens": 5, "temperature": 0.2, "top_p": 0.9}),
    ({"generationConfig": {"maxOutputTokens": 64, "topK": 40}}, {"max_tokens": 64, "top_k": 40.0}),
    ({"inputs": "x", "parameters": {"max_new_tokens": 20, "temperature": 0.7}}, {"max_tokens": 20, "temperature": 0.7}),
    ({"textGenerationConfig": {"maxTokenCount": 30}}, {"max_tokens": 30}),
    ({"max_tokens": True, "temperature": "hot", "top_p": None}, {}),  # not numbers: not recorded
    ({}, {}),
])
def test_the_request_settings_sent(body, expected):
    found = dict(genai.request_settings(body))
    assert found == {f"gen_ai.request.{name}": value for name, value in expected.items()}
    assert all(isinstance(value, int) for name, value in found.items() if name.endswith("max_tokens"))


@pytest.mark.parametrize("answer, expected", [
    ({"id": "chatcmpl-1", "model": "gpt-4o-2024", "choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}]},
     ("chatcmpl-1", "gpt-4o-2024", ("stop", "length"))),
    ({"id": "msg_1", "model": "claude-x", "stop_reason": "end_turn"}, ("msg_1", "claude-x", ("end_turn",))),
    ({"output": {}, "stopReason": "max_tokens"}, (None, None, ("max_tokens",))),
    ({"responseId": "r1", "modelVersion": "gemini-2.0", "candidates": [{"finishReason": "STOP"}]},
     ("r1", "gemini-2.0", ("STOP",))),
    ([{"generated_text": "x"}], (None, None, ())),
    (None, (None, None, ())),
])
def test_a_whole_answers_facts(answer, expected):
    found = genai.answer_facts(answer)
    assert (found.response_id, found.response_model, found.finish_reasons) == expected


@pytest.mark.parametrize("error, expected", [
    (ClientGone("x"), "client_gone"), (RetryCancelled("x"), "client_gone"), (ShuttingDown("x"), "shutting_down"),
    (UpstreamError("x", upstream_status=429), "429"), (UpstreamError("x", kind="connection"), "connection"),
    (UpstreamTimeout("x"), "timeout"), (UpstreamError("x"), "stream"), (EndpointRefused("x"), "EndpointRefused"),
    (MLStreamError("x"), "MLStreamError"),
])
def test_error_types(error, expected):
    assert genai.error_type(error) == expected
    assert expected in genai.ERROR_TYPES or expected.isdigit() or expected[0].isupper()


def test_input_messages_of_each_providers_request():
    openai = {"messages": [{"role": "system", "content": "be brief"},
                           {"role": "user", "content": [{"type": "text", "text": "hi"},
                                                        {"type": "image_url", "image_url": {"url": "data:..."}}]},
                           {"role": "assistant", "content": None, "tool_calls": [
                               {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                           {"role": "tool", "tool_call_id": "c1", "content": "42"}]}
    assert genai.input_messages(openai) == ([
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "hi"}, {"type": "image_url"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": "{}"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "42"}]}], [])
    anthropic = {"system": "be brief", "messages": [{"role": "user", "content": "hi"}]}
    assert genai.input_messages(anthropic) == ([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}],
                                               [{"type": "text", "content": "be brief"}])
    converse = {"system": [{"text": "be brief"}], "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    assert genai.input_messages(converse) == genai.input_messages(anthropic)
    gemini = {"systemInstruction": {"parts": [{"text": "be brief"}]},
              "contents": [{"role": "user", "parts": [{"text": "hi"}]}, {"role": "model", "parts": [{"text": "yo"}]}]}
    assert genai.input_messages(gemini) == (
        [{"role": "user", "parts": [{"type": "text", "content": "hi"}]},
         {"role": "assistant", "parts": [{"type": "text", "content": "yo"}]}],
        [{"type": "text", "content": "be brief"}])
    assert genai.input_messages({"prompt": "complete"}) == (
        [{"role": "user", "parts": [{"type": "text", "content": "complete"}]}], [])
    assert genai.input_messages(None) == ([], [])


def test_output_messages_of_whole_answers_and_of_streams():
    text = [{"type": "text", "content": "hello"}]
    assert genai.output_messages({"choices": [{"message": {"role": "assistant", "content": "hello"},
                                               "finish_reason": "stop"}]}) == [
        {"role": "assistant", "parts": text, "finish_reason": "stop"}]
    assert genai.output_messages({"content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn"}) == [
        {"role": "assistant", "parts": text, "finish_reason": "end_turn"}]
    assert genai.output_messages({"output": {"message": {"content": [{"text": "hello"}]}}, "stopReason": "end_turn"}) \
        == [{"role": "assistant", "parts": text, "finish_reason": "end_turn"}]
    assert genai.output_messages({"candidates": [{"content": {"parts": [{"text": "hello"}]}}]}) == [
        {"role": "assistant", "parts": text, "finish_reason": "unknown"}]
    items = [Reasoning("hm"), Delta("hel"), Delta("lo"),
             Delta({"type": "tool_use", "id": "t", "name": "f", "input": {}})]
    assert genai.streamed_output(items, Done("tool_use")) == [{"role": "assistant", "parts": [
        {"type": "reasoning", "content": "hm"}, {"type": "text", "content": "hello"},
        {"type": "tool_call", "id": "t", "name": "f", "arguments": {}}], "finish_reason": "tool_use"}]
    chunks = [Chunk(json.dumps({"choices": [{"delta": {"content": piece}}]})) for piece in ("hel", "lo")]
    assert genai.streamed_output(chunks, None) == [{"role": "assistant", "parts": text, "finish_reason": "unknown"}]


def test_off_without_an_endpoint_on_with_one(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert telemetry.start(ServerSettings(), environ={}) is None
    assert telemetry.start(ServerSettings(), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": ""}) is None
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    assert telemetry.start(ServerSettings(), environ=disabled) is None
    with pytest.raises(MLStreamError):
        ServerSettings(otel_endpoint="127.0.0.1:4318")  # a URL, like the variable


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=SUBPROCESS_HANG_GUARD, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env})


def test_off_the_server_imports_nothing_of_opentelemetry(tmp_path):
    result = _python(f"""
import sys
from pathlib import Path
from mlstream.app.compose import App
from mlstream.settings.server import ServerSettings
import mlstream.app.cli, mlstream.app.demo
app = App(ServerSettings(port=0, data_dir=Path({str(tmp_path)!r})))  # every part but the sockets
assert app.telemetry is None and app.predictor._telemetry is None
app.close()
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry") or name == "mlstream.telemetry.otel")
print(loaded)
assert not loaded
""")
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_endpoint_without_the_sdk_is_a_clear_error_and_the_variable_alone_a_warning(tmp_path):
    blocked = "import sys; sys.modules['opentelemetry'] = None\n"  # as if mlstream[otel] were not installed
    flag = _python(blocked + "from mlstream import telemetry\nfrom mlstream.settings.server import ServerSettings\n"
                   "telemetry.start(ServerSettings(otel_endpoint='http://127.0.0.1:4318'), environ={})")
    assert flag.returncode == 1 and "pip install 'mlstream[otel]'" in flag.stderr, flag.stderr
    variable = _python(blocked + "import logging; logging.basicConfig()\nfrom mlstream import telemetry\n"
                       "from mlstream.settings.server import ServerSettings\n"
                       "assert telemetry.start(ServerSettings(), environ={'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://x'}) "
                       "is None")
    assert variable.returncode == 0 and "mlstream[otel]" in variable.stderr, variable.stderr


# --- the stream's own id and model, on its Done ---------------------------------------------

def _sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)


OPENAI_CHUNKS = _sse({"id": "chatcmpl-9", "model": "gpt-4o-2024", "choices": [{"delta": {"role": "assistant"}}]},
                     {"id": "chatcmpl-9", "model": "gpt-4o-2024", "choices": [{"delta": {"content": "hi"}}]},
                     {"id": "chatcmpl-9", "model": "gpt-4o-2024", "choices": [{"delta": {}, "finish_reason": "stop"}]},
                     "[DONE]")
ANTHROPIC_EVENTS = _sse({"type": "message_start", "message": {"id": "msg_9", "model": "claude-x", "usage": {}}},
                        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
                        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
                        {"type": "message_stop"})
GEMINI_CHUNKS = _sse({"candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                      "responseId": "r9", "modelVersion": "gemini-2.0"})


@pytest.mark.parametrize("dialect, kind, data, expected", [
    ("openai/v1/chat/completions", "TEXT", OPENAI_CHUNKS, ("chatcmpl-9", "gpt-4o-2024", "stop")),
    ("openai/v1/chat/completions", "RELAY", OPENAI_CHUNKS, ("chatcmpl-9", "gpt-4o-2024", "stop")),
    ("openai/v1/chat/completions", "CHAT", OPENAI_CHUNKS, ("chatcmpl-9", "gpt-4o-2024", "stop")),
    ("anthropic/v1/messages", "TEXT", ANTHROPIC_EVENTS, ("msg_9", "claude-x", "end_turn")),
    ("anthropic/v1/messages", "RELAY", ANTHROPIC_EVENTS, ("msg_9", "claude-x", "end_turn")),
    ("gemini/v1beta/generatecontent", "TEXT", GEMINI_CHUNKS, ("r9", "gemini-2.0", "STOP")),
], ids=["openai", "openai-relay", "openai-chat", "anthropic", "anthropic-relay", "gemini"])
def test_a_streams_done_names_its_response(dialect, kind, data, expected):
    decoder = next(d for d in DIALECTS if d.name == dialect).new_decoder(StreamKind[kind])
    done = feed_all(decoder, data, [len(data) // 2])[-1]
    assert isinstance(done, Done)
    assert (done.response_id, done.response_model, done.finish_reason) == expected
