"""Trailers after a chunked request body are bounded like a request head.

They arrive after the header deadline is disarmed, so without a bound a client could
keep the handler reading trailer lines forever. Over raw sockets: too many lines or
too many bytes is a 431 JSON error and the connection closes; a normal trailer works.
"""

from __future__ import annotations

import json
import socket
import threading
import time

from mlstream.wire.framing import MAX_TRAILER_BYTES, MAX_TRAILER_LINES

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.timeouts import HANG_GUARD
from ..support.wire import RawResponse, read_response

ML = "/_plugins/_ml"


def chunked_head(url: str) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    return (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()


def chunked_body(document: dict) -> bytes:
    """The body as one chunk and the last chunk, without the trailer section's end."""
    raw = json.dumps(document).encode()
    return b"%x\r\n%b\r\n0\r\n" % (len(raw), raw)


def connector_count(client: Client) -> int:
    return client.ok("POST", f"{ML}/connectors/_search", {})["hits"]["total"]["value"]


def assert_431(response: RawResponse) -> None:
    assert response.status == 431, (response.status, response.body[:300])
    assert response.headers["content-type"].startswith("application/json"), response.headers
    assert response.headers.get("connection", "").lower() == "close", response.headers
    doc = json.loads(response.body)
    assert doc["status"] == 431 and doc["error"]["type"] == "too_long_http_header_exception", doc
    assert "trailer" in doc["error"]["reason"], doc


def exchange_with_trailers(url: str, document: dict, trailer_lines: list[bytes], *,
                           end_section: bool = True) -> tuple[RawResponse, bytes]:
    """Send a chunked request with ``trailer_lines``; returns the response and, if it says
    ``Connection: close``, whatever the server sent after it before closing.

    The request is sent from a thread while the response is read, as a client would: a
    server that stops reading early must not deadlock the test on a full socket buffer.
    """
    host, port = url.removeprefix("http://").split(":")
    payload = chunked_head(url) + chunked_body(document) + b"".join(trailer_lines)
    if end_section:
        payload += b"\r\n"
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        def send() -> None:
            try:
                sock.sendall(payload)
            except OSError:
                pass  # the server answered and closed before reading it all: expected
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        reader = sock.makefile("rb")
        response = read_response(reader)
        rest = b""
        if response.headers.get("connection", "").lower() == "close":
            try:
                rest = reader.read()  # up to the server's close
            except ConnectionResetError:
                pass  # closed with our unread trailers still in its buffer
        sender.join(HANG_GUARD)
    return response, rest


def test_a_normal_trailer_still_works(server, fake):
    client = Client(server.url)
    trailers = [b"X-Checksum: 5d41402abc4b2a76\r\n", b"X-Note: fine\r\n"]
    response, _ = exchange_with_trailers(server.url, openai_connector(fake), trailers)
    assert response.status == 200, response.body
    assert json.loads(response.body)["connector_id"]
    assert connector_count(client) == 1


def test_trailers_at_the_limit_are_accepted(server, fake):
    line = b"X-T: v\r\n"
    response, _ = exchange_with_trailers(server.url, openai_connector(fake), [line] * MAX_TRAILER_LINES)
    assert response.status == 200, response.body
    assert connector_count(Client(server.url)) == 1


def test_thousands_of_trailer_lines_are_431_and_close(server, fake):
    lines = [b"X-Trailer-%d: %d\r\n" % (i, i) for i in range(5000)]
    started = time.monotonic()
    response, rest = exchange_with_trailers(server.url, openai_connector(fake), lines)
    assert_431(response)
    assert rest == b""  # nothing more: the connection was closed, not reused
    assert time.monotonic() - started < HANG_GUARD / 2
    assert connector_count(Client(server.url)) == 0  # the request was not served


def test_one_line_more_than_the_limit_is_431(server, fake):
    lines = [b"X-T: v\r\n"] * (MAX_TRAILER_LINES + 1)
    response, _ = exchange_with_trailers(server.url, openai_connector(fake), lines)
    assert_431(response)
    assert connector_count(Client(server.url)) == 0


def test_few_but_large_trailer_lines_are_431(server, fake):
    # each line within the per-line limit, the section over the byte limit
    line = b"X-Big: " + b"a" * 4000 + b"\r\n"
    count = MAX_TRAILER_BYTES // len(line) + 2
    assert count < MAX_TRAILER_LINES
    response, _ = exchange_with_trailers(server.url, openai_connector(fake), [line] * count)
    assert_431(response)
    assert connector_count(Client(server.url)) == 0


def test_an_endless_trailer_section_is_cut_off(server, fake):
    # Trailer lines keep coming and the blank line never does: the server answers
    # once the bound is passed instead of reading until the client gives up.
    host, port = server.url.removeprefix("http://").split(":")
    stop = threading.Event()
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        def flood() -> None:
            try:
                sock.sendall(chunked_head(server.url) + chunked_body(openai_connector(fake)))
                i = 0
                while not stop.is_set():
                    sock.sendall(b"X-Trailer-%d: %d\r\n" % (i, i))
                    i += 1
            except OSError:
                pass
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        try:
            response = read_response(sock.makefile("rb"))
        finally:
            stop.set()
            sender.join(HANG_GUARD)
    assert_431(response)
