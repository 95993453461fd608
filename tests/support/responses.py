"""A stand-in for a urllib3 response: a status, headers and a body in scripted chunks."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .timeouts import HANG_GUARD

BLOCK = object()  # read1 blocks until shutdown(), then returns b"" (the socket is shut down)


class StubResponse:
    """``read1`` hands out ``chunks`` in turn: bytes, an exception to raise, or
    :data:`BLOCK`. Every connection call is recorded in ``calls``, so a test can tell a
    drained (reused) connection from a closed one."""

    def __init__(self, chunks: Iterable[Any] = (), status: int = 200, headers: dict | None = None) -> None:
        self.status = status
        self.headers = headers if headers is not None else {}
        self._chunks = list(chunks)
        self.calls: list[str] = []
        self.reads = 0
        self.reading = threading.Event()  # set when read1 blocks on BLOCK
        self._shut = threading.Event()

    def read1(self, amount: int) -> bytes:
        self.reads += 1
        if not self._chunks:
            return b""
        chunk = self._chunks.pop(0)
        if chunk is BLOCK:
            self.reading.set()
            assert self._shut.wait(HANG_GUARD), "read1 was never unblocked"
            return b""
        if isinstance(chunk, BaseException):
            raise chunk
        return chunk

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        self._shut.set()

    def drain_conn(self) -> None:
        self.calls.append("drain_conn")

    def close(self) -> None:
        self.calls.append("close")

    def release_conn(self) -> None:
        self.calls.append("release_conn")
