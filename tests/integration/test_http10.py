"""HTTP/1.0 clients: a stream is a close-delimited body, never chunked (RFC 9112 6.1).

Each test speaks HTTP/1.0 over a raw socket and reads to EOF, so it sees exactly
the bytes on the wire: headers, the bare SSE events, and the close that ends them.
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass
from typing import Any

from mlstream.testing.fake_openai import DEFAULT_TEXT, Scenario, fake_tokens

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import RawResponse, read_response

ML = "/_plugins/_ml"
# A chunk-size line as chunked framing would put it at the start of the body or of an event.
CHUNK_SIZE_LINE = re.compile(rb"(^|\n)[0-9a-fA-F]+\r\n")


@dataclass
class Http10Response:
    status: int
    headers: dict[str, str]
    body: bytes  # everything after the head, up to EOF

    def events(self) -> list[dict[str, Any]]:
        return RawResponse(self.status, self.headers, [], self.body, True).events()


def http10_exchange(url: str, method: str, path: str, body: bytes = b"",
                    headers: dict[str, str] | None = None) -> Http10Response:
    """One HTTP/1.0 request on a fresh socket; reads until the server closes it."""
    host, port = url.removeprefix("http://").split(":")
    head = [f"{method} {path} HTTP/1.0", f"Host: {host}:{port}", "Content-Type: application/json",
            f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in (headers or {}).items()]
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        raw = sock.makefile("rb").read()  # to EOF: a server that does not close fails on the timeout
    head_bytes, sep, rest = raw.partition(b"\r\n\r\n")
    assert sep, raw[:300]
    lines = head_bytes.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    parsed: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        assert name.lower() not in parsed, f"duplicate header {name}: {head_bytes!r}"
        parsed[name.strip().lower()] = value.strip()
    return Http10Response(status, parsed, rest)


def dataasmap(event: dict) -> dict:
    return event["inference_results"][0]["output"][0]["dataAsMap"]


def assert_close_delimited_sse(response: Http10Response) -> None:
    assert response.status == 200, response.body[:300]
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    assert "transfer-encoding" not in response.headers, response.headers
    assert "content-length" not in response.headers, response.headers
    assert response.headers["connection"].lower() == "close", response.headers
    # the bare events: no chunk-size lines, no CRLF of chunk framing, no terminating 0 chunk
    assert response.body.startswith((b"data: ", b":")), response.body[:100]
    assert b"\r\n" not in response.body, response.body[:300]
    assert not CHUNK_SIZE_LINE.search(response.body), response.body[:300]


def stream_path(model_id: str) -> str:
    return f"{ML}/models/{model_id}/_predict/stream"


# --- streams ------------------------------------------------------------------------------

def test_http10_stream_is_close_delimited_sse(server, fake):
    model_id = Client(server.url).model_for(openai_connector(fake))
    response = http10_exchange(server.url, "POST", stream_path(model_id), json.dumps(stream_body()).encode())
    assert_close_delimited_sse(response)
    maps = [dataasmap(event) for event in response.events()]
    assert [m["content"] for m in maps[:-1]] == fake_tokens(Scenario())
    assert "".join(m["content"] for m in maps) == DEFAULT_TEXT
    assert maps[-1] == {"content": "", "is_last": True, "finish_reason": "stop"}
    assert response.body.endswith(b"\n\n")


def test_http10_stream_closes_even_when_the_client_asks_for_keep_alive(server, fake):
    model_id = Client(server.url).model_for(openai_connector(fake))
    response = http10_exchange(server.url, "POST", stream_path(model_id), json.dumps(stream_body()).encode(),
                               headers={"Connection": "keep-alive"})
    assert_close_delimited_sse(response)
    assert dataasmap(response.events()[-1])["is_last"] is True


def test_http10_stream_heartbeats_are_unframed(make_server, fake):
    server = make_server(heartbeat_interval=0.05)
    slow = Scenario(chunks=3, delay_ms=300)
    model_id = Client(server.url).model_for(openai_connector(fake, model=slow.to_model()))
    response = http10_exchange(server.url, "POST", stream_path(model_id), json.dumps(stream_body()).encode())
    assert_close_delimited_sse(response)
    assert b"\n: ping\n\n" in response.body or response.body.startswith(b": ping\n\n"), response.body[:300]
    maps = [dataasmap(event) for event in response.events()]
    assert [m["content"] for m in maps[:-1]] == fake_tokens(slow)
    assert maps[-1]["is_last"] is True


def test_http10_stream_error_event_then_close(server, fake):
    failing = Scenario(chunks=5, error_after=2)
    model_id = Client(server.url).model_for(openai_connector(fake, model=failing.to_model()))
    response = http10_exchange(server.url, "POST", stream_path(model_id), json.dumps(stream_body()).encode())
    assert_close_delimited_sse(response)
    events = response.events()
    assert [dataasmap(event)["content"] for event in events[:-1]] == fake_tokens(failing)[:2]
    assert set(events[-1]) == {"error"} and events[-1]["error"], events[-1]


def test_http11_stream_is_still_chunked_and_keeps_the_connection(server, fake):
    model_id = Client(server.url).model_for(openai_connector(fake))
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps(stream_body()).encode()
    request = (f"POST {stream_path(model_id)} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        reader = sock.makefile("rb")
        for _ in range(2):  # the same connection serves a second stream
            sock.sendall(request)
            response = read_response(reader)
            assert response.status == 200 and response.complete
            assert response.headers["transfer-encoding"] == "chunked"
            assert "connection" not in response.headers
            assert dataasmap(response.events()[-1])["is_last"] is True


# --- other replies to HTTP/1.0 (the stdlib's close_connection rules, checked) ---------------

def test_http10_reply_has_content_length_and_closes(server):
    response = http10_exchange(server.url, "GET", "/")
    assert response.status == 200
    assert int(response.headers["content-length"]) == len(response.body)
    assert "transfer-encoding" not in response.headers
    assert response.headers["connection"].lower() == "close"
    assert json.loads(response.body)["name"] == "mlstream"


def test_http10_refused_stream_is_a_json_error_that_closes(server):
    response = http10_exchange(server.url, "POST", stream_path("no-such-model"), json.dumps(stream_body()).encode())
    assert response.status == 404
    assert int(response.headers["content-length"]) == len(response.body)
    assert response.headers["connection"].lower() == "close"
    assert json.loads(response.body)["status"] == 404


def test_http10_keep_alive_client_keeps_its_connection_for_plain_replies(server):
    host, port = server.url.removeprefix("http://").split(":")
    request = f"GET / HTTP/1.0\r\nHost: {host}:{port}\r\nConnection: keep-alive\r\n\r\n".encode()
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        reader = sock.makefile("rb")
        for _ in range(2):
            sock.sendall(request)
            response = read_response(reader)  # reads exactly Content-Length bytes
            assert response.status == 200 and "connection" not in response.headers, response.headers
            assert json.loads(response.body)["name"] == "mlstream"
        # and a request without keep-alive on it is answered, then the connection closes
        sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode())
        last = read_response(reader)
        assert last.status == 200 and last.headers["connection"].lower() == "close"
        assert reader.read() == b""
