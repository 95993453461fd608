"""Fixtures: a real mlstream server and the fake providers, all on 127.0.0.1."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import urllib3

from mlstream.server.app import Server
from mlstream.settings import ServerSettings
from mlstream.testing.fake_bedrock import FakeBedrock
from mlstream.testing.fake_openai import FakeOpenAI

# helpers.py holds plain helpers with asserts in them; rewrite those like a test module's.
pytest.register_assert_rewrite("tests.integration.helpers")

LOOPBACK_TRUST = r"^http://127\.0\.0\.1:\d+/.*$"
HANG_GUARD = 20.0  # seconds: only ever reached when something is broken

SEED_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Can you summarize Prince Hamlet of William Shakespeare in around 1000 words?"},
]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as provider:
        yield provider


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    """A fresh fake Bedrock runtime (SigV4 checked) per test."""
    with FakeBedrock() as fake:
        yield fake


@pytest.fixture
def token_bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock(session_token="FwoGZXIvYXdzEFAKETOKEN") as fake:
        yield fake


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(**overrides: Any) -> Server:
        options: dict[str, Any] = dict(port=0, data_dir=tmp_path / "data", trusted_endpoints=(LOOPBACK_TRUST,),
                                       allow_private_endpoints=True, drain_timeout=0.0)
        options.update(overrides)
        server = Server(ServerSettings(**options)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(drain_timeout=0)


@pytest.fixture
def server(make_server: Callable[..., Server]) -> Server:
    return make_server()


@dataclass
class Reply:
    status: int
    body: Any
    headers: Any


class Client:
    """A thin JSON client for one server (urllib3, like any user's client)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = urllib3.PoolManager(retries=False, timeout=HANG_GUARD)

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Reply:
        if body is not None and "body" not in kwargs:
            kwargs["json"] = body
        response = self.http.request(method, self.base_url + path, **kwargs)
        try:
            data = json.loads(response.data) if response.data else None
        except ValueError:
            data = response.data.decode("utf-8", "replace")
        return Reply(response.status, data, response.headers)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        reply = self.call(method, path, body)
        assert reply.status == 200, (reply.status, reply.body)
        return reply.body

    def create_connector(self, body: dict[str, Any]) -> str:
        return self.ok("POST", "/_plugins/_ml/connectors/_create", body)["connector_id"]

    def register(self, connector_id: str, deploy: bool = True, **extra: Any) -> str:
        query = "?deploy=true" if deploy else ""
        body = {"name": "openai gpt 3.5 turbo", "function_name": "remote",
                "description": "openai model", "connector_id": connector_id, **extra}
        return self.ok("POST", f"/_plugins/_ml/models/_register{query}", body)["model_id"]

    def model_for(self, connector: dict[str, Any]) -> str:
        return self.register(self.create_connector(connector))


@pytest.fixture
def client(server: Server) -> Client:
    return Client(server.url)


def openai_connector(fake: FakeOpenAI, *, model: str = "gpt-3.5-turbo", path: str = "/v1/chat/completions",
                     headers: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """The seed's connector body, verbatim apart from the endpoint (the fake)."""
    body = {
        "name": "OpenAI Chat Connector",
        "description": "The connector to public OpenAI model service for GPT 3.5",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": fake.url.removeprefix("http://"), "model": model},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "http://${parameters.endpoint}" + path,
            "headers": {"Authorization": "Bearer ${credential.openAI_key}", **(headers or {})},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }
    body.update(extra)
    return body


def stream_body(**parameters: Any) -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES, "_llm_interface": "openai/v1/chat/completions",
                           **parameters}}


def open_stream(server, model_id: str, headers: dict[str, str] | None = None) -> tuple[socket.socket, Any]:
    """Start a stream and read up to its first event; returns the socket and its reader."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=HANG_GUARD)
    body = json.dumps(stream_body()).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    sock.sendall(f"POST /_plugins/_ml/models/{model_id}/_predict/stream HTTP/1.1\r\nHost: x\r\n{extra}"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    reader = sock.makefile("rb")
    assert reader.readline().startswith(b"HTTP/1.1 200")
    while reader.readline() != b"\r\n":
        pass
    reader.readline()  # first chunk size
    assert reader.readline().startswith(b"data: ")
    return sock, reader


# --- raw HTTP, to check the exact bytes on the wire ----------------------------------

@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    chunks: list[bytes]      # the HTTP chunks, in order (chunked responses)
    body: bytes              # the whole body, de-chunked
    complete: bool           # the terminating zero-length chunk arrived

    def events(self) -> list[dict[str, Any]]:
        """Every SSE ``data:`` payload, parsed; asserts the exact ``data: <json>\\n\\n`` framing."""
        text = self.body.decode("utf-8")
        blocks = [block for block in text.split("\n\n") if block]
        assert text.endswith("\n\n"), text[-50:]
        events = []
        for block in blocks:
            if block.startswith(":"):
                continue
            assert block.startswith("data: ") and "\n" not in block, block
            events.append(json.loads(block[len("data: "):]))
        return events


def raw_request(url: str, method: str, path: str, body: bytes = b"", *, headers: dict[str, str] | None = None,
                chunked_request: bool = False, timeout: float = HANG_GUARD) -> RawResponse:
    """One request over a fresh socket; reads the response to its end."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
                "Connection: close"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if chunked_request:
            head.append("Transfer-Encoding: chunked")
            payload = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
        else:
            head.append(f"Content-Length: {len(body)}")
            payload = body
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        reader = sock.makefile("rb")
        return read_response(reader)


def read_response(reader: Any) -> RawResponse:
    status_line = reader.readline().decode()
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    chunks: list[bytes] = []
    complete = False
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size_line = reader.readline()
            if not size_line:
                break
            size = int(size_line.strip() or b"0", 16)
            if size == 0:
                reader.readline()
                complete = True
                break
            chunks.append(reader.read(size))
            assert reader.read(2) == b"\r\n"
        body = b"".join(chunks)
    else:
        body = reader.read(int(headers.get("content-length", "0")))
        complete = True
    return RawResponse(status, headers, chunks, body, complete)
