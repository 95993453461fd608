"""A streamed answer on the wire: its bytes, and the loop that writes them off its channel.

    first_item(channel)   waits for the provider's answer: an error is still a status
    SSEWriter.run()       head + events, batched, framed (HTTP/1.1 chunks, or bare
                          bytes for an HTTP/1.0 client, whose body ends at the close),
                          a heartbeat comment whenever the provider is silent, and
                          exactly one final event: ``is_last`` or ``{"error": ...}``

What each event says is its front's (``routing.StreamEvents``: ml-commons' envelope,
OpenAI's chunks, ...); this module frames, batches and writes them.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Callable

from ..errors import ClientGone, MLStreamError
from ..providers.events import Chunk, Delta, Done, Failure, Reasoning, Started, StreamItem
from ..wire.sse import encode_comment
from ..streaming.channel import Channel
from .responses import GZIP_LEVEL, GZIP_WBITS
from .routing import StreamEvents

# Events already queued are written together (each still its own HTTP chunk), so a
# fast provider costs one syscall per batch instead of one per token.
MAX_BATCH_EVENTS = 64

HEARTBEAT = encode_comment("ping")
LAST_CHUNK = b"0\r\n\r\n"

def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of ``data`` (never empty: that would end the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def unframed(data: bytes) -> bytes:
    """``data`` as it is: the framing of a close-delimited (HTTP/1.0) body."""
    return data


def gzip_framing(frame: Callable[[bytes], bytes], end: bytes) -> tuple[Callable[[bytes], bytes],
                                                                     Callable[[], bytes]]:
    """``frame`` and ``finish`` for a gzip-coded stream: each event compressed and flushed
    on its own (a sync flush: the client decodes it at once, compression holds nothing
    back); ``finish`` gives the gzip trailer, then ``end``."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)

    def gzip_frame(data: bytes) -> bytes:
        return frame(compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))

    def finish() -> bytes:
        return frame(compressor.flush()) + end

    return gzip_frame, finish


# Names the target that served a router model's call, on its answer or stream.
MODEL_ID_HEADER = "X-MLStream-Model-Id"


def stream_head(server: str, date: str, request_id: str, *, chunked: bool, close: bool,
                gzip: bool = False, model_id: str | None = None, extra: dict[str, str] | None = None) -> bytes:
    """The status line and headers of a 200 event stream, as bytes for one write.

    ``request_id`` is a checked token (``framing.request_id``), never raw input.
    """
    lines = ["HTTP/1.1 200 OK", f"Server: {server}", f"Date: {date}",
             "Content-Type: text/event-stream; charset=utf-8", "Cache-Control: no-cache",
             "X-Accel-Buffering: no"]
    if gzip:
        lines += ["Content-Encoding: gzip", "Vary: Accept-Encoding"]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    lines.append(f"X-Request-Id: {request_id}")
    if model_id is not None:  # a router's target: an id the registry made or checked
        lines.append(f"{MODEL_ID_HEADER}: {model_id}")
    if extra:  # headers the server made (x-ratelimit-*), never a client's text
        lines += [f"{name}: {value}" for name, value in extra.items()]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def first_item(channel: Channel, heartbeat: float) -> tuple[StreamItem | None, int | None]:
    """The first item worth a status line, and the provider's status if it answered.

    Before the provider's headers: wait silently (a failure is still a status). Once
    they are in, the first frame usually follows at once: holding the status line
    until then (at most one heartbeat interval) lets an error frame that opens the
    stream (Bedrock throttling, an OpenAI error event) still be a proper HTTP status.
    None: the provider said nothing more within the heartbeat interval.
    """
    item = channel.get(None)
    if not isinstance(item, Started):
        return item, None
    return channel.get(heartbeat), item.status


class SSEWriter:
    """Writes one committed stream to the client; its counters are read afterwards."""

    def __init__(self, write: Callable[[bytes], Any], *, events: StreamEvents, chunked: bool, heartbeat: float,
                 started: float, gzip: bool = False, on_end: Callable[[StreamItem], None] | None = None) -> None:
        self._write = write
        self._events = events
        self._on_end = on_end  # called with the Done or Failure before the last write
        frame, end = (chunk, LAST_CHUNK) if chunked else (unframed, b"")
        # What ends the body: the last chunk (nothing for HTTP/1.0), after the gzip trailer if any.
        self._frame, self._finish = gzip_framing(frame, end) if gzip else (frame, lambda: end)
        self._heartbeat = heartbeat
        self._started = started
        self.events = 0                          # content events written
        self.bytes_out = 0
        self.first_event_seconds: float | None = None  # from the request's start
        self.outcome: str | None = None          # completed | failed | client_gone; None while open
        self.failure: MLStreamError | None = None  # the provider's, when outcome is "failed"

    def run(self, channel: Channel, item: StreamItem | None, head: bytes) -> None:
        """From ``item`` (the first, or None for silence) to the stream's end.

        ``head`` goes out with the first write: one write, one wake-up of the client.
        Write errors (the client gone) propagate; ``outcome`` then stays None.
        """
        write, frame, finish = self._write, self._frame, self._finish
        events = self._events
        content, reasoning, relayed = events.content, events.reasoning, events.relayed
        while True:
            if item is None:
                write(head + frame(HEARTBEAT))
                head = b""
                item = channel.get(self._heartbeat)
                continue
            batch: list[bytes] = []
            outcome = None
            while item is not None:
                if type(item) is Delta:
                    batch.append(frame(content(item.content)))
                    self.events += 1
                elif type(item) is Chunk:
                    batch.append(frame(relayed(item.data)))
                    self.events += 1
                elif type(item) is Reasoning:
                    batch.append(frame(reasoning(item.text)))
                    self.events += 1
                elif type(item) is Done:
                    batch.append(frame(events.last(item.finish_reason, item.usage)))
                    batch.append(finish())
                    outcome = "completed"
                elif type(item) is Failure:
                    # A client that only shut its sending side still reads: end the body
                    # properly for it (for one that is gone, the write just fails).
                    if isinstance(item.error, ClientGone):
                        outcome = "client_gone"
                    else:
                        outcome, self.failure = "failed", item.error
                    batch.append(frame(events.error(item.error)))
                    batch.append(finish())
                if outcome is not None:
                    if self._on_end is not None:
                        self._on_end(item)
                    break
                if len(batch) >= MAX_BATCH_EVENTS:
                    break
                item = channel.get_nowait()
            data = b"".join(batch)
            write(head + data if head else data)
            head = b""
            self.bytes_out += len(data)
            if self.first_event_seconds is None and self.events:
                self.first_event_seconds = time.monotonic() - self._started
            if outcome is not None:
                self.outcome = outcome
                return
            item = channel.get(self._heartbeat)
