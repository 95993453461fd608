"""``framing.ChunkedBody`` (a chunked response body fed in pieces) and
``speedups.chunked_read`` (the provider reader's every-chunk-that-arrived read),
without sockets: bodies split at every offset, and http.client's reader handing over
at each point of its chunk state."""

from __future__ import annotations

import http.client
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlstream.errors import ProtocolError
from mlstream.wire.framing import MAX_CHUNK_LINE, MAX_TRAILER_BYTES, ChunkedBody
from mlstream.speedups import chunked_read

EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(5)]
BODY = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"

CASES = [
    pytest.param(BODY, b"".join(EVENTS), id="events, one chunk each"),
    pytest.param(b"3;ext=1\r\nabc\r\n0\r\n\r\n", b"abc", id="chunk extension"),
    pytest.param(b"A\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n", b"0123456789", id="upper-case size, trailer"),
    pytest.param(b"0\r\n\r\n", b"", id="empty body"),
    pytest.param(b"2\r\nab\r\n0\r\n\n", b"ab", id="bare LF ends the trailers"),
]


def _split_feeds(body: bytes, cut: int) -> tuple[bytes, bool]:
    decoder = ChunkedBody()
    out = decoder.feed(body[:cut]) + decoder.feed(body[cut:])
    return out, decoder.done


@pytest.mark.parametrize(("body", "data"), CASES)
def test_the_data_is_the_same_wherever_the_body_is_split(body: bytes, data: bytes) -> None:
    for cut in range(len(body) + 1):
        assert _split_feeds(body, cut) == (data, True), cut


@pytest.mark.parametrize(("body", "data"), CASES)
def test_byte_by_byte(body: bytes, data: bytes) -> None:
    decoder = ChunkedBody()
    out = b"".join(decoder.feed(body[i:i + 1]) for i in range(len(body)))
    assert (out, decoder.done) == (data, True)


def test_bytes_after_the_end_are_not_data() -> None:
    decoder = ChunkedBody()
    assert decoder.feed(b"1\r\na\r\n0\r\n\r\nHTTP/1.1 200") == b"a" and decoder.done
    assert decoder.feed(b"more") == b""


def test_an_unfinished_body_is_not_done() -> None:
    decoder = ChunkedBody()
    assert decoder.feed(BODY[:-3]) == b"".join(EVENTS)
    assert not decoder.done


@pytest.mark.parametrize("body", [
    pytest.param(b"zz\r\nab\r\n", id="size not hex"),
    pytest.param(b"-2\r\nab\r\n", id="negative size"),
    pytest.param(b"2\r\nabXY0\r\n\r\n", id="no CRLF after the data"),
    pytest.param(b"1" * (MAX_CHUNK_LINE + 2), id="size line too long"),
    pytest.param(b"0\r\n" + b"X: y\r\n" * (MAX_TRAILER_BYTES // 6 + 2), id="trailers too long"),
])
def test_malformed_bodies_raise(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        ChunkedBody().feed(body)


# --- chunked_read over http.client's own response -------------------------------------


class _Socket:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self._data), buffer_size=64)  # small: many refills


class _Urllib3Like:
    """What chunked_read looks at of a urllib3 response: its headers and http.client's response."""

    def __init__(self, inner: http.client.HTTPResponse) -> None:
        self._fp = inner
        self.headers = {"Content-Encoding": inner.headers.get("Content-Encoding", "")}


def _response(body: bytes) -> http.client.HTTPResponse:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    inner = http.client.HTTPResponse(_Socket(head + body))  # type: ignore[arg-type]
    inner.begin()
    return inner


@pytest.mark.parametrize("before", [0, 1, 3, 7, 12, 20])
def test_chunked_read_takes_over_wherever_http_client_stopped(before: int) -> None:
    inner = _response(BODY)
    got = b""
    while len(got) < before:  # http.client's read1 first, as the writer's thread reads the start
        got += inner.read1(min(3, before - len(got)))
    read = chunked_read(_Urllib3Like(inner), ChunkedBody)
    assert read is not None
    while data := read(65536):
        got += data
    assert got == b"".join(EVENTS)
    # closed as http.client closes a body read to its end: a drain reads nothing more
    assert inner.fp is None and inner.read() == b""


def test_chunked_read_says_when_a_body_is_not_its_to_read() -> None:
    inner = _response(BODY)
    inner.chunked = False
    assert chunked_read(_Urllib3Like(inner), ChunkedBody) is None
    gzipped = _response(BODY)
    gzipped.headers["Content-Encoding"] = "gzip"
    assert chunked_read(_Urllib3Like(gzipped), ChunkedBody) is None


def test_a_body_cut_short_is_an_incomplete_read() -> None:
    read = chunked_read(_Urllib3Like(_response(BODY[:-10])), ChunkedBody)
    assert read is not None
    with pytest.raises(http.client.IncompleteRead):
        while read(65536):
            pass


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=12),
       cuts=st.lists(st.integers(0, 600), max_size=6), extension=st.booleans(), upper=st.booleans())
def test_any_body_fed_in_any_pieces_gives_its_data_whole_chunks_or_not(pieces, cuts, extension, upper) -> None:
    """Whole chunks taken at once and chunks split across feeds (the other path) agree."""
    size = (lambda n: b"%X" % n) if upper else (lambda n: b"%x" % n)
    body = b"".join(size(len(p)) + (b";x=1" if extension else b"") + b"\r\n" + p + b"\r\n" for p in pieces)
    body += b"0\r\n\r\n"
    decoder, out, at = ChunkedBody(), [], 0
    for cut in sorted(min(c, len(body)) for c in cuts) + [len(body)]:
        out.append(decoder.feed(body[at:cut]))
        at = cut
    assert b"".join(out) == b"".join(pieces) and decoder.done
    one_by_one = ChunkedBody()
    assert b"".join(one_by_one.feed(body[i:i + 1]) for i in range(len(body))) == b"".join(pieces)


def test_a_whole_chunk_without_its_crlf_is_refused() -> None:
    with pytest.raises(ProtocolError, match="CRLF"):
        ChunkedBody().feed(b"3\r\nabcXY0\r\n\r\n")
