"""A JSON client for one server (urllib3, like any user's client), and API keys on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3

from .timeouts import HANG_GUARD


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


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def client_with(url: str, headers: dict[str, str] | None = None) -> Client:
    """A Client whose every request carries ``headers`` (e.g. the API key)."""
    client = Client(url)
    client.http = urllib3.PoolManager(retries=False, timeout=HANG_GUARD, headers=headers or {})
    return client


def assert_401(reply: Any, *, presented: str | None = None) -> dict:
    assert reply.status == 401, (reply.status, reply.body)
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    challenge = reply.headers.get("WWW-Authenticate", "")
    assert "Bearer" in challenge or "Basic" in challenge, reply.headers
    body = reply.body
    assert isinstance(body, dict) and body["status"] == 401, body
    assert body["error"]["type"] == "security_exception", body
    assert isinstance(body["error"]["reason"], str) and body["error"]["reason"], body
    if presented:
        assert presented not in json.dumps(body)
    return body


class EventStreamSerializer:
    """opensearch-py's serializer for text/event-stream answers (the README's "Streaming
    from Python"): the events' data, each parsed."""

    mimetype = "text/event-stream"

    def loads(self, text: str) -> list:
        return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]

    def dumps(self, data: Any) -> str:  # requests are JSON; never called for them
        raise NotImplementedError
