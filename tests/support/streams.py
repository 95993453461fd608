"""Predict streams: the seed's request, opening one by hand, and (white-box) its channel."""

from __future__ import annotations

import json
import socket
from typing import Any

from mlstream.streaming.channel import Channel

from .timeouts import HANG_GUARD

SEED_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Can you summarize Prince Hamlet of William Shakespeare in around 1000 words?"},
]


def stream_body(**parameters: Any) -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES, "_llm_interface": "openai/v1/chat/completions",
                           **parameters}}


def open_stream(server, model_id: str, headers: dict[str, str] | None = None) -> tuple[socket.socket, Any]:
    """Start a stream and read up to its first event; returns the socket and its reader."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=HANG_GUARD)
    body = json.dumps(stream_body()).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    sock.sendall(f"POST /_plugins/_ml/models/{model_id}/_predict/stream HTTP/1.1\r\nHost: x\r\n{extra}"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    reader = sock.makefile("rb")
    assert reader.readline().startswith(b"HTTP/1.1 200")
    while reader.readline() != b"\r\n":
        pass
    reader.readline()  # first chunk size
    assert reader.readline().startswith(b"data: ")
    return sock, reader


def post_stream(url: str, model_id: str, body: dict | None = None, rcvbuf: int | None = None) -> socket.socket:
    """Send a predict-stream request and return the socket, nothing read yet."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(HANG_GUARD)
    sock.connect((host, int(port)))
    payload = json.dumps(body or stream_body()).encode()
    sock.sendall(f"POST /_plugins/_ml/models/{model_id}/_predict/stream HTTP/1.1\r\nHost: x\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def stream_channel(server) -> Channel:
    """The one open stream's channel (registered before its reader starts, so there once
    the pool counts it running). White-box: InFlight only exposes a count."""
    assert server.app.pool.wait_until(lambda pool: pool.active == 1, HANG_GUARD)
    channels = list(server.app.in_flight._channels)
    assert len(channels) == 1, channels
    return channels[0]


def held_in_channel(channel: Channel) -> int:
    """Items put by the reader and not yet taken by the writer (white-box)."""
    return channel.held
