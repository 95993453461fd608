"""The bytes of a streamed answer, exactly, and the writer's loop over a real channel. No sockets."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlstream.errors import ClientGone, UpstreamError
from mlstream.fronts.mlcommons.events import (
    ML_COMMONS_EVENTS,
    content_event,
    error_event,
    last_event,
)
from mlstream.providers.events import Delta, Done, Failure, Started
from mlstream.server.responses import json_bytes
from mlstream.server.sse_writer import (
    HEARTBEAT,
    LAST_CHUNK,
    SSEWriter,
    chunk,
    first_item,
    gzip_framing,
    stream_head,
    unframed,
)
from mlstream.wire.sse import SSEDecoder, encode_data
from mlstream.streaming.channel import Channel

ENVELOPE = b'data: {"inference_results":[{"output":[{"name":"response","dataAsMap":%b}]}]}\n\n'


@pytest.mark.parametrize("content, data_as_map", [
    ("Hamlet", b'{"content":"Hamlet","is_last":false}'),
    ('a "quote"\nand a line', b'{"content":"a \\"quote\\"\\nand a line","is_last":false}'),
    ("caf\u00e9 \u2603", '{"content":"caf\u00e9 \u2603","is_last":false}'.encode()),
    ("\ud800", b'{"content":"\\ud800","is_last":false}'),  # a lone surrogate stays a JSON escape
    ({"toolUse": {"name": "f"}}, b'{"content":{"toolUse": {"name": "f"}},"is_last":false}'),
], ids=["text", "escapes", "utf8", "surrogate", "tool-use"])
def test_content_event_bytes(content, data_as_map: bytes) -> None:
    assert content_event(content) == ENVELOPE % data_as_map


def test_last_and_error_event_bytes() -> None:
    assert last_event(None, None) == ENVELOPE % b'{"content":"","is_last":true}'
    assert last_event("stop", {"prompt_tokens": 3}) == (
        ENVELOPE % b'{"content":"","is_last":true,"finish_reason":"stop","usage":{"prompt_tokens":3}}')
    assert error_event(UpstreamError("it broke")) == b'data: {"error":"it broke"}\n\n'


def test_framing_bytes() -> None:
    assert chunk(b"hello") == b"5\r\nhello\r\n"
    assert chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert HEARTBEAT == b": ping\n\n" and LAST_CHUNK == b"0\r\n\r\n"


def test_stream_head() -> None:
    head = stream_head("mlstream/1", "Tue, 01 Dec 2026 08:00:00 GMT", "rid-1", chunked=True, close=False)
    assert head == (b"HTTP/1.1 200 OK\r\nServer: mlstream/1\r\nDate: Tue, 01 Dec 2026 08:00:00 GMT\r\n"
                    b"Content-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
                    b"X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\nX-Request-Id: rid-1\r\n\r\n")
    close = stream_head("s", "d", "r", chunked=False, close=True)
    assert b"Transfer-Encoding" not in close and close.endswith(b"X-Request-Id: r\r\nConnection: close\r\n\r\n")


def run(items, *, chunked: bool = True, writes: list[bytes] | None = None) -> tuple[SSEWriter, bytes]:
    channel = Channel(len(items) + 1)
    for item in items:
        assert channel.put(item, 0)
    written: list[bytes] = [] if writes is None else writes
    writer = SSEWriter(written.append, events=ML_COMMONS_EVENTS, chunked=chunked, heartbeat=5.0, started=0.0)
    first, status = first_item(channel, 5.0)
    writer.run(channel, first, b"HEAD|")
    return writer, b"".join(written)


def test_the_head_goes_out_in_the_same_write_as_the_first_event() -> None:
    writes: list[bytes] = []
    run([Started(200), Delta("a"), Done(None, None)], writes=writes)
    assert writes[0].startswith(b"HEAD|") and b'"content":"a"' in writes[0]


def events(body: bytes) -> list[dict]:
    return [json.loads(event.data) for event in SSEDecoder().feed(body)]


def test_a_whole_stream_unframed_is_head_events_and_the_final_event() -> None:
    writer, out = run([Started(200), Delta("a"), Delta("b"), Done("stop", None)], chunked=False)
    assert out.startswith(b"HEAD|") and writer.outcome == "completed" and writer.events == 2
    data = [e["inference_results"][0]["output"][0]["dataAsMap"] for e in events(out[5:])]
    assert data == [{"content": "a", "is_last": False}, {"content": "b", "is_last": False},
                    {"content": "", "is_last": True, "finish_reason": "stop"}]


def test_chunked_output_ends_with_the_last_chunk() -> None:
    writer, out = run([Started(200), Delta("a"), Done(None, None)])
    assert out.endswith(b"\r\n" + LAST_CHUNK) and writer.bytes_out == len(out) - len(b"HEAD|")


@pytest.mark.parametrize("error, outcome", [(UpstreamError("broke"), "failed"), (ClientGone("gone"), "client_gone")])
def test_a_failure_mid_stream_is_one_final_error_event(error, outcome: str) -> None:
    writer, out = run([Started(200), Delta("a"), Failure(error)], chunked=False)
    assert writer.outcome == outcome and (writer.failure is error) is (outcome == "failed")
    assert events(out[5:])[-1] == {"error": error.reason}


def test_first_item_is_the_status_and_the_item_after_started() -> None:
    channel = Channel(4)
    channel.put(Started(201), 0)
    channel.put(Failure(UpstreamError("throttled", upstream_status=429)), 0)
    item, status = first_item(channel, 5.0)
    assert status == 201 and isinstance(item, Failure)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_the_token_fast_path_is_sse_encode_data_of_the_envelope(text: str) -> None:
    """content_event puts sse's one-line framing around the JSON itself: the same bytes
    encode_data makes of the envelope, and a decoder gets the text back."""
    envelope = {"inference_results": [{"output": [{"name": "response",
                                                    "dataAsMap": {"content": text, "is_last": False}}]}]}
    assert content_event(text) == encode_data(json_bytes(envelope))
    decoded = SSEDecoder().feed(content_event(text))
    assert len(decoded) == 1
    assert json.loads(decoded[0].data)["inference_results"][0]["output"][0]["dataAsMap"]["content"] == text \
        or any(0xD800 <= ord(c) <= 0xDFFF for c in text)  # lone surrogates cannot round-trip through UTF-8


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "http10"])
def test_gzip_framing_flushes_every_event(chunked: bool) -> None:
    """Each framed event decompresses on its own, at once; the finish is the gzip trailer."""
    frame, finish = gzip_framing(chunk if chunked else unframed, LAST_CHUNK if chunked else b"")
    decoder = zlib.decompressobj(31)
    events = [content_event("Ham"), content_event("let"), HEARTBEAT, last_event("stop", None)]
    for event in events:
        framed = frame(event)
        data = framed.split(b"\r\n", 1)[1][:-2] if chunked else framed
        assert decoder.decompress(data) == event  # nothing held back for the next event
    tail = finish()
    if chunked:
        assert tail.endswith(LAST_CHUNK)
        tail = tail[: -len(LAST_CHUNK)].split(b"\r\n", 1)[1][:-2]
    assert decoder.decompress(tail) == b"" and decoder.eof and not decoder.unused_data


def test_a_gzip_stream_head_says_so() -> None:
    head = stream_head("s", "d", "r", chunked=True, close=False, gzip=True)
    assert b"\r\nContent-Encoding: gzip\r\nVary: Accept-Encoding\r\n" in head
    assert b"Content-Encoding" not in stream_head("s", "d", "r", chunked=True, close=False)
