"""A whole reply's head on the wire: the stdlib's lines in the stdlib's order, then the body."""

from __future__ import annotations

import json
import re
import socket

from ..support.timeouts import HANG_GUARD
from ..support.wire import read_response


def test_a_replys_head_lines_and_body_and_a_head_request_on_the_same_connection(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        reader = sock.makefile("rb")
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: abc-1\r\n\r\n".encode())
        assert reader.readline() == b"HTTP/1.1 200 OK\r\n"
        lines = []
        while (line := reader.readline()) != b"\r\n":
            assert line.endswith(b"\r\n") and line.count(b"\r\n") == 1, line
            lines.append(line.decode("latin-1").rstrip("\r\n"))
        names = [line.split(":", 1)[0] for line in lines]
        assert names == ["Server", "Date", "Content-Type", "Content-Length", "X-Request-Id"], lines
        assert lines[0].startswith("Server: mlstream/")
        assert re.fullmatch(r"Date: \w{3}, \d\d \w{3} \d{4} [\d:]{8} GMT", lines[1])
        assert lines[4] == "X-Request-Id: abc-1"
        body = reader.read(int(lines[3].split(": ")[1]))
        assert json.loads(body)["name"] == "mlstream"

        # HEAD: the same head, no body; the connection goes on with the next answer
        sock.sendall(f"HEAD / HTTP/1.1\r\nHost: {host}\r\n\r\nGET / HTTP/1.1\r\nHost: {host}\r\n"
                     f"Connection: close\r\n\r\n".encode())
        head = read_response_head(reader)
        assert head["status"] == "HTTP/1.1 200 OK" and int(head["content-length"]) == len(body)
        last = read_response(reader)
        assert last.status == 200 and last.headers["connection"] == "close" and last.body == body
        assert reader.read() == b""


def read_response_head(reader) -> dict[str, str]:
    head = {"status": reader.readline().decode().rstrip("\r\n")}
    while (line := reader.readline()) != b"\r\n":
        name, _, value = line.decode().partition(":")
        head[name.strip().lower()] = value.strip()
    return head
