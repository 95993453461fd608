"""A fake Anthropic Messages API on loopback that speaks the real wire protocol.

``POST /v1/messages`` answers as Anthropic does: the key (``x-api-key``, or a bearer
``Authorization`` as newer SDKs send it) and ``anthropic-version`` are checked, errors are ``{"type": "error", "error":
{"type", "message"}}`` with Anthropic's statuses (529 for ``overloaded_error``), and
``"stream": true`` answers are SSE events (``message_start``, ``content_block_*``,
``ping``, ``message_delta``, ``message_stop``, or an ``error`` event). The official
``anthropic`` SDK works against it unchanged (``tests/integration/test_fake_anthropic.py``)::

    with FakeAnthropic() as fake:
        client = anthropic.Anthropic(api_key=fake.api_key, base_url=fake.url)
        client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=[...],
                               extra_body={"fake": {"chunks": 3}})

Behaviour per request: ``scripted.Scenario`` knobs from the body's top-level ``fake``
object or ``X-Fake-*`` headers (see :mod:`mlstream.testing.scripted`).
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from .fake_server import BadBody, FakeServer, json_or_none, serve_until_signalled
from .scripted import (DEFAULT_TEXT, Plan, RecordedRequest, Scenario, ScriptedHandler,
                                       ScriptedStats, build_plan, fake_tokens, reasoning_words, scenario_for,
                                       tool_input_fragments)

__all__ = ["DEFAULT_TEXT", "FakeAnthropic", "Scenario", "connector", "fake_tokens"]

logger = logging.getLogger(__name__)

API_VERSION = "2023-06-01"
SIGNATURE = "fake-thinking-signature"
# Anthropic's error types and the status each is answered with.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
_STATUS_ERROR = {status: kind for kind, status in ERROR_STATUS.items()}
_MESSAGES = {
    "overloaded_error": "Overloaded",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit (fake, as asked)",
    "api_error": "Internal server error (fake, as asked)",
}


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": f"req_{uuid.uuid4().hex[:24]}"}


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _input_tokens(body: Mapping[str, Any]) -> int:
    """A deterministic stand-in for token counting: words of text in messages and system."""
    texts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        texts.append(system)
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [block["text"] for block in content
                      if isinstance(block, Mapping) and isinstance(block.get("text"), str)]
    return max(1, sum(len(text.split()) for text in texts))


def _output_tokens(scenario: Scenario) -> int:
    tool = scenario.tool_use
    return (len(fake_tokens(scenario)) + len(reasoning_words(scenario))
            + (len(tool_input_fragments(tool["input"])) if tool else 0))


def _content_blocks(scenario: Scenario) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if scenario.reasoning is not None:
        blocks.append({"type": "thinking", "thinking": scenario.reasoning, "signature": SIGNATURE})
    blocks.append({"type": "text", "text": "".join(fake_tokens(scenario))})
    tool = scenario.tool_use
    if tool is not None:
        blocks.append({"type": "tool_use", "id": tool["id"], "name": tool["name"], "input": tool["input"]})
    return blocks


def _stop_reason(scenario: Scenario) -> str:
    return "tool_use" if scenario.tool_use is not None else "end_turn"


def _plan(scenario: Scenario, model: str, input_tokens: int) -> Plan:
    events: list[tuple[bytes, bool]] = [(_event("message_start", {"type": "message_start", "message": {
        "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}), False)]

    def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]], text: bool) -> None:
        events.append((_event("content_block_start", {"type": "content_block_start", "index": index,
                                                      "content_block": start}), False))
        events.extend((_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                      "delta": delta}), text) for delta in deltas)
        events.append((_event("content_block_stop", {"type": "content_block_stop", "index": index}), False))

    index = 0
    if scenario.reasoning is not None:
        block(0, {"type": "thinking", "thinking": ""},
              [{"type": "thinking_delta", "thinking": word} for word in reasoning_words(scenario)]
              + [{"type": "signature_delta", "signature": SIGNATURE}], False)
        index = 1
    events.append((_event("ping", {"type": "ping"}), False))
    block(index, {"type": "text", "text": ""},
          [{"type": "text_delta", "text": token} for token in fake_tokens(scenario)], True)
    tool = scenario.tool_use
    if tool is not None:
        block(index + 1, {"type": "tool_use", "id": tool["id"], "name": tool["name"], "input": {}},
              [{"type": "input_json_delta", "partial_json": part} for part in tool_input_fragments(tool["input"])],
              False)
    events.append((_event("message_delta", {"type": "message_delta",
                                            "delta": {"stop_reason": _stop_reason(scenario), "stop_sequence": None},
                                            "usage": {"output_tokens": _output_tokens(scenario)}}), False))
    events.append((_event("message_stop", {"type": "message_stop"}), False))
    kind = scenario.error_type or "overloaded_error"
    error = _event("error", _error(kind, _MESSAGES.get(kind, f"{kind} (fake, as asked)")))
    return build_plan(scenario, events, error)


class _Handler(ScriptedHandler):
    server_version = "FakeAnthropic/1.0"
    fake: FakeAnthropic

    def serve(self) -> None:
        try:
            raw = self.read_body()
        except BadBody as error:
            self.send_json(error.status, _error("invalid_request_error", error.reason))
            return
        headers = self.lowered_headers()
        body = json_or_none(raw)
        self.fake.stats._record(RecordedRequest(self.command, self.path, headers, body, raw))
        path = self.path.split("?", 1)[0]
        if path != "/v1/messages" or self.command != "POST":
            self.send_json(404, _error("not_found_error", f"Not found: {self.command} {path}"))
            return
        # The key as x-api-key (the documented header) or a bearer token (newer SDKs).
        bearer = headers.get("authorization", "")
        key = headers.get("x-api-key") or (bearer[7:].strip() if bearer.lower().startswith("bearer ") else "")
        if not secrets.compare_digest(key.encode(), self.fake.api_key.encode()):
            self.fake.stats._add(auth_failures=1)
            self.send_json(401, _error("authentication_error", "invalid x-api-key"))
            return
        if not headers.get("anthropic-version"):
            self.send_json(400, _error("invalid_request_error", "anthropic-version: header is required"))
            return
        if not isinstance(body, dict):
            self.send_json(400, _error("invalid_request_error", "The request body is not valid JSON."))
            return
        for field, kind in (("model", str), ("max_tokens", int), ("messages", list)):
            if not isinstance(body.get(field), kind):
                self.send_json(400, _error("invalid_request_error", f"{field}: Field required"))
                return
        try:
            scenario = scenario_for(self.fake.default_scenario, body.get("fake"), headers)
        except ValueError as error:
            self.send_json(400, _error("invalid_request_error", f"fake scenario: {error}"))
            return
        self.pause(scenario.first_delay_ms / 1000.0)
        if scenario.status is not None:
            kind = _STATUS_ERROR.get(scenario.status, "api_error")
            extra = {"retry-after": str(scenario.retry_after)} if scenario.status in (429, 529) else None
            self.send_json(scenario.status, _error(kind, _MESSAGES.get(kind, f"{kind} (fake, as asked)")), extra)
            return
        if body.get("stream") is True:
            self.send_plan(_plan(scenario, body["model"], _input_tokens(body)), "text/event-stream",
                           {"request-id": f"req_{uuid.uuid4().hex[:24]}"})
        else:
            self._message(scenario, body)

    def _message(self, scenario: Scenario, body: Mapping[str, Any]) -> None:
        fault = self.whole_answer_fault(scenario)
        if fault == "cut":
            return
        if fault == "error":
            kind = scenario.error_type or "overloaded_error"
            self.send_json(ERROR_STATUS.get(kind, 500), _error(kind, _MESSAGES.get(kind, f"{kind} (fake, as asked)")))
            return
        self.send_json(200, {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": body["model"],
            "content": _content_blocks(scenario), "stop_reason": _stop_reason(scenario), "stop_sequence": None,
            "usage": {"input_tokens": _input_tokens(body), "output_tokens": _output_tokens(scenario)}})


class FakeAnthropic(FakeServer):
    """An Anthropic API on loopback; ``default_scenario`` shapes answers that say nothing
    else, ``stats`` records what happened (see :class:`FakeServer` for the lifecycle)."""

    handler = _Handler
    stats: ScriptedStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, api_key: str = "sk-ant-fake-0123456789") -> None:
        self.api_key = api_key
        self.default_scenario = Scenario()
        super().__init__(host=host, port=port, stats=ScriptedStats())


def connector(url: str, api_key: str, **knobs: Any) -> dict[str, Any]:
    """The Anthropic connector of docs/providers.md, at ``url``, with ``parameters.fake`` (the
    scenario's knobs, ``knobs`` by default) passed through in the body."""
    return {
        "name": "Anthropic Claude",
        "description": "The Anthropic Messages API",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": url.removeprefix("http://"), "model": "claude-sonnet-4-5",
                       "max_tokens": 1024, "fake": knobs},
        "credential": {"anthropic_key": api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "http://${parameters.endpoint}/v1/messages",
            "headers": {"x-api-key": "${credential.anthropic_key}", "anthropic-version": API_VERSION,
                        "content-type": "application/json"},
            "request_body": '{ "model": "${parameters.model}", "max_tokens": ${parameters.max_tokens}, '
                            '"messages": [{"role": "user", "content": "${parameters.inputs}"}], '
                            '"fake": ${parameters.fake} }',
        }],
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m mlstream.testing.fake_anthropic``: serve until SIGINT/SIGTERM; the URL on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default="sk-ant-fake-0123456789")
    args = parser.parse_args(argv)
    return serve_until_signalled(FakeAnthropic(port=args.port, api_key=args.api_key))


if __name__ == "__main__":
    sys.exit(main())
