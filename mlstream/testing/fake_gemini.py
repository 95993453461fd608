"""A fake Gemini API (v1beta ``generateContent``) on loopback that speaks the real wire protocol.

``POST /v1beta/models/{model}:generateContent`` (``/v1/`` too) answers one ``GenerateContentResponse``;
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` answers SSE events, each
a whole ``GenerateContentResponse`` (text parts, thought parts, a ``functionCall`` part,
``usageMetadata`` on every event, ``finishReason`` on the last). The key is checked
(``x-goog-api-key`` or ``?key=``); errors are Google's ``{"error": {"code", "message",
"status"}}``. The official ``google-genai`` SDK works against it unchanged
(``tests/integration/test_fake_gemini.py``)::

    with FakeGemini() as fake:
        client = genai.Client(api_key=fake.api_key, http_options={"base_url": fake.url})
        client.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi",
            config={"http_options": {"extra_body": {"fake": {"chunks": 3}}}})

Behaviour per request: ``scripted.Scenario`` knobs from the body's top-level ``fake``
object or ``X-Fake-*`` headers (see :mod:`mlstream.testing.scripted`); ``blocked``
answers a safety block (``"prompt"``: ``promptFeedback.blockReason``; ``"response"``:
``finishReason: SAFETY``). Only ``alt=sse`` streams are served (what the SDKs use).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, unquote

from .fake_server import BadBody, FakeServer, json_or_none, serve_until_signalled
from .scripted import (DEFAULT_TEXT, Plan, RecordedRequest, Scenario, ScriptedHandler,
                                       ScriptedStats, build_plan, fake_tokens, reasoning_words, scenario_for)

__all__ = ["DEFAULT_TEXT", "FakeGemini", "Scenario", "connector", "fake_tokens"]

_ROUTE = re.compile(r"/(?:v1beta|v1)/models/([^/:]+):(generateContent|streamGenerateContent)")
# Google's status names and their HTTP codes.
ERROR_CODES = {"INVALID_ARGUMENT": 400, "PERMISSION_DENIED": 403, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429,
               "INTERNAL": 500, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504}
_CODE_STATUS = {code: name for name, code in ERROR_CODES.items()}
_MESSAGES = {"UNAVAILABLE": "The model is overloaded. Please try again later.",
             "RESOURCE_EXHAUSTED": "You exceeded your current quota (fake, as asked)."}
_SAFETY_RATINGS = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]


def _error(status: str, message: str | None = None) -> dict[str, Any]:
    return {"error": {"code": ERROR_CODES.get(status, 500), "status": status,
                      "message": message or _MESSAGES.get(status, f"{status} (fake, as asked)")}}


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\r\n\r\n"


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    """A deterministic stand-in for token counting: words of text in contents and systemInstruction."""
    texts: list[str] = []
    contents = body.get("contents")
    if isinstance(contents, str):
        contents = [{"parts": [{"text": contents}]}]
    system = body.get("systemInstruction")
    for content in [*(contents if isinstance(contents, list) else []), *([system] if system else [])]:
        parts = content.get("parts") if isinstance(content, Mapping) else None
        texts += [part["text"] for part in parts or []
                  if isinstance(part, Mapping) and isinstance(part.get("text"), str)]
    return max(1, sum(len(text.split()) for text in texts))


def _usage(prompt: int, candidates: int) -> dict[str, int]:
    return {"promptTokenCount": prompt, "candidatesTokenCount": candidates, "totalTokenCount": prompt + candidates}


def _function_call(tool: Mapping[str, Any]) -> dict[str, Any]:
    return {"functionCall": {"id": tool["id"], "name": tool["name"], "args": tool["input"]}}


def _finish(scenario: Scenario) -> str:
    return "SAFETY" if scenario.blocked == "response" else "STOP"


class _Response:
    """The GenerateContentResponse pieces of one scenario."""

    def __init__(self, scenario: Scenario, model: str, prompt: int) -> None:
        self.scenario, self.model, self.prompt = scenario, model, prompt
        self.response_id = uuid.uuid4().hex[:20]
        self.output = (len(fake_tokens(scenario)) + len(reasoning_words(scenario))
                       + (1 if scenario.tool_use else 0))

    def envelope(self, parts: list[dict[str, Any]], produced: int, finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
            if finish == "SAFETY":
                candidate["safetyRatings"] = _SAFETY_RATINGS
        return {"candidates": [candidate], "usageMetadata": _usage(self.prompt, produced),
                "modelVersion": self.model, "responseId": self.response_id}

    def blocked_prompt(self) -> dict[str, Any]:
        return {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": _SAFETY_RATINGS},
                "usageMetadata": {"promptTokenCount": self.prompt, "totalTokenCount": self.prompt},
                "modelVersion": self.model, "responseId": self.response_id}

    def whole(self) -> dict[str, Any]:
        if self.scenario.blocked == "prompt":
            return self.blocked_prompt()
        parts: list[dict[str, Any]] = []
        if self.scenario.reasoning is not None:
            parts.append({"text": self.scenario.reasoning, "thought": True})
        parts.append({"text": "".join(fake_tokens(self.scenario))})
        if self.scenario.tool_use is not None:
            parts.append(_function_call(self.scenario.tool_use))
        return self.envelope(parts, self.output, _finish(self.scenario))

    def plan(self) -> Plan:
        scenario = self.scenario
        kind = scenario.error_type or "UNAVAILABLE"
        error = _sse(_error(kind))
        if scenario.blocked == "prompt":
            return build_plan(scenario, [(_sse(self.blocked_prompt()), False)], error)
        events: list[tuple[bytes, bool]] = []
        produced = 0
        for word in reasoning_words(scenario):
            produced += 1
            events.append((_sse(self.envelope([{"text": word, "thought": True}], produced)), False))
        for token in fake_tokens(scenario):
            produced += 1
            events.append((_sse(self.envelope([{"text": token}], produced)), True))
        if scenario.tool_use is not None:
            produced += 1
            events.append((_sse(self.envelope([_function_call(scenario.tool_use)], produced)), False))
        events.append((_sse(self.envelope([{"text": ""}], produced, _finish(scenario))), False))
        return build_plan(scenario, events, error)


class _Handler(ScriptedHandler):
    server_version = "FakeGemini/1.0"
    fake: FakeGemini

    def serve(self) -> None:
        try:
            raw = self.read_body()
        except BadBody as error:
            self.send_json(error.status, _error("INVALID_ARGUMENT", error.reason))
            return
        headers = self.lowered_headers()
        body = json_or_none(raw)
        self.fake.stats._record(RecordedRequest(self.command, self.path, headers, body, raw))
        path, _, query = self.path.partition("?")
        params = parse_qs(query)
        route = _ROUTE.fullmatch(unquote(path))
        if route is None or self.command != "POST":
            self.send_json(404, _error("NOT_FOUND", f"Not found: {self.command} {path}"))
            return
        key = headers.get("x-goog-api-key") or (params.get("key") or [""])[0]
        if not secrets.compare_digest(key.encode(), self.fake.api_key.encode()):
            self.fake.stats._add(auth_failures=1)
            self.send_json(400, _error("INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."))
            return
        if not isinstance(body, dict) or not body.get("contents"):
            self.send_json(400, _error("INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not "
                                                           "specified"))
            return
        stream = route[2] == "streamGenerateContent"
        if stream and params.get("alt") != ["sse"]:
            self.send_json(400, _error("INVALID_ARGUMENT", "this fake streams with alt=sse only"))
            return
        try:
            scenario = scenario_for(self.fake.default_scenario, body.get("fake"), headers)
        except ValueError as error:
            self.send_json(400, _error("INVALID_ARGUMENT", f"fake scenario: {error}"))
            return
        self.pause(scenario.first_delay_ms / 1000.0)
        if scenario.status is not None:
            status = _CODE_STATUS.get(scenario.status, "INTERNAL")
            payload = _error(status)
            payload["error"]["code"] = scenario.status
            extra = {"Retry-After": str(scenario.retry_after)} if scenario.status == 429 else None
            self.send_json(scenario.status, payload, extra)
            return
        response = _Response(scenario, route[1], _prompt_tokens(body))
        if stream:
            self.send_plan(response.plan(), "text/event-stream")
            return
        fault = self.whole_answer_fault(scenario)
        if fault == "error":
            kind = scenario.error_type or "UNAVAILABLE"
            self.send_json(ERROR_CODES.get(kind, 500), _error(kind))
        elif fault is None:
            self.send_json(200, response.whole())


class FakeGemini(FakeServer):
    """A Gemini API on loopback; ``default_scenario`` shapes answers that say nothing
    else, ``stats`` records what happened (see :class:`FakeServer` for the lifecycle)."""

    handler = _Handler
    stats: ScriptedStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, api_key: str = "AIzaFakeGeminiKey0123456789") -> None:
        self.api_key = api_key
        self.default_scenario = Scenario()
        super().__init__(host=host, port=port, stats=ScriptedStats())


def connector(url: str, api_key: str, **knobs: Any) -> dict[str, Any]:
    """ml-commons' Gemini connector (its URL and header), at ``url``, with
    ``parameters.fake`` (the scenario's knobs, ``knobs`` by default) passed through."""
    return {
        "name": "Google Gemini",
        "description": "The Gemini generateContent API",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": url.removeprefix("http://"), "model": "gemini-2.5-flash", "fake": knobs},
        "credential": {"gemini_api_key": api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "http://${parameters.endpoint}/v1beta/models/${parameters.model}:generateContent",
            "headers": {"x-goog-api-key": "${credential.gemini_api_key}", "Content-Type": "application/json"},
            "request_body": '{ "contents": [{"role": "user", "parts": [{"text": "${parameters.inputs}"}]}], '
                            '"fake": ${parameters.fake} }',
        }],
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m mlstream.testing.fake_gemini``: serve until SIGINT/SIGTERM; the URL on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default="AIzaFakeGeminiKey0123456789")
    args = parser.parse_args(argv)
    return serve_until_signalled(FakeGemini(port=args.port, api_key=args.api_key))


if __name__ == "__main__":
    sys.exit(main())
