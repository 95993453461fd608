"""SocketBody: the rest of a streamed body read without blocking, after http.client read
its head (and maybe more): each framing (chunked, Content-Length, until the close), bodies
split at every point, "nothing yet" told apart from the end, broken bodies refused, and
the socket's timeout given back. A socket pair stands in for the provider's connection."""

from __future__ import annotations

import http.client
import socket

import pytest

from mlstream.errors import MLStreamError, ProtocolError, UpstreamError
from mlstream.upstream.body import SocketBody


def translate(exc: BaseException) -> MLStreamError:
    return UpstreamError(f"broke: {type(exc).__name__}", kind="connection")


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    ours.settimeout(5.0)
    yield ours, theirs
    ours.close()
    theirs.close()


def begin(ours: socket.socket, theirs: socket.socket, head: bytes) -> http.client.HTTPResponse:
    theirs.sendall(head)
    response = http.client.HTTPResponse(ours)
    response.begin()
    return response


def read_all(body: SocketBody, theirs: socket.socket, pieces: list[bytes]) -> bytes:
    """Send each piece, then read until nothing more has arrived; the data read."""
    data = b""
    for piece in pieces:
        theirs.sendall(piece)
        while (got := body.read()) is not None:
            data += got
            if body.done:
                return data
    return data


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"
CHUNKED_BODY = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


@pytest.mark.parametrize("split", range(1, len(CHUNKED_BODY)))
def test_a_chunked_body_split_anywhere_reads_whole_and_ends(pair, split):
    ours, theirs = pair
    response = begin(ours, theirs, CHUNKED)
    body = SocketBody(ours, response, translate)
    assert body.read() is None  # nothing yet: not the end
    data = read_all(body, theirs, [CHUNKED_BODY[:split], CHUNKED_BODY[split:]])
    assert data == b"".join(EVENTS) and body.done
    assert body.read() == b""


def test_what_http_client_buffered_is_read_first(pair):
    ours, theirs = pair
    # The head and the first chunks in one packet: http.client's reader holds the rest.
    response = begin(ours, theirs, CHUNKED + CHUNKED_BODY[:30])
    first = response.read1(5)  # the writer's thread read a little through http.client
    body = SocketBody(ours, response, translate)
    data = first + read_all(body, theirs, [CHUNKED_BODY[30:]])
    assert data == b"".join(EVENTS) and body.done


def test_a_content_length_body_ends_at_its_length(pair):
    ours, theirs = pair
    payload = b"x" * 100
    response = begin(ours, theirs, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    body = SocketBody(ours, response, translate)
    assert read_all(body, theirs, [payload[:40], payload[40:]]) == payload and body.done


def test_a_body_until_the_close_ends_at_the_close(pair):
    ours, theirs = pair
    response = begin(ours, theirs, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
    body = SocketBody(ours, response, translate)
    assert read_all(body, theirs, [b"some bytes"]) == b"some bytes"
    theirs.shutdown(socket.SHUT_WR)
    assert body.read() == b"" and body.done


def test_a_chunked_body_cut_short_is_a_broken_connection(pair):
    ours, theirs = pair
    response = begin(ours, theirs, CHUNKED)
    body = SocketBody(ours, response, translate)
    read_all(body, theirs, [CHUNKED_BODY[:20]])
    theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(UpstreamError, match="broke"):
        body.read()


def test_broken_chunk_framing_is_a_protocol_error(pair):
    ours, theirs = pair
    response = begin(ours, theirs, CHUNKED)
    body = SocketBody(ours, response, translate)
    theirs.sendall(b"zz\r\nnot a size\r\n")
    with pytest.raises(ProtocolError):
        body.read()


def test_the_socket_is_non_blocking_while_read_and_its_timeout_comes_back(pair):
    ours, theirs = pair
    response = begin(ours, theirs, CHUNKED)
    body = SocketBody(ours, response, translate)
    assert ours.gettimeout() == 0.0 and body.timeout == 5.0
    body.restore()
    assert ours.gettimeout() == 5.0
