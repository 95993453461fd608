"""The internals ``mlstream.speedups`` relies on still exist and behave: loud, not slow."""

from __future__ import annotations

import http.client
import json
import socket
import threading

import urllib3

from mlstream.speedups import body_ready, escape_json_string, raw_read1, start_thread_nowait

HANG_GUARD = 10.0


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
