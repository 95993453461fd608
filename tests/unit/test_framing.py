"""Request framing, pure: tables of (input, expected) and fuzzing. No sockets.

The chunked decoder is driven as the transport drives it: an ``io.BytesIO`` stands
for the connection's buffered reader, so a test can also see that nothing past the
body (a pipelined next request) was consumed.
"""

from __future__ import annotations

import io
from http.client import HTTPMessage

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlstream.errors import (BadRequest, HeadersTooLarge, MLStreamError, NotImplementedCoding, PayloadTooLarge,
                             TrailersTooLarge, UnsupportedMediaType, VersionNotSupported)
from mlstream.wire.framing import (host_field, request_head, MAX_HEAD_BYTES, MAX_HEAD_LINE, MAX_HEAD_LINES, MAX_JSON_DEPTH, MAX_TRAILER_LINES, ChunkedDecoder,
                              Framing, HeadLines, RequestLine, body_framing, check_content_type, chunked_ok,
                              declares_body, parse_json_body, parse_request_line, request_id)

LIMIT = 1000
NEXT_REQUEST = b"GET /next HTTP/1.1\r\n\r\n"


def decode(stream: bytes, limit: int = LIMIT) -> tuple[bytes, bytes]:
    """(the body, what is left unread of ``stream``)."""
    reader = io.BytesIO(stream)
    decoder = ChunkedDecoder(limit)
    while (want := decoder.want()) is not None:
        decoder.give(reader.readline(want.size) if want.line else reader.read(want.size))
    return decoder.body, reader.read()


def encode(parts: list[bytes], trailers: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts if p) + b"0\r\n" + trailers + b"\r\n"


@pytest.mark.parametrize("transfer_encoding, content_length, expected", [
    (None, None, Framing()),
    (None, "0", Framing()),
    (None, "42", Framing(length=42)),
    (None, " 7 ", Framing(length=7)),
    ("chunked", None, Framing(chunked=True)),
    ("Chunked", None, Framing(chunked=True)),
    ("chunked", "5", Framing(chunked=True, close_after=True)),  # both framings: never trusted again
], ids=["none", "zero", "length", "spaces", "chunked", "case", "both"])
def test_body_framing(transfer_encoding, content_length, expected) -> None:
    assert body_framing(transfer_encoding, content_length, LIMIT) == expected


@pytest.mark.parametrize("transfer_encoding, content_length, error", [
    ("gzip", None, BadRequest),                  # not ending in chunked: length unknowable
    ("gzip, chunked", None, NotImplementedCoding),
    (None, "-1", BadRequest),
    (None, "1_0", BadRequest),                   # int() would take these; a second parser would not
    (None, "+5", BadRequest),
    (None, "\u0663", BadRequest),                # an Arabic-Indic three
    (None, "5, 5", BadRequest),
    (None, "", BadRequest),
    (None, "1001", PayloadTooLarge),
    (None, "99999999999999999999", PayloadTooLarge),
    (None, "5\x1f", BadRequest),                 # str.strip() takes it, int() does not: no 500
], ids=["gzip", "gzip-chunked", "negative", "underscore", "plus", "non-ascii-digit", "list", "empty", "too-large",
        "huge", "unit-separator"])
def test_body_framing_refusals(transfer_encoding, content_length, error) -> None:
    with pytest.raises(error):
        body_framing(transfer_encoding, content_length, LIMIT)


@pytest.mark.parametrize("stream, body", [
    (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    (b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
    (b"5;name=value\r\nhello\r\n0\r\n\r\n", b"hello"),           # a chunk extension
    (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),             # hex, upper case
    (b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n", b"hello"),    # a trailer
    (b"5\nhello\r\n0\n\n", b"hello"),                             # bare LF line ends
    (b"0\r\n\r\n", b""),
], ids=["one", "two", "extension", "hex", "trailer", "lf", "empty"])
def test_chunked_bodies(stream: bytes, body: bytes) -> None:
    assert decode(stream + NEXT_REQUEST) == (body, NEXT_REQUEST)  # the next request is left unread


@pytest.mark.parametrize("stream, error", [
    (b"x\r\nhello\r\n0\r\n\r\n", BadRequest),          # not hex
    (b"-5\r\nhello\r\n0\r\n\r\n", BadRequest),
    (b"0x5\r\nhello\r\n0\r\n\r\n", BadRequest),
    (b"5\r\nhelloXX0\r\n\r\n", BadRequest),            # no CRLF after the data
    (b"5\r\nhel", BadRequest),                         # cut short
    (b"5", BadRequest),                                # a size line without its end
    (b"f" * 5000 + b"\r\n", BadRequest),               # a size line past its bound
    (b"3e9\r\n", PayloadTooLarge),                     # over the limit, refused before reading
    (b"0\r\n" + b"X: y\r\n" * (MAX_TRAILER_LINES + 1) + b"\r\n", TrailersTooLarge),
    (b"0\r\n" + (b"X: " + b"y" * 4000 + b"\r\n") * 5 + b"\r\n", TrailersTooLarge),
], ids=["not-hex", "negative", "0x", "no-crlf", "cut", "no-line-end", "long-size-line", "too-large",
        "trailer-lines", "trailer-bytes"])
def test_chunked_refusals(stream: bytes, error: type[MLStreamError]) -> None:
    with pytest.raises(error):
        decode(stream)


def test_a_complete_decoder_takes_nothing_more() -> None:
    decoder = ChunkedDecoder(LIMIT)
    decoder.give(b"0\r\n")
    decoder.give(b"\r\n")
    assert decoder.want() is None
    with pytest.raises(ValueError):
        decoder.give(b"more")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=8), st.booleans())
def test_chunked_round_trip(parts: list[bytes], with_trailer: bool) -> None:
    stream = encode(parts, b"X-Sum: 1\r\n" if with_trailer else b"")
    assert decode(stream + NEXT_REQUEST) == (b"".join(parts), NEXT_REQUEST)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_only_our_errors(stream: bytes) -> None:
    try:
        decode(stream)
    except MLStreamError:
        pass


@pytest.mark.parametrize("raw, expected", [
    (b"", None), (b"  \n", None), (b'{"a": 1}', {"a": 1}), (b"[1, 2]", [1, 2]),
    ("{\"t\": \"caf\u00e9\"}".encode(), {"t": "caf\u00e9"}),
])
def test_parse_json_body(raw: bytes, expected) -> None:
    assert parse_json_body(raw) == expected


@pytest.mark.parametrize("raw, words", [
    (b"\xff\xfe", "not valid UTF-8"),
    (b"{not json", "Failed to parse request body as JSON"),
    (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested deeper"),
    (b"[" * 100_000, "nested deeper"),  # deeper than the parser's recursion
], ids=["utf8", "json", "depth", "recursion"])
def test_parse_json_body_refusals(raw: bytes, words: str) -> None:
    with pytest.raises(BadRequest, match=words):
        parse_json_body(raw)


def test_exactly_the_depth_limit_is_accepted() -> None:
    assert parse_json_body(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is not None


@pytest.mark.parametrize("presented, kept", [
    ("abc-123", True), ("a.b:c/d+e=f_g", True), ("x" * 128, True), ("x" * 129, False),
    ("with space", False), ("new\nline", False), ("", False), (None, False),
])
def test_request_id(presented, kept: bool) -> None:
    got = request_id(presented)
    assert (got == presented) is kept
    if not kept:
        assert len(got) == 32 and int(got, 16) >= 0


@pytest.mark.parametrize("content_type, has_body, refused", [
    (None, True, False), ("application/json", True, False), ("application/json; charset=utf-8", True, False),
    ("application/vnd.api+json", True, False), ("application/x-www-form-urlencoded", True, False),
    ("text/plain", True, True), ("text/plain", False, False),
])
def test_check_content_type(content_type, has_body: bool, refused: bool) -> None:
    if refused:
        with pytest.raises(UnsupportedMediaType):
            check_content_type(content_type, has_body)
    else:
        check_content_type(content_type, has_body)


@pytest.mark.parametrize("transfer_encoding, content_length, declared", [
    (None, None, False), (None, "0", False), (None, " ", False), (None, "3", True), ("chunked", None, True),
])
def test_declares_body(transfer_encoding, content_length, declared: bool) -> None:
    assert declares_body(transfer_encoding, content_length) is declared


@pytest.mark.parametrize("version, chunked", [
    ("HTTP/1.1", True), ("HTTP/1.0", False), ("HTTP/2.0", True), ("HTTP/1.10", True), ("HTTP/x.y", False),
])
def test_chunked_ok(version: str, chunked: bool) -> None:
    assert chunked_ok(version) is chunked


# --- the request line and head --------------------------------------------------------------

@pytest.mark.parametrize("raw, method, target, version, keep_alive", [
    pytest.param(b"GET /x HTTP/1.1\r\n", "GET", "/x", "HTTP/1.1", True, id="http-1.1"),
    pytest.param(b"POST /a?b=c HTTP/1.0\r\n", "POST", "/a?b=c", "HTTP/1.0", False, id="http-1.0"),
    pytest.param(b"GET /x HTTP/1.1\n", "GET", "/x", "HTTP/1.1", True, id="bare-lf"),
    pytest.param(b"GET\t/x  HTTP/1.1\r\n", "GET", "/x", "HTTP/1.1", True, id="any-ascii-whitespace"),
    pytest.param(b"get /x HTTP/1.1\r\n", "get", "/x", "HTTP/1.1", True, id="a-lowercase-token"),
    pytest.param(b"GET /\xe9 HTTP/1.1\r\n", "GET", "/\xe9", "HTTP/1.1", True, id="latin-1-target"),
])
def test_request_lines_that_parse(raw, method, target, version, keep_alive):
    assert parse_request_line(raw) == RequestLine(method, target, version, keep_alive)


@pytest.mark.parametrize("raw, error, words", [
    pytest.param(b"GET /x\r\n", BadRequest, "HTTP/0.9", id="http-0.9"),
    pytest.param(b"GET\r\n", BadRequest, "syntax", id="one-word"),
    pytest.param(b"GET /x HTTP/1.1 extra\r\n", BadRequest, "syntax", id="four-words"),
    pytest.param(b"", BadRequest, "syntax", id="empty"),
    pytest.param(b"G\x00T /x HTTP/1.1\r\n", BadRequest, "method", id="method-not-a-token"),
    pytest.param(b"GET /x HTTP/1.10\r\n", BadRequest, "version", id="two-digit-minor"),
    pytest.param(b"GET /x http/1.1\r\n", BadRequest, "version", id="lowercase-protocol"),
    pytest.param(b"GET /x HTTP/0.9\r\n", BadRequest, "version", id="major-0"),
    pytest.param(b"GET /x HTTP/2.0\r\n", VersionNotSupported, "Invalid HTTP version", id="http-2"),
])
def test_request_lines_refused(raw, error, words):
    with pytest.raises(error, match=words):
        parse_request_line(raw)


def head_of(*lines: bytes):
    head = HeadLines()
    for line in lines:
        if head.give(line):
            return head.message()
    raise AssertionError("the head did not end")


@pytest.mark.parametrize("change, name, expected", [
    pytest.param(lambda m: None, "x-twice", "1", id="first-of-two"),
    pytest.param(lambda m: None, "X-ABSENT", None, id="absent"),
    pytest.param(lambda m: m.set_raw("X-New", "n"), "x-new", "n", id="set-raw"),
    pytest.param(lambda m: m.__setitem__("X-New", "n"), "X-New", "n", id="set"),
    pytest.param(lambda m: (m.__delitem__("Host"), m.__setitem__("Host", "b")), "host", "b", id="del-then-set"),
    pytest.param(lambda m: m.replace_header("Host", "c"), "Host", "c", id="replace"),
    pytest.param(lambda m: m.__delitem__("X-Twice"), "x-twice", None, id="del-both"),
])
def test_the_indexed_get_follows_every_change_to_the_fields(change, name, expected):
    headers = head_of(b"Host: a\r\n", b"X-Twice: 1\r\n", b"X-Twice: 2\r\n", b"\r\n")
    change(headers)
    assert headers.get(name) == expected
    plain = HTTPMessage()
    for field, value in headers._headers:
        plain.set_raw(field, value)
    assert headers.items() == plain.items()
    assert (headers[name] if expected is not None else headers.get(name, "dflt")) == (expected or "dflt")


def test_a_head_is_read_into_the_stdlib_header_object():
    headers = head_of(b"Host: a\r\n", b"content-length:  5 \r\n", b"X-Twice: 1\r\n", b"X-Twice: 2\r\n", b"\r\n")
    assert headers.get("Content-Length") == "5" and headers.get("host") == "a"
    assert headers.get_all("x-twice") == ["1", "2"]


def test_the_end_of_input_ends_a_head_as_its_empty_line_does():
    assert head_of(b"Host: a\n", b"").get("Host") == "a"


def test_a_folded_line_continues_the_value_before_it():
    assert head_of(b"X-A: one\r\n", b"\t two: three\r\n", b"\r\n").get("X-A") == "one two: three"


@pytest.mark.parametrize("line, error", [
    pytest.param(b"No colon\r\n", BadRequest, id="no-colon"),
    pytest.param(b"Bad Name: x\r\n", BadRequest, id="space-in-name"),
    pytest.param(b"Content-Length : 5\r\n", BadRequest, id="space-before-colon"),
    pytest.param(b": x\r\n", BadRequest, id="empty-name"),
    pytest.param(b" first: folded\r\n", BadRequest, id="a-fold-with-nothing-before"),
    pytest.param(b"X-A: a\x00b\r\n", BadRequest, id="nul-in-value"),
    pytest.param(b"X-A: a\rb\r\n", BadRequest, id="cr-in-value"),
    pytest.param(b"X-A: " + b"a" * MAX_HEAD_LINE + b"\r\n", HeadersTooLarge, id="line-too-long"),
])
def test_head_lines_refused(line, error):
    with pytest.raises(error):
        HeadLines().give(line)


def test_a_refused_line_is_named_by_its_number_never_echoed():
    head = HeadLines()
    head.give(b"Host: a\r\n")
    with pytest.raises(BadRequest) as refused:
        head.give(b"Authorization : Bearer sk-secret\r\n")
    assert "line 2" in str(refused.value) and "sk-secret" not in str(refused.value)


def test_folded_lines_count_as_lines_and_bytes():
    head = HeadLines()
    head.give(b"X-A: v\r\n")
    for _ in range(MAX_HEAD_LINES - 1):
        assert not head.give(b" more\r\n")
    with pytest.raises(HeadersTooLarge):
        head.give(b" one too many\r\n")
    head = HeadLines()
    head.give(b"X-A: v\r\n")
    with pytest.raises(HeadersTooLarge):
        for _ in range(MAX_HEAD_LINES):
            head.give(b" " + b"a" * (MAX_HEAD_BYTES // 8) + b"\r\n")


def test_more_than_the_most_head_lines_is_too_large():
    head = HeadLines()
    for i in range(MAX_HEAD_LINES):
        assert not head.give(b"X-%d: v\r\n" % i)
    with pytest.raises(HeadersTooLarge):
        head.give(b"X-last: v\r\n")


def test_fresh_request_ids_do_not_repeat_and_differ_in_a_forked_child() -> None:
    import os

    ids = {request_id(None) for _ in range(10_000)}
    assert len(ids) == 10_000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out at once
        os.write(write, request_id(None).encode())
        os._exit(0)
    os.close(write)
    child_id = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child_id) == 32 and child_id != request_id(None) and child_id not in ids


# --- the provider request head (request_head, host_field) ------------------------------


@pytest.mark.parametrize("host, port, default, expected", [
    ("api.openai.com", 443, 443, "api.openai.com"),
    ("127.0.0.1", 8080, 80, "127.0.0.1:8080"),
    ("::1", 8080, 80, "[::1]:8080"),
    ("::1", 80, 80, "[::1]"),
    ("xn--bcher-kva.de", 443, 443, "xn--bcher-kva.de"),
])
def test_host_field(host, port, default, expected) -> None:
    assert host_field(host, port, default) == expected


def head_fields(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    assert head.endswith(b"\r\n\r\n") and lines[-2:] == ["", ""]
    return lines[0], [tuple(line.split(": ", 1)) for line in lines[1:-2]]  # type: ignore[misc]


def test_a_request_head_as_http_client_would_write_it() -> None:
    line, fields = head_fields(request_head("POST", "/v1/chat/completions?x=1", "h:1",
                                            {"Authorization": "Bearer k", "Content-Type": "application/json"},
                                            42, "mlstream/9"))
    assert line == "POST /v1/chat/completions?x=1 HTTP/1.1"
    assert fields == [("Host", "h:1"), ("Authorization", "Bearer k"), ("Content-Type", "application/json"),
                      ("Content-Length", "42"), ("User-Agent", "mlstream/9"), ("Accept-Encoding", "identity")]


@pytest.mark.parametrize("method, length, given, expected", [
    pytest.param("GET", 0, {}, None, id="get-no-body"),
    pytest.param("POST", 0, {}, "0", id="post-empty"),
    pytest.param("POST", 7, {"content-length": "999"}, "7", id="a-wrong-length-is-replaced"),
    pytest.param("POST", 7, {"Transfer-Encoding": "chunked"}, "7", id="chunked-dropped"),
])
def test_the_body_is_framed_by_its_own_length_only(method, length, given, expected) -> None:
    _, fields = head_fields(request_head(method, "/", "h", given, length, "ua"))
    framing = [(name, value) for name, value in fields if name.lower() in ("content-length", "transfer-encoding")]
    assert framing == ([] if expected is None else [("Content-Length", expected)])


def test_given_host_user_agent_and_accept_encoding_are_kept_not_doubled() -> None:
    _, fields = head_fields(request_head("POST", "/", "computed", {"host": "signed.example", "User-Agent": "me",
                                                                  "Accept-Encoding": "gzip"}, 1, "ua"))
    assert fields == [("host", "signed.example"), ("User-Agent", "me"), ("Accept-Encoding", "gzip"),
                      ("Content-Length", "1")]


@pytest.mark.parametrize("method, target, fields, words", [
    pytest.param("PO ST", "/", {}, "method", id="method-not-token"),
    pytest.param("POST", "/a b", {}, "path", id="space-in-target"),
    pytest.param("POST", "/a\r\nX-Evil: 1", {}, "path", id="crlf-in-target"),
    pytest.param("POST", "", {}, "path", id="empty-target"),
    pytest.param("POST", "/", {"X-Bad Name": "v"}, "header name", id="name-not-token"),
    pytest.param("POST", "/", {"X-Api-Key": "secret\r\nX-Evil: 1"}, r"header \[X-Api-Key\]", id="crlf-in-value"),
    pytest.param("POST", "/", {"X-Api-Key": "secret\x00"}, "NUL", id="nul-in-value"),
    pytest.param("POST", "/", {"X-Api-Key": "sécret€"}, "latin-1", id="not-latin-1"),
])
def test_a_request_head_that_would_smuggle_or_break_is_refused_naming_no_value(method, target, fields, words) -> None:
    with pytest.raises(BadRequest, match=words) as caught:
        request_head(method, target, "h", fields, 0, "ua")
    assert "secret" not in str(caught.value) and "sécret" not in str(caught.value)


@pytest.mark.parametrize("raw", [
    b'{"a": [1, 2.5, "x"]}', b'{"a": NaN}', b'{"s": "\\ud800"}', b'{"n": 123456789012345678901234567890}',
    b'{"a": "\xff"}', b'\xef\xbb\xbf{"a": 1}', b'{"a": 1} trailing', '{"a": 1}'.encode("utf-16"),
    b"[" * 101 + b"]" * 101, b"[" * 100 + b"]" * 100, b'"just text"', b"1e400",
])
def test_a_request_body_parses_as_the_stdlib_alone_would(raw: bytes) -> None:
    """orjson first, when installed; what it refuses, the stdlib decides: same values, same refusals."""
    import json

    def stdlib_alone():
        try:
            value = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            return "refused"
        return "refused" if raw.count(b"[") > MAX_JSON_DEPTH else value

    try:
        got = parse_json_body(raw)
    except BadRequest:
        got = "refused"
    expected = stdlib_alone()
    assert got == expected or (got != got and expected != expected)  # NaN inside compares unequal


def test_a_whole_head_in_the_buffer_is_taken_at_once_up_to_its_empty_line():
    head = HeadLines()
    buffered = b"Host: a\r\ncontent-length:  5 \r\nX-Twice: 1\r\nX-Twice: 2\r\n\r\n{\"a\"}"
    assert head.take(buffered) == len(buffered) - 5  # the body stays for the reader
    headers = head.message()
    assert headers.get("Content-Length") == "5" and headers.get_all("x-twice") == ["1", "2"]
    assert headers.first_values() == {"host": "a", "content-length": "5", "x-twice": "1"}
    assert HeadLines().take(b"\r\nbody") == 2  # a head with no fields


@pytest.mark.parametrize("buffered", [
    pytest.param(b"Host: a\r\n", id="not-all-there"),
    pytest.param(b"Host: a\r\nX-A: one\r\n\t two\r\n\r\n", id="folded"),
    pytest.param(b"Host: a\nX-A: b\r\n\r\n", id="bare-lf"),
    pytest.param(b"Host: a\r\nBad Name: x\r\n\r\n", id="bad-name"),
    pytest.param(b"Host: a\r\nX-A: a\rb\r\n\r\n", id="cr-in-value"),
    pytest.param(b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEAD_LINES + 1)) + b"\r\n", id="too-many-lines"),
])
def test_a_head_in_any_other_shape_is_left_to_the_line_by_line_reading(buffered):
    assert HeadLines().take(buffered) == 0
    given = HeadLines()
    given.give(b"Host: a\r\n")
    assert given.take(b"X-A: b\r\n\r\n") == 0  # a head begun line by line goes on so


def test_first_values_follow_a_change_to_the_fields():
    headers = head_of(b"Host: a\r\n", b"X-Twice: 1\r\n", b"X-Twice: 2\r\n", b"\r\n")
    headers.__delitem__("X-Twice")
    headers["X-Twice"] = "3"
    assert headers.first_values() == {"host": "a", "x-twice": "3"}
