"""SSE encoder and decoder: tables of (bytes, expected events), plus every-offset splits."""

from __future__ import annotations

import pytest

from mlstream.errors import ProtocolError
from mlstream.wire.sse import SSEDecoder, SSEEvent, encode_comment, encode_data


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


# ---------------------------------------------------------------- encoding

ENCODE_DATA = [
    ("plain", "hello", b"data: hello\n\n"),
    ("empty", "", b"data: \n\n"),
    ("json", '{"a":1}', b'data: {"a":1}\n\n'),
    ("utf8", "héllo ✓", "data: héllo ✓\n\n".encode()),
    ("lf", "a\nb", b"data: a\ndata: b\n\n"),
    ("crlf", "a\r\nb", b"data: a\ndata: b\n\n"),
    ("cr", "a\rb", b"data: a\ndata: b\n\n"),
    ("trailing-newline", "a\n", b"data: a\ndata: \n\n"),
    ("lone-surrogate", "a\ud800b", b"data: a?b\n\n"),
]


@pytest.mark.parametrize("data, expected", [c[1:] for c in ENCODE_DATA],
                         ids=[c[0] for c in ENCODE_DATA])
def test_encode_data(data: str, expected: bytes) -> None:
    assert encode_data(data) == expected


@pytest.mark.parametrize("data", ["hello", "", "a\nb", "a\r\nb\rc", "x\n\ny", "émoji 🎉"],
                         ids=["plain", "empty", "lf", "mixed", "blank-line", "utf8"])
def test_encode_data_round_trips(data: str) -> None:
    normalised = data.replace("\r\n", "\n").replace("\r", "\n")
    assert decode(encode_data(data)) == [SSEEvent(normalised)]


ENCODE_COMMENT = [
    ("default", None, b": ping\n\n"),
    ("text", "keep-alive", b": keep-alive\n\n"),
    ("multi-line", "a\nb", b": a\n: b\n\n"),
]


@pytest.mark.parametrize("text, expected", [c[1:] for c in ENCODE_COMMENT],
                         ids=[c[0] for c in ENCODE_COMMENT])
def test_encode_comment(text: str | None, expected: bytes) -> None:
    encoded = encode_comment() if text is None else encode_comment(text)
    assert encoded == expected
    assert decode(encoded) == []


# ---------------------------------------------------------------- decoding, whole input

DECODE = [
    ("lf", b"data: a\n\n", [SSEEvent("a")]),
    ("crlf", b"data: a\r\n\r\n", [SSEEvent("a")]),
    ("cr", b"data: a\r\r", [SSEEvent("a")]),
    ("mixed-endings", b"data: a\r\ndata: b\rdata: c\n\r\n", [SSEEvent("a\nb\nc")]),
    ("two-events", b"data: a\n\ndata: b\n\n", [SSEEvent("a"), SSEEvent("b")]),
    ("no-space-after-colon", b"data:a\n\n", [SSEEvent("a")]),
    ("only-one-space-stripped", b"data:  a \n\n", [SSEEvent(" a ")]),
    ("colon-in-value", b'data: {"k": "v:w"}\n\n', [SSEEvent('{"k": "v:w"}')]),
    ("multi-line-data", b"data: a\ndata: b\n\n", [SSEEvent("a\nb")]),
    ("empty-data-line", b"data\n\n", [SSEEvent("")]),
    ("empty-data-lines", b"data:\ndata:\n\n", [SSEEvent("\n")]),
    ("event-type", b"event: delta\ndata: x\n\n", [SSEEvent("x", event="delta")]),
    ("event-type-resets", b"event: e\ndata: 1\n\ndata: 2\n\n",
     [SSEEvent("1", event="e"), SSEEvent("2")]),
    ("empty-event-type", b"event:\ndata: x\n\n", [SSEEvent("x")]),
    ("id", b"id: 7\ndata: x\n\n", [SSEEvent("x", id="7")]),
    ("id-persists", b"id: 7\ndata: x\n\ndata: y\n\n", [SSEEvent("x", id="7"), SSEEvent("y", id="7")]),
    ("id-reset-empty", b"id: 7\ndata: x\n\nid\ndata: y\n\n", [SSEEvent("x", id="7"), SSEEvent("y", id="")]),
    ("id-with-nul-ignored", b"id: 1\ndata: x\n\nid: a\x00b\ndata: y\n\n",
     [SSEEvent("x", id="1"), SSEEvent("y", id="1")]),
    ("retry", b"retry: 3000\ndata: x\n\n", [SSEEvent("x", retry=3000)]),
    ("retry-not-digits", b"retry: 3s\ndata: x\n\n", [SSEEvent("x")]),
    ("retry-negative", b"retry: -1\ndata: x\n\n", [SSEEvent("x")]),
    ("retry-per-event", b"retry: 5\ndata: x\n\ndata: y\n\n", [SSEEvent("x", retry=5), SSEEvent("y")]),
    ("retry-before-data-event", b"retry: 5\n\ndata: y\n\n", [SSEEvent("y", retry=5)]),
    ("comment", b": ping\n\n", []),
    ("comment-inside-event", b"data: a\n: note\ndata: b\n\n", [SSEEvent("a\nb")]),
    ("unknown-field", b"foo: bar\ndata: x\n\n", [SSEEvent("x")]),
    ("field-name-case-sensitive", b"Data: x\n\n", []),
    ("field-without-colon", b"event\ndata: x\n\n", [SSEEvent("x")]),
    ("no-data-not-dispatched", b"event: e\n\n", []),
    ("blank-keep-alives", b"\n\n\ndata: x\n\n\n\n", [SSEEvent("x")]),
    ("bom", b"\xef\xbb\xbfdata: x\n\n", [SSEEvent("x")]),
    ("bom-only-at-start", b"data: \xef\xbb\xbfx\n\n", [SSEEvent("\ufeffx")]),
    ("utf8", "data: héllo 🎉\n\n".encode(), [SSEEvent("héllo 🎉")]),
    ("invalid-utf8-replaced", b"data: a\xffb\n\n", [SSEEvent("a\ufffdb")]),
    ("truncated-utf8-before-newline", b"data: a\xe2\x82\n\n", [SSEEvent("a\ufffd")]),
    ("unfinished-event-not-dispatched", b"data: a\n", []),
    ("openai-done", b"data: {\"x\":1}\n\ndata: [DONE]\n\n", [SSEEvent('{"x":1}'), SSEEvent("[DONE]")]),
]


@pytest.mark.parametrize("stream, expected", [c[1:] for c in DECODE], ids=[c[0] for c in DECODE])
def test_decode(stream: bytes, expected: list[SSEEvent]) -> None:
    assert decode(stream) == expected


@pytest.mark.parametrize("stream, expected", [c[1:] for c in DECODE], ids=[c[0] for c in DECODE])
def test_decode_byte_by_byte(stream: bytes, expected: list[SSEEvent]) -> None:
    assert decode(*(stream[i:i + 1] for i in range(len(stream)))) == expected


# ---------------------------------------------------------------- decoding, split anywhere

MULTI = (
    b"\xef\xbb\xbf: hello\r\n"
    b"event: delta\r\nid: 1\r\ndata: caf\xc3\xa9 \xf0\x9f\x8e\x89\r\n\r\n"
    b"data: line one\rdata: line two\r\r"
    b"\n\n"
    b"retry: 100\ndata: {\"a\": [1, 2]}\n\n"
    b"data: [DONE]\n\n"
)
MULTI_EVENTS = [
    SSEEvent("café 🎉", event="delta", id="1"),
    SSEEvent("line one\nline two", id="1"),
    SSEEvent('{"a": [1, 2]}', id="1", retry=100),
    SSEEvent("[DONE]", id="1"),
]


def test_multi_event_stream_whole() -> None:
    assert decode(MULTI) == MULTI_EVENTS


@pytest.mark.parametrize("offset", range(len(MULTI) + 1))
def test_multi_event_stream_split_at_every_offset(offset: int) -> None:
    assert decode(MULTI[:offset], MULTI[offset:]) == MULTI_EVENTS


def test_multi_event_stream_split_at_every_pair_of_offsets() -> None:
    n = len(MULTI)
    for i in range(0, n + 1, 3):
        for j in range(i, n + 1, 5):
            assert decode(MULTI[:i], MULTI[i:j], MULTI[j:]) == MULTI_EVENTS, (i, j)


def test_multi_event_stream_byte_by_byte() -> None:
    assert decode(*(MULTI[i:i + 1] for i in range(len(MULTI)))) == MULTI_EVENTS


def test_crlf_split_between_cr_and_lf_is_one_line_ending() -> None:
    # If the "\n" were a second line ending, the blank line would end the event early.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"") == []         # an empty chunk does not forget the pending "\r"
    assert decoder.feed(b"\n\r\n") == [SSEEvent("a\nb")]


def test_multibyte_character_split_across_feeds() -> None:
    encoded = "data: 🎉\n\n".encode()
    emoji_at = encoded.index(b"\xf0")
    for cut in range(emoji_at + 1, emoji_at + 4):
        assert decode(encoded[:cut], encoded[cut:]) == [SSEEvent("🎉")]


def test_bom_split_across_feeds() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEEvent("x")]


def test_partial_bom_then_other_bytes_is_kept() -> None:
    # Not a BOM after all: the bytes are data (invalid UTF-8, replaced), not dropped.
    assert decode(b"data: \xef", b"x\n\n") == [SSEEvent("\ufffdx")]
    assert decode(b"\xef", b"\xbbx\n") == []


def test_events_returned_in_order_from_one_feed() -> None:
    stream = b"".join(encode_data(str(i)) for i in range(50))
    assert decode(stream) == [SSEEvent(str(i)) for i in range(50)]


# ---------------------------------------------------------------- has_pending

HAS_PENDING = [
    ("nothing", b"", False),
    ("complete-event", b"data: a\n\n", False),
    ("partial-line", b"data: a", True),
    ("unterminated-event", b"data: a\n", True),
    ("event-field-only", b"event: e\n", True),
    ("comment-only", b": ping\n", False),
    ("blank-lines", b"\n\n", False),
    ("complete-then-partial", b"data: a\n\ndata", True),
    ("trailing-cr", b"data: a\r\r", False),
]


@pytest.mark.parametrize("stream, pending", [c[1:] for c in HAS_PENDING],
                         ids=[c[0] for c in HAS_PENDING])
def test_has_pending(stream: bytes, pending: bool) -> None:
    decoder = SSEDecoder()
    decoder.feed(stream)
    assert decoder.has_pending is pending


# ---------------------------------------------------------------- limits


class SmallDecoder(SSEDecoder):
    MAX_LINE_BYTES = 16
    MAX_EVENT_BYTES = 32


LIMITS = [
    ("line-in-one-chunk", [b"data: " + b"x" * 20 + b"\n\n"]),
    ("unterminated-line", [b"data: " + b"x" * 20]),
    ("line-over-many-chunks", [b"data: "] + [b"xx"] * 10),
    ("long-line-then-short", [b"data: " + b"x" * 20 + b"\ndata: y\n"]),
    ("event-data", [b"data: 0123456789\n"] * 4),
    ("many-empty-data-lines", [b"data:\n"] * 40),
]


@pytest.mark.parametrize("chunks", [c[1] for c in LIMITS], ids=[c[0] for c in LIMITS])
def test_limit_exceeded_raises_protocol_error(chunks: list[bytes]) -> None:
    decoder = SmallDecoder()
    with pytest.raises(ProtocolError):
        for chunk in chunks:
            decoder.feed(chunk)


WITHIN_LIMITS = [
    ("line-at-limit", [b"data: " + b"x" * 10 + b"\n\n"], [SSEEvent("x" * 10)]),
    ("many-events-in-one-chunk", [b"data: 0123456789\n\n" * 10], [SSEEvent("0123456789")] * 10),
    ("event-data-at-limit", [b"data: 0123456789\n"] * 2 + [b"data: 0123456789\n\n"],
     [SSEEvent("0123456789\n0123456789\n0123456789")]),
]


@pytest.mark.parametrize("chunks, expected", [c[1:] for c in WITHIN_LIMITS],
                         ids=[c[0] for c in WITHIN_LIMITS])
def test_within_limits(chunks: list[bytes], expected: list[SSEEvent]) -> None:
    assert decode_with(SmallDecoder(), chunks) == expected


def decode_with(decoder: SSEDecoder, chunks: list[bytes]) -> list[SSEEvent]:
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_default_limits_are_named_and_generous() -> None:
    assert SSEDecoder.MAX_LINE_BYTES >= 64 * 1024
    assert SSEDecoder.MAX_EVENT_BYTES >= SSEDecoder.MAX_LINE_BYTES


def test_protocol_error_is_an_mlstream_error() -> None:
    from mlstream.errors import MLStreamError

    with pytest.raises(MLStreamError, match="longer than"):
        SmallDecoder().feed(b"x" * 100)


# ---------------------------------------------------------------- feed_data: the data only, fast path

def _data_of(*chunks: bytes) -> list[str]:
    decoder = SSEDecoder()
    return [data.decode("utf-8", "replace") for chunk in chunks for data in decoder.feed_data(chunk)]


LF_MULTI = (b": hello\nevent: delta\nid: 1\ndata: caf\xc3\xa9\n\ndata: a\ndata: b\n\n\n\n"
            b"data:x\n\ndata: {\"a\": [1, 2]}\n\n: ping\n\ndata: \xffz\n\ndata: [DONE]\n\n")


@pytest.mark.parametrize("stream, expected", [c[1:] for c in DECODE], ids=[c[0] for c in DECODE])
def test_feed_data_is_the_data_feed_gives(stream: bytes, expected: list[SSEEvent]) -> None:
    assert _data_of(stream) == [event.data for event in expected]
    assert _data_of(*(stream[i:i + 1] for i in range(len(stream)))) == [event.data for event in expected]


@pytest.mark.parametrize("stream", [MULTI, LF_MULTI], ids=["crlf", "lf"])
def test_feed_data_split_at_every_pair_of_offsets(stream: bytes) -> None:
    expected = [event.data for event in decode(stream)]
    assert len(expected) >= 4
    for first in range(len(stream) + 1):
        for second in range(first, len(stream) + 1, 7):
            assert _data_of(stream[:first], stream[first:second], stream[second:]) == expected, (first, second)


def test_feed_data_mixed_with_feed_keeps_one_state() -> None:
    decoder = SSEDecoder()
    got = [*decoder.feed_data(b"data: a\n\nid: 3\ndata: b"), *[e.data.encode() for e in decoder.feed(b"\n\ndata: c")]]
    got += decoder.feed_data(b"\n\ndata: d\n\n")
    assert got == [b"a", b"b", b"c", b"d"]


class _SmallLines(SSEDecoder):
    MAX_LINE_BYTES = 10


@pytest.mark.parametrize("stream", [
    pytest.param(b"data: ok\n\ndata: " + b"x" * 20 + b"\n\n", id="one-line event"),
    pytest.param(b"data: ok\n\nevent: e\ndata: " + b"y" * 20 + b"\n\n", id="event of several lines"),
])
def test_feed_data_enforces_the_line_limit(stream: bytes) -> None:
    with pytest.raises(ProtocolError):
        _SmallLines().feed_data(stream)
