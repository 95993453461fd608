"""A provider call's head and body reach the provider in one write (one segment on loopback).

urllib3 on its own writes the head, then the body: the provider's server wakes for
the head and waits again for the body. A raw listener here records what its first
``recv`` returns.
"""

from __future__ import annotations

import socket
import threading

import pytest

from mlstream.models.connectors import ClientConfig, UpstreamRequest
from mlstream.errors import UpstreamError
from mlstream.upstream.client import UpstreamClient

from ..support.timeouts import HANG_GUARD

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
            response = client.send(request, ClientConfig(), allow_private=True)
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


class AnswersEarlyServer:
    """Reads a little of each request, answers ``answer`` at once, then closes: a provider
    refusing a large body (413) before reading it, or sending a head urllib3 refuses."""

    def __init__(self, answer: bytes, connections: int = 1) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, args=(connections,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self, connections: int) -> None:
        for _ in range(connections):
            conn, _ = self.listener.accept()
            with conn:
                conn.settimeout(HANG_GUARD)
                conn.recv(100)
                conn.sendall(self.answer)


def test_a_provider_that_answers_before_reading_the_body_is_heard() -> None:
    refusal = b'{"error": {"message": "request too large"}}'
    server = AnswersEarlyServer(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(refusal), refusal))
    client = UpstreamClient()
    try:
        request = UpstreamRequest("POST", server.url + "/v1/chat/completions", {}, b"x" * (8 << 20))
        response = client.send(request, ClientConfig(), allow_private=True)
        assert response.status == 413
        assert client.read_body(response, request.url) == refusal
    finally:
        client.close()
        server.listener.close()


def test_an_answer_head_urllib3_refuses_gives_its_connection_slot_back() -> None:
    server = AnswersEarlyServer(b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx", connections=3)
    client = UpstreamClient()
    try:
        for _ in range(3):
            with pytest.raises(UpstreamError):
                client.send(UpstreamRequest("POST", server.url + "/v1/x", {}, b"{}"),
                            ClientConfig(max_connection=4), allow_private=True)
        pool, _ = client._route(server.url + "/v1/x", 4, True)
        assert pool.pool.qsize() == 4  # every slot back
    finally:
        client.close()
        server.listener.close()
