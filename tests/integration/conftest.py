"""Fixtures: a real mlstream server and the fake providers, all on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from mlstream.app.compose import Server
from mlstream.settings.server import ServerSettings
from mlstream.testing.fake_bedrock import FakeBedrock
from mlstream.testing.fake_openai import FakeOpenAI

from ..support.clients import Client
from ..support.servers import LOOPBACK_TRUST


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


@pytest.fixture
def client(server: Server) -> Client:
    return Client(server.url)
