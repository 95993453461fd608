"""Hostile input on the HTTP front: oversized, slow, malformed and mislabelled requests.

Everything goes over raw sockets so the exact bytes are seen. Every refusal is our JSON
error; none is a 500, a hang, a dropped connection or a traceback in the log.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import time
from typing import Any

import pytest

from ..support.timeouts import HANG_GUARD
from ..support.wire import RawResponse, read_response

ML = "/_plugins/_ml"
SEARCH = f"{ML}/models/_search"
MATCH_ALL = b'{"query": {"match_all": {}}}'


# --- helpers ---------------------------------------------------------------------------

def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def head(method: str, path: str, *headers: str) -> bytes:
    return ("\r\n".join([f"{method} {path} HTTP/1.1", "Host: mlstream", *headers]) + "\r\n\r\n").encode()


def exchange(url: str, data: bytes, *, then_eof: bool = False) -> tuple[RawResponse, bytes | None]:
    """Send ``data`` on a fresh connection; read one response (and, if asked, the rest up to EOF)."""
    with socket.create_connection(address(url), timeout=HANG_GUARD) as sock:
        sock.sendall(data)
        reader = sock.makefile("rb")
        assert reader.peek(1), "the server closed the connection without any response"
        response = read_response(reader)
        rest = reader.read() if then_eof else None
    return response, rest


def post(url: str, path: str, body: bytes, *headers: str) -> RawResponse:
    data = head("POST", path, *headers, f"Content-Length: {len(body)}", "Connection: close") + body
    return exchange(url, data)[0]


def assert_json_error(response: RawResponse, status: int, *words: str) -> dict:
    assert response.status == status, (response.status, response.body[:300])
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    doc = json.loads(response.body)
    assert doc["status"] == status and doc["error"]["type"] and doc["error"]["reason"], doc
    for word in words:
        assert word.lower() in doc["error"]["reason"].lower(), (word, doc)
    return doc


def still_serving(url: str) -> None:
    response, _ = exchange(url, head("GET", "/healthz", "Connection: close"))
    assert response.status == 200 and json.loads(response.body) == {"status": "ok"}


def nested(depth: int, kind: str = "object") -> Any:
    """A JSON value exactly ``depth`` containers deep (the innermost is empty)."""
    value: Any = {} if kind == "object" else []
    for _ in range(depth - 1):
        value = {"a": value} if kind == "object" else [value]
    return value


@pytest.fixture
def no_tracebacks(caplog):
    caplog.set_level(logging.DEBUG)
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, "\n".join(f"{r.name} {r.levelname} {r.getMessage()}" for r in bad) + caplog.text[-3000:]


# --- body size ---------------------------------------------------------------------------

def test_a_body_over_the_limit_by_content_length_is_413(make_server, no_tracebacks):
    server = make_server(max_body_bytes=1024)
    body = b'{"query": {"match_all": {}}, "sort": "' + b"x" * 2000 + b'"}'
    response = post(server.url, SEARCH, body, "Content-Type: application/json")
    assert_json_error(response, 413)

    # the head alone, declaring a huge body: answered at once, without reading it
    started = time.monotonic()
    for length in ("1025", "99999999999999999999"):
        response, rest = exchange(server.url, head("POST", SEARCH, "Content-Type: application/json",
                                                   f"Content-Length: {length}"), then_eof=True)
        assert_json_error(response, 413)
        assert response.headers.get("connection", "").lower() == "close" and rest == b""
    assert time.monotonic() - started < HANG_GUARD / 2
    still_serving(server.url)


def test_a_chunked_body_over_the_limit_is_413(make_server, no_tracebacks):
    server = make_server(max_body_bytes=1024)
    chunks = b"".join(b"200\r\n" + b" " * 512 + b"\r\n" for _ in range(3)) + b"0\r\n\r\n"
    data = head("POST", SEARCH, "Content-Type: application/json", "Transfer-Encoding: chunked") + chunks
    response, rest = exchange(server.url, data, then_eof=True)
    assert_json_error(response, 413)
    assert rest == b""

    # one chunk announcing far more than the limit: refused before it is read
    data = head("POST", SEARCH, "Content-Type: application/json", "Transfer-Encoding: chunked") + b"fffffffff\r\n"
    response, _ = exchange(server.url, data, then_eof=True)
    assert_json_error(response, 413)
    still_serving(server.url)


def test_a_body_exactly_at_the_limit_is_accepted(make_server):
    server = make_server(max_body_bytes=1024)
    body = MATCH_ALL + b" " * (1024 - len(MATCH_ALL))
    assert len(body) == 1024
    response = post(server.url, SEARCH, body, "Content-Type: application/json")
    assert response.status == 200, response.body
    chunked = head("POST", SEARCH, "Content-Type: application/json", "Transfer-Encoding: chunked",
                   "Connection: close") + b"400\r\n" + body + b"\r\n0\r\n\r\n"
    assert exchange(server.url, chunked)[0].status == 200


# --- slowloris ---------------------------------------------------------------------------

def trickle(url: str, opening: bytes, *, interval: float = 0.3, max_bytes: int = 60) -> tuple[float, str]:
    """Send ``opening``, then one more header byte every ``interval`` seconds, until the server
    closes the connection. Returns (seconds until it did, how it was noticed). The pacing
    is the attack itself; the trickle would last ``interval * max_bytes`` seconds if never cut."""
    sock = socket.create_connection(address(url), timeout=HANG_GUARD)
    try:
        started = time.monotonic()
        sock.sendall(opening)
        for _ in range(max_bytes):
            readable, _, _ = select.select([sock], [], [], interval)
            if readable:
                try:
                    data = sock.recv(65536)
                except ConnectionError:
                    return time.monotonic() - started, "reset"
                if not data:
                    return time.monotonic() - started, "closed"
                # the server may say why before closing (e.g. a 408); then EOF must follow
                while data:
                    data = sock.recv(65536)
                return time.monotonic() - started, "answered and closed"
            try:
                sock.sendall(b"a")
            except (BrokenPipeError, ConnectionError):
                return time.monotonic() - started, "refused a byte"
        pytest.fail(f"the connection was still open after {time.monotonic() - started:.1f} s of trickling")
    finally:
        sock.close()


@pytest.mark.parametrize("opening", [
    b"GET /healthz HTTP/1.1\r\nHost: mlstream\r\nX-Slow: ",   # headers trickle in
    b"GET /healthz",                                          # the request line trickles in
], ids=["headers", "request-line"])
def test_slowloris_is_cut_after_the_header_timeout(make_server, opening, no_tracebacks):
    server = make_server(header_timeout=1.0)
    elapsed, how = trickle(server.url, opening)
    # the trickle alone would take 18 s; the cut comes at the header timeout
    assert 0.8 <= elapsed <= 5.0, (elapsed, how)
    still_serving(server.url)


def test_an_idle_keep_alive_connection_is_closed_after_the_header_timeout(make_server, no_tracebacks):
    server = make_server(header_timeout=1.0)
    with socket.create_connection(address(server.url), timeout=HANG_GUARD) as sock:
        sock.sendall(head("GET", "/healthz"))
        reader = sock.makefile("rb")
        assert read_response(reader).status == 200
        started = time.monotonic()
        assert reader.read(1) == b""  # nothing more: the server closes the idle connection
        assert time.monotonic() - started <= 5.0


def test_many_slow_clients_do_not_stop_a_normal_one(make_server, no_tracebacks):
    server = make_server(header_timeout=5.0)
    slow = [socket.create_connection(address(server.url), timeout=HANG_GUARD) for _ in range(50)]
    try:
        for sock in slow:
            sock.sendall(b"POST /_plugins/_ml/models/_search HTTP/1.1\r\nHost: x\r\nX-Sl")
        started = time.monotonic()
        still_serving(server.url)
        assert time.monotonic() - started < 2.0
    finally:
        for sock in slow:
            sock.close()


# --- request line ------------------------------------------------------------------------

def test_a_request_line_over_65536_bytes_is_414_json(server, no_tracebacks):
    # exactly 65537 bytes and no line end: the server has all it needs to refuse
    line = b"GET /" + b"a" * (65537 - 5)
    response, rest = exchange(server.url, line, then_eof=True)
    assert_json_error(response, 414)
    assert rest == b""
    still_serving(server.url)


def test_a_request_line_of_65536_bytes_is_served(server):
    path = "/" + "a" * (65536 - len("GET / HTTP/1.1\r\n"))
    line = f"GET {path} HTTP/1.1\r\n".encode()
    assert len(line) == 65536
    response, _ = exchange(server.url, line + b"Host: x\r\nConnection: close\r\n\r\n")
    assert_json_error(response, 404)


# --- Content-Type --------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/xml", "application/xml", "text/plain", "multipart/form-data; boundary=x",
                                          "application/octet-stream"])
def test_a_body_of_another_type_is_415_json(server, content_type, no_tracebacks):
    response = post(server.url, SEARCH, MATCH_ALL, f"Content-Type: {content_type}")
    doc = assert_json_error(response, 415)
    assert content_type.split(";")[0] in doc["error"]["reason"]
    still_serving(server.url)


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "application/json",
                                          "application/json; charset=utf-8", "APPLICATION/JSON",
                                          "application/vnd.api+json", "text/json"])
def test_json_types_no_type_and_curls_default_are_tolerated(server, content_type):
    headers = [f"Content-Type: {content_type}"] if content_type else []
    response = post(server.url, SEARCH, MATCH_ALL, *headers)
    assert response.status == 200, (content_type, response.body)
    assert json.loads(response.body)["hits"]["total"]["value"] == 0


def test_a_wrong_type_without_a_body_is_not_refused(server):
    response, _ = exchange(server.url, head("GET", "/", "Content-Type: text/xml", "Connection: close"))
    assert response.status == 200, response.body


# --- JSON ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["object", "array"])
def test_json_nested_101_deep_is_400_and_100_deep_is_parsed(server, kind, no_tracebacks):
    # `sort` is accepted and ignored by _search: a deep value there is otherwise valid
    deep = json.dumps({"query": {"match_all": {}}, "sort": nested(100, kind)})  # 101 levels in all
    doc = assert_json_error(post(server.url, SEARCH, deep.encode(), "Content-Type: application/json"), 400)
    assert "nested deeper than 100" in doc["error"]["reason"], doc

    ok = json.dumps({"query": {"match_all": {}}, "sort": nested(99, kind)})  # exactly 100 levels
    response = post(server.url, SEARCH, ok.encode(), "Content-Type: application/json")
    assert response.status == 200, response.body


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
                                  b"[" * 500_000 + b"]" * 500_000],
                         ids=["100k-open-arrays", "50k-objects", "500k-closed-arrays"])
def test_absurdly_deep_json_is_400_and_the_server_survives(server, body, no_tracebacks):
    response = post(server.url, SEARCH, body, "Content-Type: application/json")
    assert_json_error(response, 400)
    still_serving(server.url)


@pytest.mark.parametrize("body", [
    b'{"query": {"match_all": {}}, "sort": "\xff\xfe"}',
    b'{"query": {"match_all": {}}, "sort": "caf\xe9"}',          # Latin-1
    b'{"query": {"match_all": {}}, "sort": "\xc0\xaf"}',          # an overlong encoding
    b'{"query": {"match_all": {}}, "sort": "\xed\xa0\x80"}',      # an encoded surrogate
    '{"query": {"match_all": {}}}'.encode("utf-16"),
], ids=["ff-fe", "latin-1", "overlong", "encoded-surrogate", "utf-16"])
def test_a_body_that_is_not_utf8_is_400(server, body, no_tracebacks):
    assert_json_error(post(server.url, SEARCH, body, "Content-Type: application/json"), 400)
    still_serving(server.url)


@pytest.mark.parametrize("path, body", [
    (f"{ML}/connectors/_create", b'{"name": "x", "\\ud800": 1}'),        # echoed as an unknown field
    (SEARCH, b'{"query": {"match_all": {}}, "\\udfff": 1}'),
    (f"{ML}/models/_register", b'{"name": "\\ud800", "function_name": "nope"}'),
], ids=["connector-unknown-field", "search-unknown-field", "register-name"])
def test_a_lone_surrogate_escape_is_a_json_error_not_a_dropped_connection(server, path, body, no_tracebacks):
    # valid JSON syntax, but no UTF-8 text can hold it
    with socket.create_connection(address(server.url), timeout=HANG_GUARD) as sock:
        sock.sendall(head("POST", path, "Content-Type: application/json", f"Content-Length: {len(body)}",
                          "Connection: close") + body)
        reader = sock.makefile("rb")
        assert reader.peek(1), "the server closed the connection without any response"
        response = read_response(reader)
    assert 400 <= response.status < 500, response.body
    assert json.loads(response.body)["status"] == response.status
    still_serving(server.url)


# --- framing (request smuggling) ------------------------------------------------------------

def framing_exchange(url: str, data: bytes) -> tuple[RawResponse, bytes]:
    """One response, then whatever else the server sends before it closes the connection
    (the server's 1 s header timeout bounds the wait if it keeps the connection open)."""
    with socket.create_connection(address(url), timeout=HANG_GUARD) as sock:
        sock.sendall(data)
        reader = sock.makefile("rb")
        assert reader.peek(1), "the server closed the connection without any response"
        response = read_response(reader)
        return response, reader.read()


def test_content_length_with_transfer_encoding_closes_the_connection(make_server, no_tracebacks):
    # RFC 9112 6.1: a request with both may be refused or read as chunked alone, but
    # "the server MUST close the connection after responding to such a request".
    server = make_server(header_timeout=1.0)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(MATCH_ALL), MATCH_ALL)
    data = head("POST", SEARCH, "Content-Type: application/json", f"Content-Length: {len(chunked)}",
                "Transfer-Encoding: chunked") + chunked
    response, rest = framing_exchange(server.url, data)
    assert response.status in (200, 400), response.body
    assert response.headers.get("connection", "").lower() == "close", response.headers
    assert rest == b"", rest[:300]


@pytest.mark.parametrize("coding", ["gzip", "identity", "xchunked", "chunked, gzip"])
def test_a_transfer_coding_other_than_chunked_is_refused(make_server, coding, no_tracebacks):
    # RFC 9112 6.1/6.3: chunked not the final coding -> 400 and close; a coding not
    # understood -> 501. Read any other way, the body's bytes would be taken for the next
    # request (here: a DELETE smuggled after a well-framed chunked body).
    server = make_server(header_timeout=1.0)
    smuggled = head("DELETE", f"{ML}/models/smuggled")
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(MATCH_ALL), MATCH_ALL) + smuggled
    data = head("POST", SEARCH, "Content-Type: application/json", f"Transfer-Encoding: {coding}") + body
    response, rest = framing_exchange(server.url, data)
    assert response.status in (400, 501), (coding, response.status, response.body[:200])
    assert json.loads(response.body)["status"] == response.status
    assert response.headers.get("connection", "").lower() == "close", response.headers
    assert rest == b"", rest[:300]
