"""The internals ``mlstream.speedups`` relies on still exist and behave: loud, not slow."""

from __future__ import annotations

import http.client
from array import array
import json
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest
import urllib3

from mlstream import speedups
from mlstream.speedups import (FAST_DOT_PRODUCTS, body_ready, dot_products, escape_json_string,
                               python_dot_products, raw_read1, start_thread_nowait)

from ..support.timeouts import HANG_GUARD


def response_over(raw: bytes, headers: dict[str, str] | None = None) -> tuple[urllib3.HTTPResponse, socket.socket]:
    """A urllib3 response wrapping a real http.client response read from a socket pair."""
    ours, theirs = socket.socketpair()
    theirs.sendall(raw)
    theirs.close()
    inner = http.client.HTTPResponse(ours)
    inner.begin()
    response = urllib3.HTTPResponse(body=inner, headers=dict(inner.getheaders()), status=inner.status,
                                    preload_content=False, original_response=inner)
    return response, ours


def test_raw_read1_reads_http_clients_own_chunk_aware_read1() -> None:
    response, sock = response_over(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    read = raw_read1(response)
    assert read.__self__ is response._fp and isinstance(response._fp, http.client.HTTPResponse)
    data = b""
    while chunk := read(64):
        data += chunk
    assert data == b"hello world"
    sock.close()


def test_a_compressed_body_is_left_to_urllib3() -> None:
    response, sock = response_over(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n")
    assert raw_read1(response) == response.read1
    sock.close()


def test_escape_json_string_is_json_dumps_of_a_string() -> None:
    for text in ("plain", 'quote " and \\ backslash', "line\nbreak\ttab", "naïve ☃ \U0001F600", "\ud800 lone"):
        assert escape_json_string(text) == json.dumps(text, ensure_ascii=False)


def test_start_thread_nowait_runs_the_function_in_another_thread() -> None:
    ran = threading.Event()
    seen: list[int] = []
    start_thread_nowait(lambda a, b: (seen.append(a + b), ran.set()), (2, 3))
    assert ran.wait(HANG_GUARD) and seen == [5]


def test_body_ready_sees_bytes_buffered_with_the_head_and_never_waits() -> None:
    response, sock = response_over(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    response._connection = type("Connection", (), {"sock": sock})()
    timeout = sock.gettimeout()
    assert body_ready(response) and sock.gettimeout() == timeout
    assert raw_read1(response)(64) == b"hello"  # nothing was consumed by the look


def test_body_ready_is_false_without_waiting_when_nothing_came_yet() -> None:
    ours, theirs = socket.socketpair()
    ours.settimeout(HANG_GUARD)  # a blocking peek would wait this long
    theirs.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    inner = http.client.HTTPResponse(ours)
    inner.begin()
    response = urllib3.HTTPResponse(body=inner, headers=dict(inner.getheaders()), status=200,
                                    preload_content=False, original_response=inner)
    response._connection = type("Connection", (), {"sock": ours})()
    assert not body_ready(response) and ours.gettimeout() == HANG_GUARD
    theirs.sendall(b"2\r\nhi\r\n")
    assert body_ready(response)  # a socket pair delivers at once
    ours.close()
    theirs.close()


def open_response(first: bytes) -> tuple[urllib3.HTTPResponse, socket.socket, socket.socket]:
    """A chunked urllib3 response over a socket pair left open; ``first`` sent (head and more)."""
    ours, theirs = socket.socketpair()
    ours.settimeout(HANG_GUARD)  # a read that waits would wait this long
    theirs.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + first)
    inner = http.client.HTTPResponse(ours)
    inner.begin()
    response = urllib3.HTTPResponse(body=inner, headers=dict(inner.getheaders()), status=200,
                                    preload_content=False, original_response=inner)
    response._connection = type("Connection", (), {"sock": ours})()
    return response, ours, theirs


@pytest.mark.parametrize("first, then, read", [
    # a chunk's data read, and of what follows only part: the next read would wait for the rest
    pytest.param(b"2\r\nhi\r", b"\n3\r\nyou\r\n", b"you", id="half-the-crlf"),
    pytest.param(b"2\r\nhi\r\n3", b"\r\nyou\r\n", b"you", id="half-a-size-line"),
    pytest.param(b"2\r\nhi\r\n3\r\n", b"you\r\n", b"you", id="a-size-line-and-no-data"),
    pytest.param(b"2\r\nhi\r\n0\r\n", b"\r\n", b"", id="the-last-chunk-without-its-end"),
])
def test_body_ready_between_chunks_is_false_when_the_read_would_wait(first, then, read) -> None:
    """Never a wrong yes (the caller would block where it must not); the look answers at
    once and leaves the stream intact for whoever reads it next."""
    response, ours, theirs = open_response(first)
    assert raw_read1(response)(64) == b"hi"
    assert not body_ready(response)  # and at once: a wait would take HANG_GUARD
    theirs.sendall(then)
    assert raw_read1(response)(64) == read
    ours.close()
    theirs.close()


def test_body_ready_sees_the_next_chunk_behind_a_buffered_crlf() -> None:
    """The CRLF a read leaves buffered is taken, so the buffer refills with what followed."""
    response, ours, theirs = open_response(b"2\r\nhi\r\n")
    assert raw_read1(response)(64) == b"hi"
    theirs.sendall(b"3\r\nyou\r\n")
    assert body_ready(response, HANG_GUARD)
    ours.settimeout(0.0)
    assert raw_read1(response)(64) == b"you"
    ours.close()
    theirs.close()


JSON_VALUES = [
    {"inference_results": [{"output": [{"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [3],
                                        "data": [0.1, -2.5e-05, 3]}], "status_code": 200}]},
    {"text": "é 日本 \"q\" \\ \n \u2028", "none": None, "t": True, "n": -7},
    {"big": 2 ** 70},                 # orjson refuses integers past 64 bits: the stdlib writes it
    {"lone": "\ud800"},               # no UTF-8 for a lone surrogate: its JSON escape is written
    {1: "non-string key"},            # the stdlib turns the key into "1"
]


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
@pytest.mark.parametrize("value", JSON_VALUES, ids=range(len(JSON_VALUES)))
def test_dumps_and_loads_json_agree_with_the_stdlib(value: Any, fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if fast:
        assert speedups.orjson is not None, "the test extra installs orjson"
    else:
        monkeypatch.setattr(speedups, "orjson", None)
    encoded = speedups.dumps_json(value)
    stdlib = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "backslashreplace")
    assert json.loads(encoded) == json.loads(stdlib)
    assert speedups.loads_json(stdlib) == json.loads(stdlib)


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
def test_loads_json_refuses_what_is_not_json(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if fast:
        assert speedups.orjson is not None, "the test extra installs orjson"
    else:
        monkeypatch.setattr(speedups, "orjson", None)
    with pytest.raises(ValueError):
        speedups.loads_json(b'{"a": ')


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
def test_loads_json_refuses_deep_nesting_on_a_server_sized_thread_stack(fast: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider answer 100,000 levels deep (200 KB) is a ValueError, on a thread with
    the server's stack size: never a crash of the process (old orjson had no limit)."""
    from mlstream.app.cli import THREAD_STACK_BYTES

    if not fast:
        monkeypatch.setattr(speedups, "orjson", None)
    outcome: list[BaseException | None] = []

    def decode() -> None:
        try:
            speedups.loads_json(b"[" * 100_000 + b"]" * 100_000)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - whatever it is, the test reports it
            outcome.append(exc)

    previous = threading.stack_size(THREAD_STACK_BYTES)
    try:
        thread = threading.Thread(target=decode)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join(HANG_GUARD)
    assert len(outcome) == 1 and isinstance(outcome[0], ValueError), outcome


def test_header_dict_is_urllib3s_own_construction() -> None:
    from urllib3._collections import HTTPHeaderDict

    fields = [("Content-Type", "text/event-stream"), ("Set-Cookie", "a=1"), ("set-cookie", "b=2"),
              ("X-Empty", ""), ("Transfer-Encoding", "chunked"), ("SET-COOKIE", "c=3")]
    made, expected = speedups.header_dict(fields), HTTPHeaderDict(fields)
    assert isinstance(made, HTTPHeaderDict)
    assert made._container == expected._container
    assert list(made.items()) == list(expected.items()) and made == expected
    assert made["set-cookie"] == "a=1, b=2, c=3" and made.getlist("Set-Cookie") == ["a=1", "b=2", "c=3"]
    assert made.get("content-type") == "text/event-stream" and "x-empty" in made
    assert speedups.header_dict([])._container == {}


def test_whole_read_takes_a_length_body_through_http_client_and_leaves_the_rest() -> None:
    response, sock = response_over(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")
    assert speedups.whole_read(response, 64) == b"hello world"
    assert response._fp.isclosed()  # http.client's end of a body: its reader closed, as urllib3 leaves it
    sock.close()
    for raw, limit in [(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 64),
                       (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", 64),
                       (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", 10),
                       (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", 64)]:
        response, sock = response_over(raw)
        assert speedups.whole_read(response, limit) is None  # urllib3 reads (and bounds, and decodes) it
        sock.close()


def test_whole_read_of_a_short_body_raises_as_http_client_does() -> None:
    response, sock = response_over(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nhello")
    with pytest.raises(http.client.IncompleteRead):
        speedups.whole_read(response, 64)
    sock.close()


def test_dot_products_agree_with_the_python_loop() -> None:
    query = array("f", [0.6, 0.8, 0.0]).tobytes()
    vectors = [array("f", values).tobytes() for values in ([0.6, 0.8, 0.0], [0.0, 0.0, 1.0], [-0.6, 0.8, 0.0])]
    assert python_dot_products(query, vectors) == pytest.approx([1.0, 0.0, 0.28], abs=1e-6)
    assert dot_products(query, vectors) == pytest.approx(python_dot_products(query, vectors), abs=1e-6)
    assert dot_products(query, []) == []
    assert FAST_DOT_PRODUCTS  # the test extras install numpy: the numpy path is the one checked above


def test_numpy_is_imported_only_when_vectors_are_compared() -> None:
    # 12 MB of RSS and a thread pool for a server that never compares vectors: not at start.
    code = ("import sys, mlstream.app.compose, mlstream.caching.semantic; assert 'numpy' not in sys.modules; "
            "from array import array; from mlstream.speedups import dot_products; "
            "dot_products(array('f', [1.0]).tobytes(), [array('f', [1.0]).tobytes()]); "
            "assert 'numpy' in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], timeout=HANG_GUARD).returncode == 0
