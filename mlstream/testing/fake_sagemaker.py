"""A fake SageMaker runtime on loopback: an endpoint serving a TGI or LMI container.

``POST /endpoints/{name}/invocations`` (``InvokeEndpoint``) answers the container's
JSON; ``POST /endpoints/{name}/invocations-response-stream``
(``InvokeEndpointWithResponseStream``) answers AWS event-stream ``PayloadPart`` frames
whose bytes are the container's own stream, each token's bytes cut across two parts
(SageMaker cuts anywhere), or a ``ModelStreamError`` / ``InternalStreamFailure``
exception frame. Every request's SigV4 signature is checked (service ``sagemaker``);
errors carry ``x-amzn-ErrorType`` and ``{"message"}``. The real boto3
``sagemaker-runtime`` client works against it unchanged
(``tests/integration/test_fake_sagemaker.py``).

The container (``container="tgi"``, ``"lmi"`` or ``"encoder"``) shapes the bytes:

    tgi   SSE: data:{"index", "token": {"id", "text", "logprob", "special"}, "generated_text", "details"}
          the last token is the special ``</s>``; non-stream: [{"generated_text", "details"}]
    lmi   JSON lines: {"token": {"id", "text", "log_prob"}, "generated_text", "details"}
          non-stream: {"generated_text", "details"}

    encoder  an embedding / rerank endpoint (Text Embeddings Inference, a Hugging Face
          cross-encoder), non-stream only: ``embeddings.sagemaker_answer``

``details`` (finish reason, token counts) comes when the request's ``parameters`` set
``"details": true``, as in both containers.

A body with ``messages`` in place of ``inputs`` is a chat completions request (TGI's
Messages API, LMI's chat schema, both served on ``/invocations``): the answer is a
``chat.completion`` (finish reason ``stop`` from TGI, ``eos_token`` from LMI; usage
always), the stream ``chat.completion.chunk`` objects, as SSE ending in ``data: [DONE]``
(TGI) or JSON lines (LMI), the role in the first chunk, usage in the last; ``tool_use``
answers a tool call (its arguments in three pieces, finish reason ``tool_calls``). Behaviour per request:
``scripted.Scenario`` knobs from the body's top-level ``fake`` object or ``X-Fake-*``
headers (see :mod:`mlstream.testing.scripted`; ``error_type`` is ``ModelStreamError``
or ``InternalStreamFailure``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from . import sigv4
from .embeddings import EmbeddingRequestError, sagemaker_answer
from .eventstream import encode_message, encode_payload_part
from .fake_server import BadBody, FakeServer, json_or_none, serve_until_signalled
from .scripted import (DEFAULT_TEXT, Plan, RecordedRequest, Scenario, ScriptedHandler,
                                       ScriptedStats, build_plan, fake_tokens, scenario_for, tool_input_fragments)

__all__ = ["CONTAINERS", "DEFAULT_TEXT", "FakeSageMaker", "Scenario", "connector", "fake_tokens"]

CONTAINERS = ("tgi", "lmi", "encoder")
_ROUTE = re.compile(r"/endpoints/([^/]+)/(invocations|invocations-response-stream)")
_STATUS_ERRORS = {400: "ValidationError", 404: "ValidationError", 424: "ModelError", 429: "ThrottlingException",
                  500: "InternalFailure", 503: "ServiceUnavailable"}
_EOS = "</s>"


def _input_length(body: Mapping[str, Any]) -> int:
    inputs = body.get("inputs")
    return max(1, len(inputs.split())) if isinstance(inputs, str) else 1


def _details(scenario: Scenario, input_length: int) -> dict[str, Any]:
    return {"finish_reason": "eos_token", "generated_tokens": len(fake_tokens(scenario)) + 1,
            "input_length": input_length, "seed": None}


def _container_events(container: str, scenario: Scenario, details: dict[str, Any] | None) -> list[tuple[bytes, bool]]:
    """The container's own stream, one (bytes, is a text token) per token."""
    tokens = fake_tokens(scenario)
    answer = "".join(tokens)
    if container == "tgi":
        def event(text: str, special: bool, last: bool) -> bytes:
            body = {"index": 1, "token": {"id": 1000, "text": text, "logprob": -0.25, "special": special},
                    "generated_text": answer if last else None, "details": details if last else None}
            return b"data:" + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
        return [(event(t, False, False), True) for t in tokens] + [(event(_EOS, True, True), False)]

    def line(text: str, last: bool) -> bytes:
        body = {"token": {"id": [1000], "text": text, "log_prob": -0.25},
                "generated_text": answer if last else None, "details": details if last else None}
        return json.dumps(body, separators=(",", ":")).encode() + b"\n"
    return [(line(t, False), True) for t in tokens] + [(line("", True), False)]


def _prompt_words(messages: list[Any]) -> int:
    """A deterministic stand-in for token counting: words of the messages' text."""
    words = 0
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        parts = [content] if isinstance(content, str) else [
            part.get("text") for part in content or [] if isinstance(part, Mapping)] if isinstance(content, list) else []
        words += sum(len(part.split()) for part in parts if isinstance(part, str))
    return max(1, words)


def _chat_finish(container: str, scenario: Scenario) -> str:
    return "tool_calls" if scenario.tool_use else "stop" if container == "tgi" else "eos_token"


def _chat_usage(scenario: Scenario, prompt: int) -> dict[str, int]:
    completion = len(fake_tokens(scenario)) + (1 if scenario.tool_use else 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chat_completion(container: str, scenario: Scenario, prompt: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(fake_tokens(scenario))}
    tool = scenario.tool_use
    if tool is not None:
        message["tool_calls"] = [{"id": tool["id"], "type": "function", "function": {
            "name": tool["name"], "arguments": json.dumps(tool["input"], separators=(",", ":"))}}]
    return {"id": "chatcmpl-0", "object": "chat.completion", "created": 1712792433, "model": container,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": _chat_finish(container, scenario)}],
            "usage": _chat_usage(scenario, prompt)}


def _chat_events(container: str, scenario: Scenario, prompt: int) -> list[tuple[bytes, bool]]:
    """The container's chat stream, one (bytes, is a text token) per chunk."""
    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
        body = {"id": "chatcmpl-0", "object": "chat.completion.chunk", "created": 1712792433, "model": container,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if usage is not None:
            body["usage"] = usage
        data = json.dumps(body, separators=(",", ":")).encode()
        return b"data:" + data + b"\n\n" if container == "tgi" else data + b"\n"

    tokens = fake_tokens(scenario)
    events = [(chunk({"role": "assistant", "content": token} if index == 0 else {"content": token}), True)
              for index, token in enumerate(tokens)]
    tool = scenario.tool_use
    if tool is not None:
        for index, piece in enumerate(tool_input_fragments(tool["input"])):
            call = {"index": 0, "function": {"arguments": piece}}
            if index == 0:
                call.update(id=tool["id"], type="function")
                call["function"]["name"] = tool["name"]
            events.append((chunk({"tool_calls": [call]}), False))
    events.append((chunk({}, _chat_finish(container, scenario), _chat_usage(scenario, prompt)), False))
    if container == "tgi":
        events.append((b"data: [DONE]\n\n", False))
    return events


def _stream_exception(kind: str) -> bytes:
    message = ("The model container failed mid-stream (fake, as asked)." if kind == "ModelStreamError"
               else "The stream failed inside SageMaker (fake, as asked).")
    return encode_message({":exception-type": kind, ":content-type": "application/json",
                           ":message-type": "exception"},
                          json.dumps({"Message": message, "ErrorCode": "ModelError"}).encode())


def _plan(container_events: list[tuple[bytes, bool]], scenario: Scenario) -> Plan:
    events = []
    for data, is_text in container_events:
        half = len(data) // 2  # SageMaker cuts the container's bytes anywhere
        events.append((encode_payload_part(data[:half]) + encode_payload_part(data[half:]), is_text))
    return build_plan(scenario, events, _stream_exception(scenario.error_type or "ModelStreamError"))


class _Handler(ScriptedHandler):
    server_version = "FakeSageMaker/1.0"
    fake: FakeSageMaker

    def serve(self) -> None:
        fake = self.fake
        try:
            raw = self.read_body()
        except BadBody as error:
            self._error(error.status, "ValidationError", error.reason)
            return
        headers = self.lowered_headers()
        body = json_or_none(raw)
        fake.stats._record(RecordedRequest(self.command, self.path, headers, body, raw))
        path, _, query = self.path.partition("?")
        wire_path = path.encode("latin-1").decode("utf-8", "surrogateescape")
        result = sigv4.verify(self.command, wire_path, query, headers, raw, access_key=fake.access_key,
                              secret_key=fake.secret_key, region=fake.region, service="sagemaker",
                              session_token=fake.session_token)
        if not result.ok:
            fake.stats._add(auth_failures=1)
            self._error(403, result.error_type or "InvalidSignatureException", result.reason)
            return
        route = _ROUTE.fullmatch(path)
        if route is None or self.command != "POST":
            self._error(404, "UnknownOperationException", f"No route for {self.command} {path}")
            return
        if fake.container == "encoder":
            self._encode(route[2], body)
            return
        chat = isinstance(body, dict) and isinstance(body.get("messages"), list)
        if not isinstance(body, dict) or not (chat or isinstance(body.get("inputs"), str)):
            self._error(424, "ModelError", 'Received client error (422) from primary: "inputs" is required')
            return
        try:
            scenario = scenario_for(fake.default_scenario, body.get("fake"), headers)
        except ValueError as error:
            self._error(400, "ValidationError", f"fake scenario: {error}")
            return
        self.pause(scenario.first_delay_ms / 1000.0)
        if scenario.status is not None:
            self._error(scenario.status, _STATUS_ERRORS.get(scenario.status, "InternalFailure"),
                        f"{_STATUS_ERRORS.get(scenario.status, 'InternalFailure')} (fake, as asked)")
            return
        parameters = body.get("parameters")
        wants_details = isinstance(parameters, dict) and parameters.get("details") is True
        details = _details(scenario, _input_length(body)) if wants_details else None
        if route[2] == "invocations-response-stream":
            events = (_chat_events(fake.container, scenario, _prompt_words(body["messages"])) if chat
                      else _container_events(fake.container, scenario, details))
            self.send_plan(_plan(events, scenario), "application/vnd.amazon.eventstream",
                           {"x-amzn-RequestId": str(uuid.uuid4()), "X-Amzn-Invoked-Production-Variant": "AllTraffic"})
            return
        fault = self.whole_answer_fault(scenario)
        if fault == "cut":
            return
        if fault == "error":
            self._error(424, "ModelError", "The model container failed (fake, as asked).")
            return
        answer: Any = {"generated_text": "".join(fake_tokens(scenario))}
        if details is not None:
            answer["details"] = details
        if chat:
            answer = _chat_completion(fake.container, scenario, _prompt_words(body["messages"]))
        elif fake.container == "tgi":
            answer = [answer]
        self.send_json(200, answer,
                       {"x-amzn-RequestId": str(uuid.uuid4()), "X-Amzn-Invoked-Production-Variant": "AllTraffic"})

    def _encode(self, operation: str, body: Any) -> None:
        if operation != "invocations":
            self._error(400, "ValidationError", "This endpoint does not support response streaming")
            return
        try:
            answer = sagemaker_answer(body)
        except EmbeddingRequestError as error:
            self._error(424, "ModelError", f'Received client error (400) from primary: "{error}"')
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.end_headers()
        self.send(answer)

    def _error(self, status: int, error_type: str, message: str) -> None:
        self.send_json(status, {"message": message}, {"x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/"
                                                      "coral/com.amazonaws.sagemaker/"})


class FakeSageMaker(FakeServer):
    """A SageMaker runtime on loopback whose endpoints serve one ``container`` ("tgi",
    "lmi" or "encoder"); SigV4 checked against the given credentials (see :class:`FakeServer`)."""

    handler = _Handler
    stats: ScriptedStats

    def __init__(self, *, container: str = "tgi", host: str = "127.0.0.1", port: int = 0,
                 access_key: str = "AKIDFAKESAGEMAKER", secret_key: str = "fake-sagemaker-secret",
                 session_token: str | None = None, region: str = "us-east-1") -> None:
        if container not in CONTAINERS:
            raise ValueError(f"container must be one of {CONTAINERS}, got {container!r}")
        self.container = container
        self.access_key = access_key
        self.secret_key = secret_key
        self.session_token = session_token
        self.region = region
        self.default_scenario = Scenario()
        super().__init__(host=host, port=port, stats=ScriptedStats())


def connector(url: str, access_key: str, secret_key: str, region: str = "us-east-1", **knobs: Any) -> dict[str, Any]:
    """The SageMaker connector of docs/providers.md, at ``url``, with ``parameters.fake`` (the
    scenario's knobs, ``knobs`` by default) passed through in the body."""
    return {
        "name": "SageMaker LLM endpoint",
        "description": "A text-generation endpoint on SageMaker",
        "version": 1,
        "protocol": "aws_sigv4",
        "credential": {"access_key": access_key, "secret_key": secret_key},
        "parameters": {"region": region, "service_name": "sagemaker", "endpoint_name": "hamlet-llm",
                       "endpoint": url.removeprefix("http://"), "fake": knobs},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/endpoints/${parameters.endpoint_name}/invocations",
            "request_body": '{ "inputs": "${parameters.inputs}", "parameters": {"max_new_tokens": 512, '
                            '"details": true}, "fake": ${parameters.fake} }',
        }],
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m mlstream.testing.fake_sagemaker``: serve until SIGINT/SIGTERM; the URL on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--container", choices=CONTAINERS, default="tgi")
    parser.add_argument("--access-key", default="AKIDFAKESAGEMAKER")
    parser.add_argument("--secret-key", default="fake-sagemaker-secret")
    args = parser.parse_args(argv)
    return serve_until_signalled(FakeSageMaker(port=args.port, container=args.container,
                                               access_key=args.access_key, secret_key=args.secret_key))


if __name__ == "__main__":
    sys.exit(main())
