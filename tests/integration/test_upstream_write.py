"""A provider call's head and body reach the provider in one write (one segment on loopback).

urllib3 on its own writes the head, then the body: the provider's server wakes for
the head and waits again for the body. A raw listener here records what its first
``recv`` returns.
"""

from __future__ import annotations

import socket
import threading

import pytest

from mlstream.connectors import ClientConfig, UpstreamRequest
from mlstream.upstream import UpstreamClient

from .conftest import HANG_GUARD

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class OneRecvServer:
    """Accepts one connection per request, keeps the first recv of each, answers ANSWER."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.first_reads: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(HANG_GUARD)
            for _ in range(2):  # two requests on the kept-alive connection
                first = conn.recv(1 << 16)
                self.first_reads.append(first)
                head, _, body = first.partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                while len(body) < length:
                    body += conn.recv(1 << 16)
                conn.sendall(ANSWER)


@pytest.mark.parametrize("extra", [{}, {"content-length": "999"}], ids=["plain", "wrong-content-length-header"])
def test_head_and_body_go_in_one_write(extra: dict[str, str]) -> None:
    server = OneRecvServer()
    client = UpstreamClient()
    try:
        for body in (b'{"messages": [1, 2, 3]}', b'{"x": "' + b"y" * 3000 + b'"}'):
            request = UpstreamRequest("POST", server.url + "/v1/chat/completions",
                                      {"Content-Type": "application/json", **extra}, body)
            response = client.send(request, ClientConfig(), stream=False, allow_private=True)
            assert client.read_body(response, request.url) == b"{}"
        server.thread.join(HANG_GUARD)
        assert len(server.first_reads) == 2
        for first, body in zip(server.first_reads,
                               (b'{"messages": [1, 2, 3]}', b'{"x": "' + b"y" * 3000 + b'"}')):
            head, _, sent = first.partition(b"\r\n\r\n")
            assert sent == body  # the whole body came with the head
            lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            assert lengths == [f"Content-Length: {len(body)}".encode()]
    finally:
        client.close()
        server.listener.close()
