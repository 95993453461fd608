"""The fake OpenAI provider, over real loopback sockets.

Stream framing is checked on a raw socket so every HTTP chunk is seen as sent;
the rest uses http.client. Every socket has a timeout as a hang guard, and
synchronisation with the server goes through ``FakeStats.wait_for``.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from typing import Any, Iterator

import pytest

from mlstream.testing.fake_openai import (
    DEFAULT_API_KEY,
    DEFAULT_TEXT,
    MID_STREAM_ERROR_MESSAGE,
    FakeOpenAI,
    Scenario,
    ScenarioError,
    fake_tokens,
    parse_scenario,
)

TIMEOUT = 2.0
AUTH = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me about Hamlet"}]}]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


# ---------------------------------------------------------------- helpers


def request(fake: FakeOpenAI, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    try:
        data = None if body is None else json.dumps(body).encode()
        all_headers = {**AUTH, "Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=all_headers)
        response = conn.getresponse()
        return response, response.read()
    finally:
        conn.close()


def open_raw(fake: FakeOpenAI, path: str, body: dict[str, Any],
             headers: dict[str, str] | None = None) -> tuple[socket.socket, Any]:
    """Send a request on a raw socket; return the socket and a binary reader."""
    sock = socket.create_connection(("127.0.0.1", fake.port), timeout=TIMEOUT)
    payload = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", "Host: fake", "Content-Type: application/json",
             f"Content-Length: {len(payload)}"]
    lines += [f"{k}: {v}" for k, v in {**AUTH, **(headers or {})}.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
    return sock, sock.makefile("rb")


def read_head(reader: Any) -> tuple[int, dict[str, str]]:
    status_line = reader.readline()
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


def read_chunk(reader: Any) -> bytes | None:
    """One HTTP chunk's payload; b"" for the last chunk, None if the body was cut."""
    size_line = reader.readline()
    if not size_line:
        return None
    size = int(size_line.strip(), 16)
    data = reader.read(size)
    if len(data) < size:
        return None
    crlf = reader.read(2)
    if crlf != b"\r\n":
        return None
    return data


def read_chunks(reader: Any) -> tuple[list[bytes], bool]:
    """All chunk payloads, and whether the body ended with the zero-length chunk."""
    chunks = []
    while (chunk := read_chunk(reader)) is not None:
        if chunk == b"":
            return chunks, True
        chunks.append(chunk)
    return chunks, False


def stream_raw(fake: FakeOpenAI, body: dict[str, Any], headers: dict[str, str] | None = None,
               path: str = CHAT) -> tuple[int, dict[str, str], list[bytes], bool]:
    sock, reader = open_raw(fake, path, {**body, "stream": True}, headers)
    with sock, reader:
        status, response_headers = read_head(reader)
        chunks, complete = read_chunks(reader)
    return status, response_headers, chunks, complete


def events(chunks: list[bytes]) -> list[bytes]:
    """SSE data payloads, asserting each HTTP chunk holds exactly one event or comment."""
    payloads = []
    for chunk in chunks:
        assert chunk.endswith(b"\n\n") and chunk.count(b"\n\n") == 1, chunk
        if chunk.startswith(b":"):
            continue
        assert chunk.startswith(b"data: "), chunk
        payloads.append(chunk[len(b"data: "):-2])
    return payloads


def content_of(payloads: list[bytes]) -> list[str]:
    tokens = []
    for payload in payloads:
        if payload == b"[DONE]":
            continue
        choices = json.loads(payload).get("choices") or []
        delta = choices[0].get("delta", {}) if choices else {}
        if "content" in delta and "role" not in delta:
            tokens.append(delta["content"])
    return tokens


# ---------------------------------------------------------------- fake_tokens and knobs (pure)


def test_fake_tokens_for_chunks_are_numbered_words() -> None:
    assert fake_tokens(Scenario(chunks=3)) == ["w0", " w1", " w2"]
    assert fake_tokens(Scenario(chunks=0)) == []


def test_fake_tokens_default_is_one_word_each_and_rejoins() -> None:
    tokens = fake_tokens(Scenario())
    assert "".join(tokens) == DEFAULT_TEXT
    assert len(tokens) == len(DEFAULT_TEXT.split()) >= 30


@pytest.mark.parametrize("text, chunks", [("abcdefg", 3), ("ab", 5), ("  spaced  out  ", None),
                                          ("Grüße, 世界 ✓", None), ("", None)])
def test_fake_tokens_rejoin_to_the_text(text: str, chunks: int | None) -> None:
    tokens = fake_tokens(Scenario(text=text, chunks=chunks))
    assert "".join(tokens) == text
    if chunks is not None:
        assert len(tokens) == chunks


def test_fake_tokens_chunk_bytes_are_exact() -> None:
    tokens = fake_tokens(Scenario(chunks=4, chunk_bytes=100))
    assert [len(t) for t in tokens] == [100] * 4
    assert len(set(tokens)) == 4 and all(t.isascii() for t in tokens)
    assert fake_tokens(Scenario(chunks=2, chunk_bytes=1)) == ["c", "c"]


def test_parse_scenario_headers_win_over_model_name() -> None:
    scenario = parse_scenario("gpt-fake?chunks=5&delay_ms=10&text=a+b",
                              {"X-Fake-Chunks": "2", "x-fake-first-delay-ms": "7"})
    assert scenario == Scenario(chunks=2, delay_ms=10, first_delay_ms=7, text="a b")
    assert parse_scenario("gpt-fake", {}) == Scenario()
    assert parse_scenario(scenario.to_model(), {}) == scenario
    assert parse_scenario("m", Scenario(text="50% ✓", chunks=1).to_headers()) == Scenario(
        text="50% ✓", chunks=1)


@pytest.mark.parametrize("model, headers", [("gpt-fake?chunkz=1", {}), ("gpt-fake?chunks=-1", {}),
                                            ("gpt-fake", {"X-Fake-Status": "200"}),
                                            ("gpt-fake", {"X-Fake-Nope": "1"}),
                                            ("gpt-fake?text=x&chunk_bytes=3", {})])
def test_parse_scenario_rejects_bad_knobs(model: str, headers: dict[str, str]) -> None:
    with pytest.raises(ScenarioError):
        parse_scenario(model, headers)


# ---------------------------------------------------------------- over the wire


def test_non_stream_chat_has_openai_shape(fake: FakeOpenAI) -> None:
    response, raw = request(fake, "POST", CHAT, {"model": "gpt-fake", "messages": MESSAGES})
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    body = json.loads(raw)
    tokens = fake_tokens(Scenario())
    assert body["id"].startswith("chatcmpl-") and isinstance(body["created"], int)
    assert {k: v for k, v in body.items() if k not in ("id", "created")} == {
        "object": "chat.completion",
        "model": "gpt-fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": DEFAULT_TEXT},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": len(tokens),
                  "total_tokens": 7 + len(tokens)},
    }
    [recorded] = fake.stats.requests
    assert (recorded.method, recorded.path) == ("POST", CHAT)
    assert recorded.headers["authorization"] == AUTH["Authorization"]
    assert recorded.body == {"model": "gpt-fake", "messages": MESSAGES}


def test_stream_framing_is_exact(fake: FakeOpenAI) -> None:
    status, headers, chunks, complete = stream_raw(
        fake, {"model": "gpt-fake", "messages": MESSAGES}, {"X-Fake-Chunks": "5"})
    assert status == 200 and complete
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["transfer-encoding"] == "chunked"
    assert "content-length" not in headers
    assert chunks.count(b": keep-alive\n\n") == 1
    payloads = events(chunks)
    assert payloads[-1] == b"[DONE]"
    parsed = [json.loads(p) for p in payloads[:-1]]
    ident, created = parsed[0]["id"], parsed[0]["created"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": "gpt-fake",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    tokens = fake_tokens(Scenario(chunks=5))
    assert parsed == ([chunk({"role": "assistant", "content": ""})]
                      + [chunk({"content": t}) for t in tokens]
                      + [chunk({}, "stop")])
    assert fake.stats.wait_for(lambda s: s.streams_completed == 1, timeout=TIMEOUT)
    assert (fake.stats.streams_started, fake.stats.chunks_written, fake.stats.client_disconnects) == (1, 5, 0)


def test_stream_include_usage_adds_usage_chunk(fake: FakeOpenAI) -> None:
    body = {"model": "gpt-fake?chunks=3", "messages": [{"role": "user", "content": "one two"}],
            "stream_options": {"include_usage": True}}
    _, _, chunks, complete = stream_raw(fake, body)
    payloads = events(chunks)
    assert complete and payloads[-1] == b"[DONE]"
    usage_chunk = json.loads(payloads[-2])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    finish = json.loads(payloads[-3])
    assert finish["choices"][0]["finish_reason"] == "stop" and finish["usage"] is None
    assert "".join(content_of(payloads)) == "w0 w1 w2"


def test_stream_without_include_usage_has_no_usage(fake: FakeOpenAI) -> None:
    _, _, chunks, _ = stream_raw(fake, {"model": "gpt-fake?chunks=2", "messages": []})
    assert all("usage" not in json.loads(p) for p in events(chunks)[:-1])


def test_legacy_completions_stream_and_non_stream(fake: FakeOpenAI) -> None:
    body = {"model": "gpt-fake-instruct?chunks=3", "prompt": "Say three words"}
    _, _, chunks, complete = stream_raw(fake, body, path="/v1/completions")
    payloads = events(chunks)
    assert complete and payloads[-1] == b"[DONE]"
    parsed = [json.loads(p) for p in payloads[:-1]]
    assert all(p["object"] == "text_completion" and p["id"].startswith("cmpl-") for p in parsed)
    assert [p["choices"] for p in parsed] == (
        [[{"index": 0, "text": t, "logprobs": None, "finish_reason": None}] for t in ["w0", " w1", " w2"]]
        + [[{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}]])

    response, raw = request(fake, "POST", "/v1/completions", body)
    answer = json.loads(raw)
    assert response.status == 200 and answer["object"] == "text_completion"
    assert answer["choices"] == [{"index": 0, "text": "w0 w1 w2", "logprobs": None, "finish_reason": "stop"}]
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_utf8_text_header_streams_intact(fake: FakeOpenAI) -> None:
    text = "Grüße, 世界 — ✓ done"
    headers = {"X-Fake-Text": urllib.parse.quote(text)}
    _, _, chunks, complete = stream_raw(fake, {"model": "gpt-fake", "messages": []}, headers)
    assert complete and "".join(content_of(events(chunks))) == text
    _, raw = request(fake, "POST", CHAT, {"model": "gpt-fake", "messages": []}, headers)
    assert json.loads(raw)["choices"][0]["message"]["content"] == text


@pytest.mark.parametrize("authorization", ["Bearer sk-wrong-key-123456789", None])
def test_bad_or_missing_key_is_401(fake: FakeOpenAI, authorization: str | None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    headers = {"Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    conn.request("POST", CHAT, body=b'{"model": "gpt-fake", "messages": []}', headers=headers)
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    assert response.status == 401
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "invalid_api_key")
    if authorization:
        assert error["message"].startswith("Incorrect API key provided: ")
        assert "sk-wrong-key-123456789" not in error["message"]
        assert "6789" in error["message"]  # the tail, as OpenAI shows it


def test_status_knob_429_carries_retry_after(fake: FakeOpenAI) -> None:
    response, raw = request(fake, "POST", CHAT, {"model": "gpt-fake", "messages": [], "stream": True},
                            {"X-Fake-Status": "429", "X-Fake-Retry-After": "7"})
    assert response.status == 429 and response.getheader("Retry-After") == "7"
    error = json.loads(raw)["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")

    response, _ = request(fake, "POST", CHAT, {"model": "gpt-fake?status=429", "messages": []})
    assert response.getheader("Retry-After") == "1"


def test_status_knob_500(fake: FakeOpenAI) -> None:
    response, raw = request(fake, "POST", CHAT, {"model": "gpt-fake?status=500", "messages": []})
    assert response.status == 500 and response.getheader("Retry-After") is None
    assert json.loads(raw) == {"error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error", "param": None, "code": None}}
    assert fake.stats.streams_started == 0


def test_cut_after_leaves_chunked_body_incomplete(fake: FakeOpenAI) -> None:
    _, _, chunks, complete = stream_raw(fake, {"model": "gpt-fake?chunks=5&cut_after=2", "messages": []})
    assert not complete
    payloads = events(chunks)
    assert b"[DONE]" not in payloads
    assert content_of(payloads) == fake_tokens(Scenario(chunks=5))[:2]
    assert all(json.loads(p)["choices"][0]["finish_reason"] is None for p in payloads)
    assert fake.stats.wait_for(lambda s: s.connections_closed == 1, timeout=TIMEOUT)
    assert fake.stats.streams_completed == 0 and fake.stats.client_disconnects == 0

    # http.client sees the same thing as an incomplete read.
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    conn.request("POST", CHAT, body=json.dumps(
        {"model": "gpt-fake?chunks=5&cut_after=2", "messages": [], "stream": True}), headers=AUTH)
    with pytest.raises(http.client.IncompleteRead):
        conn.getresponse().read()
    conn.close()


def test_cut_after_non_stream_truncates_body(fake: FakeOpenAI) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    conn.request("POST", CHAT, body=json.dumps({"model": "gpt-fake?cut_after=1", "messages": []}),
                 headers=AUTH)
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead):
        response.read()
    conn.close()


def test_error_after_ends_stream_with_error_event(fake: FakeOpenAI) -> None:
    _, _, chunks, complete = stream_raw(fake, {"model": "gpt-fake", "messages": []},
                                        {"X-Fake-Chunks": "5", "X-Fake-Error-After": "2"})
    assert complete  # the body still ends with its zero-length chunk
    payloads = events(chunks)
    assert payloads[-1] == json.dumps(
        {"error": {"message": MID_STREAM_ERROR_MESSAGE, "type": "server_error"}}).encode()
    assert b"[DONE]" not in payloads
    assert content_of(payloads) == ["w0", " w1"]
    assert fake.stats.wait_for(lambda s: s.chunks_written == 2, timeout=TIMEOUT)
    assert fake.stats.streams_completed == 0


def test_model_name_knobs_and_header_override(fake: FakeOpenAI) -> None:
    _, _, chunks, _ = stream_raw(fake, {"model": "gpt-fake?chunks=4&text=abcdefgh", "messages": []})
    assert content_of(events(chunks)) == ["ab", "cd", "ef", "gh"]
    assert json.loads(events(chunks)[0])["model"] == "gpt-fake?chunks=4&text=abcdefgh"
    _, _, chunks, _ = stream_raw(fake, {"model": "gpt-fake?chunks=4", "messages": []}, {"X-Fake-Chunks": "2"})
    assert content_of(events(chunks)) == ["w0", " w1"]


def test_chunk_bytes_knob(fake: FakeOpenAI) -> None:
    scenario = Scenario(chunks=3, chunk_bytes=1000)
    _, _, chunks, complete = stream_raw(fake, {"model": scenario.to_model(), "messages": []})
    assert complete and content_of(events(chunks)) == fake_tokens(scenario)


def test_bad_knob_is_400(fake: FakeOpenAI) -> None:
    response, raw = request(fake, "POST", CHAT, {"model": "gpt-fake?chunks=lots", "messages": []})
    assert response.status == 400
    assert json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_chunked_request_body_is_accepted(fake: FakeOpenAI) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    parts = [b'{"model": "gpt-fake?chunks=2", ', b'"messages": [{"role": "user", ', b'"content": "hi"}]}']
    conn.request("POST", CHAT, body=iter(parts), headers={**AUTH, "Content-Type": "application/json"},
                 encode_chunked=True)
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 200
    assert answer["choices"][0]["message"]["content"] == "w0 w1"
    [recorded] = fake.stats.requests
    assert recorded.headers["transfer-encoding"] == "chunked"
    assert recorded.body == json.loads(b"".join(parts))


def test_client_disconnect_is_seen_during_the_pause(fake: FakeOpenAI) -> None:
    # A 5 s pause between chunks: only the select/peek watch can notice in time.
    sock, reader = open_raw(fake, CHAT, {"model": "gpt-fake?chunks=3&delay_ms=5000",
                                         "messages": [], "stream": True})
    status, _ = read_head(reader)
    assert status == 200
    assert content_of(events([read_chunk(reader), read_chunk(reader), read_chunk(reader)])) == ["w0"]
    started = time.monotonic()
    reader.close()
    sock.close()
    assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, timeout=TIMEOUT)
    assert time.monotonic() - started < 1.0
    assert fake.stats.wait_for(lambda s: s.connections_open == 0, timeout=TIMEOUT)
    assert (fake.stats.chunks_written, fake.stats.streams_completed) == (1, 0)


def test_client_disconnect_during_first_delay(fake: FakeOpenAI) -> None:
    sock, reader = open_raw(fake, CHAT, {"model": "gpt-fake?first_delay_ms=5000", "messages": []})
    assert fake.stats.wait_for(lambda s: len(s.requests) == 1, timeout=TIMEOUT)
    reader.close()
    sock.close()
    assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, timeout=TIMEOUT)


def test_keep_alive_serves_two_requests_on_one_connection(fake: FakeOpenAI) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    try:
        for stream in (True, False):
            body = json.dumps({"model": "gpt-fake?chunks=2", "messages": [], "stream": stream})
            conn.request("POST", CHAT, body=body, headers=AUTH)
            response = conn.getresponse()
            assert response.status == 200 and response.getheader("Connection") == "keep-alive"
            assert response.read()
            assert not response.will_close
        assert fake.stats.wait_for(lambda s: len(s.requests) == 2, timeout=TIMEOUT)
        assert (fake.stats.connections_open, fake.stats.connections_closed) == (1, 0)
    finally:
        conn.close()


def test_unknown_route_and_models(fake: FakeOpenAI) -> None:
    response, raw = request(fake, "POST", "/v1/embeddingz", {"model": "x"})
    assert response.status == 404
    assert json.loads(raw)["error"]["message"] == "Invalid URL (POST /v1/embeddingz)"
    response, raw = request(fake, "GET", "/v1/models")
    assert response.status == 200
    models = json.loads(raw)
    assert models["object"] == "list" and models["data"][0]["id"] == "gpt-fake"


def test_stop_ends_inflight_stream_and_is_idempotent() -> None:
    fake = FakeOpenAI().start()
    sock, reader = open_raw(fake, CHAT, {"model": "gpt-fake?chunks=3&delay_ms=5000",
                                         "messages": [], "stream": True})
    with sock, reader:
        read_head(reader)
        assert fake.stats.wait_for(lambda s: s.chunks_written == 1, timeout=TIMEOUT)
        started = time.monotonic()
        fake.stop()
        assert time.monotonic() - started < 1.0
        _, complete = read_chunks(reader)
        assert not complete
    assert fake.stats.connections_open == 0 and fake.stats.client_disconnects == 0
    fake.stop()


def test_stats_reset_keeps_open_connection_gauge(fake: FakeOpenAI) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    try:
        conn.request("GET", "/v1/models", headers=AUTH)
        conn.getresponse().read()
        fake.stats.reset()
        assert fake.stats.requests == [] and fake.stats.bytes_written == 0
        assert fake.stats.connections_open == 1
    finally:
        conn.close()


def test_tool_knob_is_read_by_the_openai_sdk_as_a_tool_call(fake):
    """The ``tool`` knob's deltas are OpenAI's: the SDK's stream helper assembles them."""
    import openai

    from mlstream.testing.fake_openai import TOOL_ARGUMENTS, TOOL_CALL_ID

    api = openai.OpenAI(base_url=fake.url + "/v1", api_key=DEFAULT_API_KEY, max_retries=0, timeout=TIMEOUT)
    model = Scenario(tool="lookup").to_model()
    with api.chat.completions.stream(model=model, messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    whole = api.chat.completions.create(model=model, messages=MESSAGES)
    for answer in (final, whole):
        call = answer.choices[0].message.tool_calls[0]
        assert (call.id, call.function.name, call.function.arguments) == (TOOL_CALL_ID, "lookup", TOOL_ARGUMENTS)
        assert answer.choices[0].finish_reason == "tool_calls"
        assert answer.choices[0].message.content == DEFAULT_TEXT
