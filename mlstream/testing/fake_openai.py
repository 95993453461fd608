"""A fake OpenAI provider on loopback, for tests, benchmarks and ``mlstream demo``.

It is a real HTTP/1.1 server (stdlib only) that speaks OpenAI's wire format byte
for byte, and whose behaviour each request chooses: how many chunks, how fast,
whether it fails, and how. It records what it saw and what it managed to write
(:class:`FakeStats`), so tests of backpressure and cancellation can wait for a
counter instead of sleeping.

Usage::

    with FakeOpenAI() as fake:
        ...  # point a connector at f"{fake.url}/v1/chat/completions"
        # with "Authorization: Bearer {fake.api_key}" and
        # "model": Scenario(chunks=5, delay_ms=10).to_model()
        assert fake.stats.wait_for(lambda s: s.streams_completed == 1)

Classes (the server, its lifecycle and the handler's helpers are ``fake_server``'s; the
stream plan and its writer are ``scripted``'s)::

    fake_server.FakeHandler
     +-- scripted.ScriptedHandler
          +-- _Handler                     routes, auth, scenarios, SSE answers
    fake_server.FakeServer
     +-- FakeOpenAI                        the api_key and a FakeStats

    Scenario       the per-request knobs (frozen, hashable: the cache key)
    _Encoded       every byte a scenario sends, framed once and cached
    scripted.Plan  what one stream writes: the content chunks up to its end or fault

Heads (status line and headers) are written as prepared bytes, without ``Server`` or
``Date``, and ``bytes_written`` counts them: so JSON answers and stream heads are this
module's own, while stream bodies go through ``ScriptedHandler.write_plan``.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (legacy text
completions), ``GET /v1/models``, ``POST /v1/embeddings``; Azure OpenAI's
``POST /openai/deployments/{deployment}/embeddings`` and ``.../chat/completions`` (key in
an ``api-key`` header); and, for Cohere, ``POST /v1/embed``, ``/v2/embed``, ``/v1/rerank``,
``/v2/rerank``, ``/v1/chat``, ``/v2/chat`` (the answer text as for chat completions). Embeddings
and rerank scores are deterministic (``embeddings.fake_vector``, ``fake_relevance``).
Everything else needs ``Authorization: Bearer <api_key>``. The embedding and rerank
routes honour the ``status``, ``retry_after`` and ``first_delay_ms`` knobs.

Knobs (a request header, or a query string after ``?`` in the model name; headers win):

====================  =======================  ===========================================
model-name form       header                   meaning (default)
====================  =======================  ===========================================
``chunks=N``          X-Fake-Chunks            number of content chunks (one per word of text)
``text=...``          X-Fake-Text              answer text, percent-encoded UTF-8 in the
                                               header; query-string decoding (``+`` is a
                                               space) in the model name (:data:`DEFAULT_TEXT`)
``delay_ms=N``        X-Fake-Delay-Ms          pause between content chunks (0)
``first_delay_ms=N``  X-Fake-First-Delay-Ms    pause before the response headers (0)
``status=N``          X-Fake-Status            answer with this 4xx/5xx and OpenAI's error JSON
``retry_after=N``     X-Fake-Retry-After       ``Retry-After`` of a ``status=429`` answer (1)
``cut_after=N``       X-Fake-Cut-After         after N content chunks close the connection
                                               (no finish chunk, no [DONE], no last chunk)
``error_after=N``     X-Fake-Error-After       after N content chunks send an error event,
                                               then end the body properly (no [DONE])
``chunk_bytes=N``     X-Fake-Chunk-Bytes       every content chunk is exactly N ASCII
                                               characters of filler (benchmarks)
``tool=NAME``         X-Fake-Tool              chat: after the text, one call of the tool NAME
                                               (id ``call_fake0001``, arguments
                                               :data:`TOOL_ARGUMENTS` streamed in three pieces),
                                               finish_reason ``tool_calls``
``gzip=1``            X-Fake-Gzip              the stream's body gzip-coded
                                               (``Content-Encoding: gzip``), every event
                                               flushed as it is sent
====================  =======================  ===========================================

What the content chunks are is :func:`fake_tokens`; ``"".join(fake_tokens(s))`` is
the full answer, streamed or not.

Performance: a gateway benchmarked against this fake must not be measuring the
fake. Every byte a scenario sends (JSON, SSE framing and HTTP chunk framing) is
encoded once and cached (:func:`_encode`); streaming is then a loop of
``sendall`` calls with no JSON work. Run the fake in its own process
(``python -m mlstream.testing.fake_openai``) when the benchmark must not share
the GIL with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import http
import json
import logging
import re
import secrets
import ssl
import string
import sys
import time
import urllib.parse
import uuid
import zlib
from dataclasses import dataclass, fields
from typing import Any, Mapping

from . import embeddings
from .fake_server import (LAST_CHUNK, BadBody, ClientGone, FakeServer, http_chunk, json_or_none,
                                          serve_until_signalled)
from .scripted import Plan, RecordedRequest, ScriptedHandler
from .stats import CounterStats
from .tokens import DEFAULT_TEXT, split_answer

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_MODEL",
    "DEFAULT_TEXT",
    "KNOBS",
    "MID_STREAM_ERROR_MESSAGE",
    "FakeOpenAI",
    "FakeStats",
    "RecordedRequest",
    "Scenario",
    "ScenarioError",
    "fake_tokens",
    "parse_scenario",
]

logger = logging.getLogger(__name__)

DEFAULT_API_KEY = "sk-fake-test-key"
DEFAULT_MODEL = "gpt-fake"
MID_STREAM_ERROR_MESSAGE = "fake mid-stream failure"

# How many distinct scenarios keep their pre-encoded bytes. Benchmarks use a
# handful; tests use a few dozen.
_CACHE_SCENARIOS = 256

_DIGITS = re.compile(r"[0-9]+")
_TEXT_KNOBS = ("text", "tool")  # knobs whose value is a string, not a count
_ID_ALPHABET = string.ascii_letters + string.digits


# --------------------------------------------------------------------------- scenario


class ScenarioError(ValueError):
    """A knob is unknown or out of range; the fake answers 400."""


@dataclass(frozen=True)
class Scenario:
    """How the fake answers one request. Frozen and hashable: it keys the byte cache.

    ``None`` means "not set". See the module docstring for each knob.
    """

    chunks: int | None = None
    text: str | None = None
    delay_ms: int = 0
    first_delay_ms: int = 0
    status: int | None = None
    retry_after: int = 1
    cut_after: int | None = None
    error_after: int | None = None
    chunk_bytes: int | None = None
    tool: str | None = None
    gzip: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in _TEXT_KNOBS:
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ScenarioError(f"fake knob {f.name} must be a non-negative integer, got {value!r}")
        for name in _TEXT_KNOBS:
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ScenarioError(f"fake knob {name} must be a string, got {getattr(self, name)!r}")
        if self.status is not None and not 400 <= self.status <= 599:
            raise ScenarioError(f"fake knob status must be a 4xx or 5xx code, got {self.status}")
        if self.chunk_bytes is not None:
            if self.chunk_bytes < 1:
                raise ScenarioError("fake knob chunk_bytes must be at least 1")
            if self.text is not None:
                raise ScenarioError("fake knobs text and chunk_bytes cannot be combined")

    def to_model(self, base: str = DEFAULT_MODEL) -> str:
        """The model name that asks for this scenario, e.g. ``gpt-fake?chunks=5&delay_ms=10``."""
        query = urllib.parse.urlencode(_non_defaults(self))
        return f"{base}?{query}" if query else base

    def to_headers(self) -> dict[str, str]:
        """The ``X-Fake-*`` request headers that ask for this scenario."""
        headers = {}
        for name, value in _non_defaults(self).items():
            text = urllib.parse.quote(value, safe="") if name == "text" else str(value)
            headers[_header_name(name)] = text
        return headers


KNOBS: tuple[str, ...] = tuple(f.name for f in fields(Scenario))
TOOL_CALL_ID = "call_fake0001"
TOOL_ARGUMENTS = '{"location": "Elsinore", "unit": "celsius"}'

_HEADER_KNOBS = {"x-fake-" + name.replace("_", "-"): name for name in KNOBS}


def _header_name(knob: str) -> str:
    return "X-Fake-" + "-".join(part.capitalize() for part in knob.split("_"))


def _non_defaults(scenario: Scenario) -> dict[str, Any]:
    default = Scenario()
    return {f.name: getattr(scenario, f.name) for f in fields(scenario)
            if getattr(scenario, f.name) != getattr(default, f.name)}


def parse_scenario(model: str | None, headers: Mapping[str, str]) -> Scenario:
    """The scenario a request asks for: knobs from the model name, then headers over them.

    ``model`` is ``base`` or ``base?knob=value&...``; a model without ``?`` uses
    defaults. ``headers`` may use any case. Unknown knobs are a ``ScenarioError``
    so that a typo fails loudly instead of testing the default.
    """
    raw: dict[str, str] = {}
    if model and "?" in model:
        query = model.split("?", 1)[1]
        for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
            if name not in KNOBS:
                raise ScenarioError(f"unknown fake knob {name!r} in the model name")
            raw[name] = value
    for name, value in headers.items():
        lowered = name.lower()
        if not lowered.startswith("x-fake-"):
            continue
        knob = _HEADER_KNOBS.get(lowered)
        if knob is None:
            raise ScenarioError(f"unknown fake header {name}")
        if knob == "text":
            # http.server decodes header bytes as latin-1; undo that before
            # percent-decoding in case a client sent raw UTF-8 anyway.
            value = value.encode("latin-1", "replace").decode("utf-8", "replace")
            raw[knob] = urllib.parse.unquote(value)
        else:
            raw[knob] = value.strip()
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _TEXT_KNOBS:
            values[name] = value
        elif _DIGITS.fullmatch(value):
            values[name] = int(value)
        else:
            raise ScenarioError(f"fake knob {name} must be a non-negative integer, got {value!r}")
    return Scenario(**values)


def fake_tokens(scenario: Scenario) -> list[str]:
    """The content chunks a scenario sends, in order; their concatenation is the answer.

    The rules are :func:`mlstream.testing.tokens.split_answer`'s, the same for both fakes.
    """
    return list(_tokens(scenario))


@functools.lru_cache(maxsize=_CACHE_SCENARIOS)
def _tokens(scenario: Scenario) -> tuple[str, ...]:
    return split_answer(scenario.chunks, scenario.text, scenario.chunk_bytes)


def _stopping_point(scenario: Scenario, count: int) -> tuple[int, str]:
    """How many content chunks go out, and how the response then ends.

    ``"done"``: finish chunk and [DONE]; ``"cut"``: connection closed;
    ``"error"``: error event. When both ``cut_after`` and ``error_after`` are
    set the smaller wins, ``cut_after`` on a tie.
    """
    plans = [(count, 2, "done")]
    if scenario.cut_after is not None:
        plans.append((min(scenario.cut_after, count), 0, "cut"))
    if scenario.error_after is not None:
        plans.append((min(scenario.error_after, count), 1, "error"))
    sent, _, ending = min(plans)
    return sent, ending


# --------------------------------------------------------------------------- wire format


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _sse(payload: bytes) -> bytes:
    """One SSE event framed as one HTTP chunk."""
    return http_chunk(b"data: " + payload + b"\n\n")


_KEEP_ALIVE = http_chunk(b": keep-alive\n\n")
_DONE = _sse(b"[DONE]")
# Exactly the bytes the brief names, spaces included (json.dumps' default separators).
_MID_STREAM_ERROR = _sse(json.dumps(
    {"error": {"message": MID_STREAM_ERROR_MESSAGE, "type": "server_error"}}).encode())
_STREAM_HEADERS = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Cache-Control: no-cache\r\n"
    b"X-Accel-Buffering: no\r\n"
)


def openai_error(message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _status_error(status: int, model: str, retry_after: int) -> dict[str, Any]:
    """The error body OpenAI sends with ``status`` (for the ``status`` knob)."""
    if status == 400:
        return openai_error("Fake bad request (status knob).")
    if status == 401:
        return openai_error("Incorrect API key provided (status knob).", code="invalid_api_key")
    if status == 403:
        return openai_error("You are not allowed to sample from this model (status knob).",
                            "permission_error")
    if status == 404:
        return openai_error(f"The model `{model}` does not exist or you do not have access to it.",
                            code="model_not_found")
    if status == 429:
        return openai_error(f"Rate limit reached for fake requests. Please try again in {retry_after}s.",
                            "requests", code="rate_limit_exceeded")
    if status == 500:
        return openai_error("The server had an error while processing your request. Sorry about that!",
                            "server_error")
    if status == 503:
        return openai_error("The engine is currently overloaded, please try again later.", "server_error")
    return openai_error(f"Fake error status {status}.",
                        "server_error" if status >= 500 else "invalid_request_error")


@dataclass(frozen=True)
class _Encoded:
    """Every byte one (route, model, scenario, usage) answer sends, framed once."""

    prologue: bytes           # role chunk (chat only) and the keep-alive comment
    content: tuple[bytes, ...]  # one framed HTTP chunk per token
    epilogue: bytes           # finish chunk, usage chunk if asked, [DONE] (then the last chunk)
    body: bytes               # the non-stream JSON answer


def _new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(29))


@functools.lru_cache(maxsize=_CACHE_SCENARIOS)
def _encode(chat: bool, model: str, scenario: Scenario, include_usage: bool,
            prompt_tokens: int) -> _Encoded:
    """Pre-encode an answer. Cached, so the id and ``created`` repeat across requests
    with the same key — harmless for a fake, and the price of no per-request JSON."""
    tokens = _tokens(scenario)
    created = int(time.time())
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens),
             "total_tokens": prompt_tokens + len(tokens)}
    if chat:
        ident, obj = _new_id("chatcmpl-"), "chat.completion.chunk"

        def choice(token: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            delta: dict[str, Any] = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif token is not None:
                delta = {"content": token}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    else:
        ident, obj = _new_id("cmpl-"), "text_completion"

        def choice(token: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            return {"index": 0, "text": token or "", "logprobs": None, "finish_reason": finish}

    def chunk(choices: list[dict[str, Any]], usage_value: Any = None) -> bytes:
        value: dict[str, Any] = {"id": ident, "object": obj, "created": created, "model": model,
                                 "choices": choices}
        if include_usage:
            # OpenAI sends "usage": null on every chunk but the usage chunk when asked.
            value["usage"] = usage_value
        return _sse(_json(value))

    prologue = (chunk([choice(None, None, role=True)]) if chat else b"") + _KEEP_ALIVE
    content = tuple(chunk([choice(token, None)]) for token in tokens)
    finish = "stop"
    tool_call: dict[str, Any] | None = None
    if chat and scenario.tool:
        finish = "tool_calls"
        tool_call = {"id": TOOL_CALL_ID, "type": "function",
                     "function": {"name": scenario.tool, "arguments": TOOL_ARGUMENTS}}
        third = len(TOOL_ARGUMENTS) // 3
        pieces = (TOOL_ARGUMENTS[:third], TOOL_ARGUMENTS[third:2 * third], TOOL_ARGUMENTS[2 * third:])
        opening = {"index": 0, "id": TOOL_CALL_ID, "type": "function",
                   "function": {"name": scenario.tool, "arguments": ""}}
        tool_deltas = [opening] + [{"index": 0, "function": {"arguments": piece}} for piece in pieces]
        content += tuple(chunk([{"index": 0, "delta": {"tool_calls": [delta]}, "logprobs": None,
                                 "finish_reason": None}]) for delta in tool_deltas)
    epilogue = chunk([choice(None, finish)])
    if include_usage:
        epilogue += chunk([], usage)
    epilogue += _DONE

    full = "".join(tokens)
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": full}
        if tool_call is not None:
            message["tool_calls"] = [tool_call]
        answer = {"id": ident, "object": "chat.completion", "created": created, "model": model,
                  "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                  "usage": usage}
    else:
        answer = {"id": ident, "object": "text_completion", "created": created, "model": model,
                  "choices": [{"index": 0, "text": full, "logprobs": None, "finish_reason": "stop"}],
                  "usage": usage}
    return _Encoded(prologue, content, epilogue, _json(answer))


def _plan(encoded: _Encoded, scenario: Scenario) -> Plan:
    """The body of a stream after the prologue: the content chunks (a pause before each
    but the first), then the epilogue, the error event or the hang-up. Content chunks
    tally one each in ``chunks_written``; the ending none, but its bytes and those of the
    last chunk that follows it in ``bytes_written`` (every response byte counts)."""
    sent, ending = _stopping_point(scenario, len(encoded.content))
    delay = scenario.delay_ms / 1000
    chunks = encoded.content[:sent]
    pauses = (0.0,) * min(sent, 1) + (delay,) * max(sent - 1, 0)
    tallies = tuple((1, len(chunk)) for chunk in chunks)
    if ending == "cut":
        return Plan(chunks, pauses, tallies, complete=False, cut=True)
    last = _MID_STREAM_ERROR if ending == "error" else encoded.epilogue
    return Plan((*chunks, last), (*pauses, 0.0), (*tallies, (0, len(last) + len(LAST_CHUNK))),
                complete=ending == "done")


def _gzipped(prologue: bytes, plan: Plan) -> tuple[bytes, Plan]:
    """A stream's prologue and plan with their payloads gzip-coded: each HTTP chunk's
    data compressed and flushed (so each event arrives when it is sent), the gzip
    trailer in the last planned chunk of a complete answer."""
    coder = zlib.compressobj(wbits=31)

    def recode(framed: bytes, final: bool = False) -> bytes:
        data = coder.compress(_payloads(framed)) + coder.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)
        return http_chunk(data)

    head = recode(prologue)
    last = len(plan.chunks) - 1
    chunks = tuple(recode(chunk, final=plan.complete and index == last) for index, chunk in enumerate(plan.chunks))
    return head, dataclasses.replace(plan, chunks=chunks)


def _payloads(framed: bytes) -> bytes:
    """The data of HTTP chunks framed back to back (our own framing: no extensions)."""
    parts, pos = [], 0
    while pos < len(framed):
        line_end = framed.index(b"\r\n", pos)
        size = int(framed[pos:line_end], 16)
        parts.append(framed[line_end + 2:line_end + 2 + size])
        pos = line_end + 2 + size + 2
    return b"".join(parts)


def _count_words(value: Any) -> int:
    """A deterministic stand-in for a tokenizer: words in every string part."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_count_words(item) for item in value)
    if isinstance(value, dict):
        if "text" in value:
            return _count_words(value["text"])
        return _count_words(value.get("content"))
    return 0


# --------------------------------------------------------------------------- stats


class FakeStats(CounterStats):
    """What the fake saw and wrote. Thread-safe; every change wakes ``wait_for``.

    - ``streams_started``: stream answers whose headers were about to be sent.
    - ``streams_completed``: stream answers whose [DONE] and last chunk were written.
    - ``chunks_written``: content chunks whose ``sendall`` returned (the kernel took them).
    - ``bytes_written``: every response byte (status line, headers, body) the kernel took.
    - ``client_disconnects``: answers the client abandoned: a write failed, or the
      peer closed while the fake was pausing (``first_delay_ms``, ``delay_ms``).
      Sockets closed by :meth:`FakeOpenAI.stop` do not count.
    - ``connections_open`` (a gauge) / ``connections_closed``.
    """

    COUNTERS = ("streams_started", "streams_completed", "chunks_written", "bytes_written",
                "client_disconnects", "connections_closed")

    def _event_written(self, chunks: int, nbytes: int) -> None:
        # The hot path (a plan's tally): one lock round trip per chunk, no kwargs dict.
        with self._cond:
            self.chunks_written += chunks
            self.bytes_written += nbytes
            self._cond.notify_all()


# --------------------------------------------------------------------------- server


_ROUTES: dict[str, tuple[str, str]] = {
    "/v1/chat/completions": ("POST", "chat"),
    "/v1/completions": ("POST", "text"),
    "/v1/models": ("GET", "models"),
    "/v1/embeddings": ("POST", "embeddings"),
    "/v1/embed": ("POST", "cohere_embed_v1"),
    "/v2/embed": ("POST", "cohere_embed_v2"),
    "/v1/rerank": ("POST", "cohere_rerank"),
    "/v2/rerank": ("POST", "cohere_rerank"),
    "/v1/chat": ("POST", "cohere_chat_v1"),
    "/v2/chat": ("POST", "cohere_chat_v2"),
}
# Azure OpenAI: the deployment stands for the model; the key comes in an api-key header.
_AZURE = re.compile(r"/+openai/deployments/([^/]+)/(embeddings|chat/completions)")


_EMBEDDING_KINDS = frozenset({"embeddings", "azure_embeddings", "cohere_embed_v1", "cohere_embed_v2",
                              "cohere_rerank"})


class _Handler(ScriptedHandler):
    server_version = "mlstream-fake-openai"
    fake: FakeOpenAI

    # Every method goes through serve() so unknown routes get OpenAI's JSON.
    do_OPTIONS = ScriptedHandler.dispatch

    def serve(self) -> None:
        self._head_sent = False
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            try:
                raw = self.read_body()
            except BadBody as exc:
                self._send_json(exc.status, openai_error(exc.reason))
                return
            body = json_or_none(raw)
            self.fake.stats._record(RecordedRequest(self.command, self.path, headers, body, raw))
            self._route(headers, raw, body)
        except (ConnectionError, TimeoutError):
            raise  # the client went away: fake_server.FakeHandler.dispatch counts it
        except Exception:
            self.close_connection = True
            logger.exception("fake openai: bug while answering %s %s", self.command, self.path)
            if not self._head_sent:
                try:
                    self._send_json(500, openai_error("fake openai crashed", "server_error"))
                except ClientGone:
                    pass

    def _route(self, headers: dict[str, str], raw: bytes, body: Any) -> None:
        path = self.path.split("?", 1)[0]
        route = _ROUTES.get(path)
        azure = _AZURE.fullmatch(path)
        if azure is not None:
            route = ("POST", "azure_embeddings" if azure.group(2) == "embeddings" else "chat")
        if route is None:
            self._send_json(404, openai_error(f"Invalid URL ({self.command} {path})"))
            return
        method, kind = route
        if self.command != method:
            self._send_json(405, openai_error(f"Invalid method for URL ({self.command} {path})"),
                            [("Allow", method)])
            return
        if azure is not None:
            key = headers.get("api-key", "")
            if not secrets.compare_digest(key.encode(), self.fake.api_key.encode()):
                self._send_json(401, {"error": {"code": "401", "message": "Access denied due to invalid "
                                                "subscription key or wrong API endpoint."}})
                return
        else:
            auth_error = self._auth_error(headers.get("authorization"))
            if auth_error is not None:
                self._send_json(401, auth_error)
                return
        if kind in _EMBEDDING_KINDS:
            self._embeddings(kind, headers, body, azure.group(1) if azure else None)
            return
        if kind in ("cohere_chat_v1", "cohere_chat_v2"):
            self._cohere_chat(kind == "cohere_chat_v2", headers, body)
            return
        if kind == "models":
            self._send_json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 1700000000, "owned_by": "mlstream-fake"}
                for name in (DEFAULT_MODEL, DEFAULT_MODEL + "-instruct")]})
            return
        if not isinstance(body, dict):
            self._send_json(400, openai_error(
                "We could not parse the JSON body of your request. (HINT: This likely means you "
                "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)"))
            return
        model = body.get("model") if azure is None else azure.group(1)
        if not isinstance(model, str) or not model:
            self._send_json(400, openai_error("you must provide a model parameter"))
            return
        chat = kind == "chat"
        if chat and not isinstance(body.get("messages"), list):
            self._send_json(400, openai_error("Missing required parameter: 'messages'.", param="messages"))
            return
        stream = body.get("stream") is True
        options = body.get("stream_options")
        if options is not None and not stream:
            self._send_json(400, openai_error(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options"))
            return
        scenario = self._scenario(model, headers)
        if scenario is None:
            return
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        prompt_tokens = _count_words(body.get("messages") if chat else body.get("prompt"))
        encoded = _encode(chat, model, scenario, include_usage, prompt_tokens)
        if stream:
            self._stream(encoded, scenario)
        else:
            self._answer(encoded, scenario)

    def _scenario(self, model: str | None, headers: dict[str, str]) -> Scenario | None:
        """The request's scenario after its first pause; None when its knobs already
        answered it (a bad knob, or the ``status`` knob)."""
        try:
            scenario = parse_scenario(model, headers)
        except ScenarioError as exc:
            self._send_json(400, openai_error(str(exc), param="model"))
            return None
        self.pause(scenario.first_delay_ms / 1000)
        if scenario.status is not None:
            extra = [("Retry-After", str(scenario.retry_after))] if scenario.status == 429 else []
            self._send_json(scenario.status, _status_error(scenario.status, str(model), scenario.retry_after),
                            extra)
            return None
        return scenario

    def _embeddings(self, kind: str, headers: dict[str, str], body: Any, deployment: str | None) -> None:
        if not isinstance(body, dict):
            self._send_json(400, openai_error("The request body must be a JSON object."))
            return
        model = body.get("model") if deployment is None else deployment
        if self._scenario(model if isinstance(model, str) else None, headers) is None:
            return
        try:
            if kind in ("embeddings", "azure_embeddings"):
                if kind == "embeddings" and not (isinstance(model, str) and model):
                    raise embeddings.EmbeddingRequestError("you must provide a model parameter")
                answer = embeddings.openai_embeddings(body, str(model))
            elif kind == "cohere_rerank":
                answer = embeddings.cohere_rerank(body)
            else:
                answer = embeddings.cohere_embed(body, 2 if kind == "cohere_embed_v2" else 1)
        except embeddings.EmbeddingRequestError as exc:
            self._send_json(400, openai_error(str(exc)))
            return
        self._send_json_bytes(200, answer)

    def _cohere_chat(self, v2: bool, headers: dict[str, str], body: Any) -> None:
        """Cohere chat, v1 (``message``) or v2 (``messages``), answering the scenario's text."""
        if not isinstance(body, dict) or not isinstance(body.get("model" if v2 else "message"), str):
            self._send_json(400, {"message": "invalid request: " + ("model is required" if v2 else
                                                                     "message must be a string")})
            return
        if v2 and (not isinstance(body.get("messages"), list) or not body["messages"]):
            self._send_json(400, {"message": "invalid request: messages must be a non-empty list"})
            return
        model = body.get("model")
        scenario = self._scenario(model if isinstance(model, str) else None, headers)
        if scenario is None:
            return
        text = "".join(fake_tokens(scenario))
        words = _count_words(body.get("messages") if v2 else body.get("message"))
        tokens = {"input_tokens": words, "output_tokens": len(fake_tokens(scenario))}
        if v2:
            answer = {"id": str(uuid.uuid4()), "finish_reason": "COMPLETE",
                      "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
                      "usage": {"billed_units": tokens, "tokens": tokens}}
        else:
            answer = {"response_id": str(uuid.uuid4()), "text": text, "generation_id": str(uuid.uuid4()),
                      "chat_history": [{"role": "USER", "message": body["message"]},
                                       {"role": "CHATBOT", "message": text}],
                      "finish_reason": "COMPLETE", "meta": {"billed_units": tokens}}
        self._send_json(200, answer)

    def _auth_error(self, authorization: str | None) -> dict[str, Any] | None:
        if authorization is None:
            return openai_error(
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", code="invalid_api_key")
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() == "bearer" and secrets.compare_digest(key.encode(), self.fake.api_key.encode()):
            return None
        return openai_error(
            f"Incorrect API key provided: {_mask(key)}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.", code="invalid_api_key")

    # ---- answers

    def _answer(self, encoded: _Encoded, scenario: Scenario) -> None:
        sent, ending = _stopping_point(scenario, len(encoded.content))
        # Take as long as the stream would have before its end or failure.
        self.pause(scenario.delay_ms * max(sent - 1, 0) / 1000)
        if ending == "error":
            self._send_json(500, openai_error(MID_STREAM_ERROR_MESSAGE, "server_error"))
        elif ending == "cut":
            # Promise the whole body, deliver half, hang up.
            body = encoded.body
            self._write(self._head(200, [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(body)))]) + body[: len(body) // 2])
            self.hang_up()
        else:
            self._send_json_bytes(200, encoded.body)

    def _stream(self, encoded: _Encoded, scenario: Scenario) -> None:
        self.fake.stats._add(streams_started=1)
        prologue, plan = encoded.prologue, _plan(encoded, scenario)
        coding = b""
        if scenario.gzip:
            prologue, plan = _gzipped(prologue, plan)
            coding = b"Content-Encoding: gzip\r\n"
        self._write(_STREAM_HEADERS + coding + self._connection_header() + b"\r\n" + prologue)
        self.write_plan(plan)

    # ---- plumbing

    def _connection_header(self) -> bytes:
        return b"Connection: close\r\n" if self.close_connection else b"Connection: keep-alive\r\n"

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        lines = [f"HTTP/1.1 {status} {phrase}\r\n"]
        lines += [f"{name}: {value}\r\n" for name, value in headers]
        self.log_request(status)
        return "".join(lines).encode("latin-1") + self._connection_header()

    def _send_json(self, status: int, value: Any, extra: list[tuple[str, str]] | None = None) -> None:
        self._send_json_bytes(status, _json(value), extra)

    def _send_json_bytes(self, status: int, body: bytes, extra: list[tuple[str, str]] | None = None) -> None:
        head = self._head(status, [("Content-Type", "application/json"),
                                   ("Content-Length", str(len(body))), *(extra or [])])
        self._write(head + b"\r\n" + body)

    def _write(self, data: bytes) -> None:
        self._head_sent = True
        self.send(data)
        self.fake.stats._add(bytes_written=len(data))


def _mask(key: str) -> str:
    """OpenAI's way of naming a wrong key without repeating it."""
    if len(key) <= 8:
        return "*" * len(key)
    return key[:3] + "*" * (len(key) - 7) + key[-4:]


class FakeOpenAI(FakeServer):
    """A fake OpenAI server on loopback; see :class:`FakeServer` for its lifecycle."""

    handler = _Handler
    stats: FakeStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 api_key: str = DEFAULT_API_KEY, tls: ssl.SSLContext | None = None) -> None:
        self.api_key = api_key
        super().__init__(host=host, port=port, stats=FakeStats(), tls=tls)


def main(argv: list[str] | None = None) -> int:
    """``python -m mlstream.testing.fake_openai``: serve in this process until SIGINT/SIGTERM.

    Writes the URL as the first line of stdout, so a parent process can read the port.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    args = parser.parse_args(argv)
    return serve_until_signalled(FakeOpenAI(port=args.port, api_key=args.api_key))

if __name__ == "__main__":
    sys.exit(main())
