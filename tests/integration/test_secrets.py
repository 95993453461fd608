"""Credentials at rest and in flight: encrypted in the store, never shown anywhere.

Every secret here is "planted": a distinctive string that must never be found again
outside the provider it is meant for -- not in the SQLite file or its WAL (read as raw
bytes), not in a response, an error, a log line (caplog in-process, stderr of a real
`mlstream serve --log-level DEBUG`) or /metrics.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import socket
import sqlite3
import stat
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from mlstream.errors import MLStreamError
from mlstream.testing.fake_openai import FakeOpenAI

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST, MLSTREAM, clean_env, start_serve, stop_serve
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request

ML = "/_plugins/_ml"
MASTER_KEY_ENV = "MLSTREAM_MASTER_KEY"


def planted(label: str = "") -> str:
    return f"sk-PLANTED-{label}{secrets.token_hex(12)}"


def new_master_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def windows(secret: str, size: int = 8) -> set[str]:
    """Every ``size``-character piece of ``secret``: none may show up anywhere."""
    return {secret[i:i + size] for i in range(len(secret) - size + 1)}


def assert_no_secret(text: str | bytes, *secret_values: str, where: str = "") -> None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    for secret in secret_values:
        assert secret not in text, (where, secret)
        leaked = [piece for piece in windows(secret) if piece in text and "PLANTED" not in piece
                  and not piece.startswith("sk-")]
        assert not leaked and "PLANTED" not in text, (where, leaked, text[:500])


def predict_body() -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES}}


def store_files(data_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(data_dir.iterdir())
            if path.is_file() and path.name != "master.key"}


def serve_fails(data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([*MLSTREAM, "serve", "--port", "0", "--data-dir", str(data_dir)],
                            capture_output=True, text=True, timeout=HANG_GUARD, env=env)
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "listening" not in result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.fixture(autouse=True)
def no_master_key_env(monkeypatch):
    """Each test chooses its master key source itself."""
    monkeypatch.delenv(MASTER_KEY_ENV, raising=False)


@pytest.fixture
def secret() -> str:
    return planted()


@pytest.fixture
def planted_fake(secret) -> Iterator[FakeOpenAI]:
    """A fake provider whose (only) valid key is the planted secret."""
    with FakeOpenAI(api_key=secret) as provider:
        yield provider


class EchoProvider:
    """A provider that answers every call with an error echoing the Authorization header
    and the query string in full (some real providers are that careless). With
    ``status`` 200 the error is an Anthropic ``error`` event inside the stream, after
    ``text_before`` when given."""

    def __init__(self, status: int, text_before: str = "") -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.calls += 1
                message = (f"invalid key {self.headers.get('Authorization')} for {self.path}; "
                           f"x-api-key={self.headers.get('x-api-key')}")
                error = {"message": message, "type": "invalid_request_error"}
                if status == 200:
                    delta = {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": text_before}}
                    events = [("content_block_delta", delta)] if text_before else []
                    events.append(("error", {"type": "error", "error": error}))
                    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
                else:
                    body = json.dumps({"error": error}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if status == 200 else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.calls = 0
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.port = self.http.server_address[1]

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def echo_401() -> Iterator[EchoProvider]:
    provider = EchoProvider(401)
    yield provider
    provider.close()


@pytest.fixture
def echo_500() -> Iterator[EchoProvider]:
    provider = EchoProvider(500)
    yield provider
    provider.close()


def echo_connector(port: int, secret: str) -> dict[str, Any]:
    return {
        "name": "echo", "protocol": "http",
        "parameters": {"endpoint": f"127.0.0.1:{port}", "model": "m"},
        "credential": {"openAI_key": secret},
        "actions": [{
            "action_type": "predict", "method": "POST",
            "url": "http://${parameters.endpoint}/v1/chat/completions?key=${credential.openAI_key}",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}",
                        "x-api-key": "${credential.openAI_key}"},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sigv4_connector(access_key: str, secret_key: str) -> dict[str, Any]:
    return {
        "name": "Amazon Bedrock Converse", "protocol": "aws_sigv4",
        "credential": {"access_key": access_key, "secret_key": secret_key},
        "parameters": {"region": "us-east-1", "service_name": "bedrock",
                       "model": "anthropic.claude-3-haiku-20240307-v1:0"},
        "actions": [{
            "action_type": "predict", "method": "POST", "headers": {"content-type": "application/json"},
            "url": "https://bedrock-runtime.${parameters.region}.amazonaws.com/model/${parameters.model}/converse",
            "request_body": "{ \"messages\": [ { \"role\": \"user\", \"content\": [ { \"text\": \"${parameters.inputs}\" } ] } ] }",
        }],
    }


# --- at rest ----------------------------------------------------------------------------

def test_neither_the_store_nor_its_wal_holds_a_credential(make_server, tmp_path, planted_fake, secret):
    data_dir = tmp_path / "data"
    server = make_server()
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(planted_fake))
    model_id = client.register(connector_id)

    inline_secret = planted("inline")
    inline = openai_connector(planted_fake)
    inline["credential"] = {"openAI_key": inline_secret}
    client.ok("POST", f"{ML}/models/_register", {"name": "inline", "function_name": "remote",
                                                 "connector": inline})
    updated_secret = planted("updated")
    other_id = client.create_connector(openai_connector(planted_fake))
    client.ok("PUT", f"{ML}/connectors/{other_id}", {"credential": {"openAI_key": updated_secret}})
    access_key, secret_key = planted("access"), planted("awssecret")
    client.create_connector(sigv4_connector(access_key, secret_key))

    # the credential is really there: the provider gets it
    assert client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())["inference_results"]
    assert planted_fake.stats.requests[-1].headers["authorization"] == f"Bearer {secret}"

    every_secret = (secret, inline_secret, updated_secret, access_key, secret_key)
    files = store_files(data_dir)
    assert {"mlstream.db", "mlstream.db-wal"} <= set(files) and files["mlstream.db-wal"], sorted(files)
    for name, raw in files.items():
        for value in every_secret:
            assert value.encode() not in raw, (name, value)
            assert value.split("PLANTED-")[1].encode() not in raw, (name, value)

    server.stop(drain_timeout=0)  # checkpoints the WAL into the database
    for name, raw in store_files(data_dir).items():
        for value in every_secret:
            assert value.encode() not in raw, (name, value)


def test_the_master_key_file_is_created_with_mode_0600_and_reused(make_server, tmp_path, planted_fake):
    data_dir = tmp_path / "data"
    server = make_server()
    key_file = data_dir / "master.key"
    assert key_file.exists()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(base64.b64decode(key_file.read_text().strip(), validate=True)) == 32
    content = key_file.read_bytes()
    model_id = Client(server.url).model_for(openai_connector(planted_fake))
    server.stop(drain_timeout=0)

    # a restart uses the same file, untouched, and decrypts what was stored
    client = Client(make_server().url)
    assert key_file.read_bytes() == content
    assert client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())["inference_results"]


def test_the_environment_master_key_creates_no_file_and_wins_over_one(make_server, tmp_path, monkeypatch,
                                                                       planted_fake):
    data_dir = tmp_path / "data"
    monkeypatch.setenv(MASTER_KEY_ENV, new_master_key())
    server = make_server()
    model_id = Client(server.url).model_for(openai_connector(planted_fake))
    assert not (data_dir / "master.key").exists()
    server.stop(drain_timeout=0)

    # a key file with another key appears: the environment still wins
    (data_dir / "master.key").write_text(new_master_key() + "\n")
    (data_dir / "master.key").chmod(0o600)
    client = Client(make_server().url)
    assert client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())["inference_results"]
    assert len(planted_fake.stats.requests) == 1

    # without the environment the file's (wrong) key is refused at start
    monkeypatch.delenv(MASTER_KEY_ENV)
    with pytest.raises(MLStreamError, match="(?i)master key"):
        make_server()


@pytest.mark.parametrize("source", ["environment", "file"])
def test_a_different_master_key_stops_serve_at_start_up(make_server, tmp_path, monkeypatch, planted_fake,
                                                         source):
    data_dir = tmp_path / "data"
    first_key, second_key = new_master_key(), new_master_key()
    env = clean_env()
    if source == "environment":
        monkeypatch.setenv(MASTER_KEY_ENV, first_key)
        env[MASTER_KEY_ENV] = second_key
    server = make_server()
    Client(server.url).model_for(openai_connector(planted_fake))
    server.stop(drain_timeout=0)
    if source == "file":
        first_key = (data_dir / "master.key").read_text().strip()
        (data_dir / "master.key").write_text(second_key + "\n")

    result = serve_fails(data_dir, env)
    assert "master key" in result.stderr.lower(), result.stderr
    assert MASTER_KEY_ENV in result.stderr, result.stderr
    assert first_key not in result.stderr and second_key not in result.stderr
    assert planted_fake.stats.requests == []


@pytest.mark.parametrize("value", [
    "not base64 at all!",
    base64.b64encode(os.urandom(16)).decode(),   # AES-128 sized: too short
    base64.b64encode(os.urandom(33)).decode(),
    os.urandom(32).hex(),                        # hex, not base64: 48 bytes once decoded
])
def test_an_invalid_master_key_in_the_environment_fails_clearly(tmp_path, value):
    data_dir = tmp_path / "data"
    result = serve_fails(data_dir, {**clean_env(), MASTER_KEY_ENV: value})
    assert MASTER_KEY_ENV in result.stderr, result.stderr
    assert value not in result.stderr
    assert not (data_dir / "master.key").exists()


def test_a_credential_that_fails_to_decrypt_is_never_sent(make_server, tmp_path, planted_fake, secret, caplog):
    data_dir = tmp_path / "data"
    server = make_server()
    model_id = Client(server.url).model_for(openai_connector(planted_fake))
    server.stop(drain_timeout=0)

    # someone with write access to the database swaps one bit of the sealed credential
    with sqlite3.connect(data_dir / "mlstream.db") as db:
        (record_id, sealed), = db.execute("SELECT id, secret FROM connector").fetchall()
        flipped = sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]
        db.execute("UPDATE connector SET secret = ? WHERE id = ?", (flipped, record_id))
    db.close()

    client = Client(make_server().url)  # the master key itself is still right: it starts
    for path, body in [(f"{ML}/models/{model_id}/_predict", predict_body()),
                       (f"{ML}/models/{model_id}/_predict/stream", stream_body())]:
        reply = client.call("POST", path, body)
        assert reply.status >= 400 and reply.status != 200, reply.body
        assert isinstance(reply.body, dict) and reply.body["status"] == reply.status, reply.body
        assert_no_secret(json.dumps(reply.body), secret)
    assert planted_fake.stats.requests == []
    assert_no_secret(caplog.text, secret)


# --- never in a response ----------------------------------------------------------------

def test_no_resource_response_shows_a_credential(client, planted_fake, secret):
    connector_id = client.create_connector(openai_connector(planted_fake))
    inline_secret = planted("inline")
    inline = openai_connector(planted_fake)
    inline["credential"] = {"openAI_key": inline_secret}
    inline_model = client.ok("POST", f"{ML}/models/_register?deploy=true",
                             {"name": "inline", "function_name": "remote", "connector": inline})["model_id"]
    model_id = client.register(connector_id)
    seen = [
        client.ok("GET", f"{ML}/connectors/{connector_id}"),
        client.ok("POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}}),
        client.ok("GET", f"{ML}/connectors/_search"),
        client.ok("PUT", f"{ML}/connectors/{connector_id}", {"description": "changed"}),
        client.ok("GET", f"{ML}/connectors/{connector_id}"),
        client.ok("GET", f"{ML}/models/{inline_model}"),
        client.ok("GET", f"{ML}/models/{model_id}"),
        client.ok("POST", f"{ML}/models/_search", {"query": {"match_all": {}}}),
        # the inline connector's key is not the provider's: a 401 that echoes it masked
        client.call("POST", f"{ML}/models/{inline_model}/_predict", predict_body()).body,
        client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body()),
        client.ok("GET", "/_cluster/settings?include_defaults=true"),
    ]
    streamed = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert streamed.status == 200
    for document in seen:
        assert_no_secret(json.dumps(document), secret, inline_secret)
    assert_no_secret(streamed.body, secret, inline_secret)

    # a search cannot be used as an oracle for the credential either
    for query in ({"exists": {"field": "credential"}}, {"exists": {"field": "credential.openAI_key"}},
                  {"term": {"credential.openAI_key": secret}}, {"match": {"credential.openAI_key": secret}}):
        for kind in ("connectors", "models"):
            reply = client.call("POST", f"{ML}/{kind}/_search", {"query": query})
            assert reply.status in (200, 400), reply.body
            if reply.status == 200:
                assert reply.body["hits"]["total"]["value"] == 0, (query, reply.body)
            assert_no_secret(json.dumps(reply.body), secret, inline_secret)


def test_an_upstream_401_that_echoes_part_of_the_key_shows_none_of_it(client, secret):
    with FakeOpenAI(api_key="sk-the-real-key-0000") as provider:  # the planted key is wrong here
        model_id = client.model_for(openai_connector(provider) | {"credential": {"openAI_key": secret}})
        predict = client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
        stream = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                             json.dumps(stream_body()).encode())
        assert [r.headers["authorization"] for r in provider.stats.requests] == [f"Bearer {secret}"] * 2
    assert predict.status == 401 and predict.body["status"] == 401, predict.body
    assert stream.status == 401, stream.body
    assert_no_secret(json.dumps(predict.body), secret)
    assert_no_secret(stream.body, secret)


@pytest.mark.parametrize("echo", ["echo_401", "echo_500"])
def test_a_provider_error_echoing_the_whole_key_is_redacted(client, secret, echo, request):
    provider: EchoProvider = request.getfixturevalue(echo)
    model_id = client.model_for(echo_connector(provider.port, secret))
    predict = client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    stream = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                         json.dumps(stream_body()).encode())
    assert provider.calls == 2
    assert predict.status == (401 if echo == "echo_401" else 502), predict.body
    assert predict.body["error"]["reason"], predict.body
    assert_no_secret(json.dumps(predict.body), secret)
    assert stream.status == predict.status, stream.body
    assert_no_secret(stream.body, secret)


@pytest.mark.parametrize("text_before", ["", "Hello"])
def test_a_provider_error_event_inside_a_200_stream_is_redacted(client, secret, text_before):
    provider = EchoProvider(200, text_before)
    try:
        connector = echo_connector(provider.port, secret)
        connector["actions"][0]["url"] = "http://${parameters.endpoint}/v1/messages?key=${credential.openAI_key}"
        model_id = client.model_for(connector)
        body = stream_body(_llm_interface="anthropic/v1/messages")
        stream = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                             json.dumps(body).encode())
    finally:
        provider.close()
    assert provider.calls == 1
    assert b"invalid key Bearer" in stream.body and b"***" in stream.body, stream.body
    assert_no_secret(stream.body, secret)


def test_connection_errors_do_not_show_a_key_carried_in_the_url(client, secret):
    model_id = client.model_for(echo_connector(closed_port(), secret))
    predict = client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    stream = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                         json.dumps(stream_body()).encode())
    assert predict.status == 502 and stream.status == 502, (predict.body, stream.body)
    assert_no_secret(json.dumps(predict.body), secret)
    assert_no_secret(stream.body, secret)


def test_template_errors_and_metrics_do_not_show_a_credential(client, planted_fake, secret):
    connector = openai_connector(planted_fake)
    connector["actions"][0]["request_body"] = (
        '{ "model": "${parameters.model}", "user": "${credential.openAI_key}", "messages": ${parameters.messages} }')
    model_id = client.model_for(connector)
    # (A quote in a string parameter no longer breaks the body: it is JSON-escaped, as
    # ml-commons does; text that is neither JSON nor fit for a string still does.)
    for parameters in ({"messages": "[broken"}, {}, {"messages": "{\"role\": }"}):
        reply = client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": parameters})
        assert reply.status == 400, reply.body
        assert_no_secret(json.dumps(reply.body), secret)
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    metrics = client.call("GET", "/metrics")
    assert metrics.status == 200
    assert_no_secret(metrics.body, secret)


# --- never in a log ---------------------------------------------------------------------

def exercise_every_path(client: Client, fake: FakeOpenAI, secret: str, echo_port: int) -> None:
    """Success, upstream refusals, a key in the URL, a connection error, template errors."""
    model_id = client.model_for(openai_connector(fake))
    client.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                       json.dumps(stream_body()).encode()).status == 200
    wrong = openai_connector(fake) | {"credential": {"openAI_key": secret + "-wrong"}}
    wrong_model = client.model_for(wrong)
    assert client.call("POST", f"{ML}/models/{wrong_model}/_predict", predict_body()).status == 401
    echo_model = client.model_for(echo_connector(echo_port, secret))
    assert client.call("POST", f"{ML}/models/{echo_model}/_predict", predict_body()).status == 401
    assert raw_request(client.base_url, "POST", f"{ML}/models/{echo_model}/_predict/stream",
                       json.dumps(stream_body()).encode()).status == 401
    dead_model = client.model_for(echo_connector(closed_port(), secret))
    assert client.call("POST", f"{ML}/models/{dead_model}/_predict", predict_body()).status == 502
    assert client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": "[x"}}).status == 400
    client.call("PUT", f"{ML}/connectors/{client.create_connector(openai_connector(fake))}",
                {"credential": {"openAI_key": secret + "-rotated"}})
    client.call("GET", "/metrics")


def test_no_log_record_of_the_server_shows_a_credential(client, planted_fake, secret, echo_401, caplog):
    caplog.set_level(logging.DEBUG)
    exercise_every_path(client, planted_fake, secret, echo_401.port)
    server_records = [record for record in caplog.records if not record.name.startswith("mlstream.testing")]
    assert server_records  # the access log at least
    for record in server_records:
        text = f"{record.getMessage()} {record.__dict__} {record.exc_text or ''}"
        assert_no_secret(text, secret, where=record.name)
    assert not [r for r in server_records if r.levelno >= logging.ERROR], caplog.text


def test_the_log_of_a_real_serve_at_debug_level_shows_no_credential(tmp_path, planted_fake, secret, echo_401):
    process, url = start_serve(tmp_path / "data", "--log-level", "DEBUG", "--trusted-endpoint", LOOPBACK_TRUST,
                               "--allow-private-endpoints", "--drain-timeout", "1")
    try:
        exercise_every_path(Client(url), planted_fake, secret, echo_401.port)
    finally:
        stderr = stop_serve(process)
    assert "DEBUG" in stderr and "/_predict" in stderr, stderr[-2000:]  # it did log, verbosely
    assert_no_secret(stderr, secret, where="serve stderr")
    assert "Traceback" not in stderr


def test_print_config_hides_the_master_key(tmp_path):
    key = new_master_key()
    result = subprocess.run([*MLSTREAM, "serve", "--print-config", "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, timeout=HANG_GUARD,
                            env={**clean_env(), MASTER_KEY_ENV: key})
    assert result.returncode == 0, result.stderr
    assert MASTER_KEY_ENV in result.stdout
    assert key not in result.stdout + result.stderr
