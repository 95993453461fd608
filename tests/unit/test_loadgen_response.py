"""The load generator's response parser on event-stream bodies (SageMaker's framing):
a frame that cannot be one fails the response instead of stalling the parser."""

from __future__ import annotations

import struct
import threading

import pytest

from bench.loadgen import Dialect, Request, Response
from mlstream.testing.eventstream import encode_payload_part

from ..support.timeouts import HANG_GUARD

EVENTSTREAM = Dialect("eventstream", b'"token"', b'"generated_text":"', separator=b"\n\n", eventstream=True)
HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def fed(body: bytes) -> Response:
    """A response fed ``body`` as one chunk, on a thread: a parser that loops is a failure, not a hang."""
    response = Response(Request(b"", EVENTSTREAM, stream=True), 0.0)
    feeding = threading.Thread(target=response.feed, args=(HEAD + chunk(body), 1.0), daemon=True)
    feeding.start()
    feeding.join(HANG_GUARD)
    assert not feeding.is_alive(), "the parser is stuck on the frame"
    return response


def test_whole_frames_are_unframed():
    response = fed(encode_payload_part(b'data: {"token": "a"}\n\n'))
    assert response.error is None and response.content == 1


@pytest.mark.parametrize("total, headers", [(0, 0), (8, 0), (15, 0), (20, 5)])
def test_a_frame_shorter_than_its_prelude_and_crc_fails_the_response(total, headers):
    frame = struct.pack("!II", total, headers) + b"\0" * 12
    response = fed(frame)
    assert response.done and response.error is not None and "corrupt" in response.error
    assert not response.ok
