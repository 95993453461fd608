"""Raw HTTP, to check the exact bytes on the wire."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

from .timeouts import HANG_GUARD


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    chunks: list[bytes]      # the HTTP chunks, in order (chunked responses)
    body: bytes              # the whole body, de-chunked
    complete: bool           # the terminating zero-length chunk arrived

    def events(self) -> list[dict[str, Any]]:
        """Every SSE ``data:`` payload, parsed; asserts the exact ``data: <json>\\n\\n`` framing."""
        text = self.body.decode("utf-8")
        blocks = [block for block in text.split("\n\n") if block]
        assert text.endswith("\n\n"), text[-50:]
        events = []
        for block in blocks:
            if block.startswith(":"):
                continue
            assert block.startswith("data: ") and "\n" not in block, block
            events.append(json.loads(block[len("data: "):]))
        return events


def raw_request(url: str, method: str, path: str, body: bytes = b"", *, headers: dict[str, str] | None = None,
                chunked_request: bool = False, timeout: float = HANG_GUARD) -> RawResponse:
    """One request over a fresh socket; reads the response to its end."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
                "Connection: close"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if chunked_request:
            head.append("Transfer-Encoding: chunked")
            payload = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
        else:
            head.append(f"Content-Length: {len(body)}")
            payload = body
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        reader = sock.makefile("rb")
        return read_response(reader)


def read_response(reader: Any) -> RawResponse:
    status_line = reader.readline().decode()
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    chunks: list[bytes] = []
    complete = False
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size_line = reader.readline()
            if not size_line:
                break
            size = int(size_line.strip() or b"0", 16)
            if size == 0:
                reader.readline()
                complete = True
                break
            chunks.append(reader.read(size))
            assert reader.read(2) == b"\r\n"
        body = b"".join(chunks)
    else:
        body = reader.read(int(headers.get("content-length", "0")))
        complete = True
    return RawResponse(status, headers, chunks, body, complete)
