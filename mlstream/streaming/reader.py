"""The provider reader: runs on a pool worker, turns one upstream stream into items.

    send() -> headers ---non-2xx---> Failure(provider's error)       -> handler: HTTP status
                     +---2xx------> Started, then decoded Delta..., Done | Failure
    read timeout / broken connection -> Failure                       -> handler: status or final event
    channel cancelled (client gone)  -> stop quietly, close the upstream connection

Every path ends with exactly one terminal item on the channel (unless the channel
was cancelled, in which case nobody is listening), so the handler never hangs.
"""

from __future__ import annotations

import logging
from typing import Callable

import urllib3

from ..errors import MLStreamError, ProtocolError, UpstreamError
from ..providers.base import StreamDecoder
from ..upstream import translate_error
from .channel import Channel
from .events import Done, Failure, Started

log = logging.getLogger(__name__)

# Bytes asked of the upstream socket per read; read1 returns what has arrived, so
# this only caps a burst, it never waits to fill.
READ_SIZE = 64 * 1024


def read_stream(channel: Channel, send: Callable[[], urllib3.BaseHTTPResponse],
                on_error_response: Callable[[urllib3.BaseHTTPResponse], MLStreamError],
                decoder: StreamDecoder, url: str, stall_timeout: float) -> None:
    """Relay one upstream stream into ``channel``; returns when it is over."""
    if channel.cancelled:  # the client left while this job waited in the backlog
        return
    try:
        response = send()
    except MLStreamError as error:
        _put(channel, Failure(error), stall_timeout)
        return
    completed = False
    try:
        if not channel.attach_upstream(response):
            return
        if response.status >= 300:
            _put(channel, Failure(on_error_response(response)), stall_timeout)
            return
        if not _put(channel, Started(response.status), stall_timeout):
            return
        read = _reader_of(response)
        while True:
            data = read(READ_SIZE)
            items = decoder.feed(data) if data else decoder.finish()
            for item in items:
                if not _put(channel, item, stall_timeout):
                    return
                if isinstance(item, (Done, Failure)):
                    completed = isinstance(item, Done)
                    return
            if not data:
                return
    except ProtocolError as error:
        _put(channel, Failure(UpstreamError(f"the provider's stream is malformed: {error.reason}")), stall_timeout)
    except Exception as exc:  # noqa: BLE001 - translated at this boundary
        if not channel.cancelled:
            _put(channel, Failure(translate_error(exc, url)), stall_timeout)
    finally:
        channel.detach_upstream()
        _finish(response, reusable=completed and not channel.cancelled)


def _reader_of(response: urllib3.BaseHTTPResponse) -> Callable[[int], bytes]:
    """The cheapest way to read what has arrived of ``response``'s body.

    Streamed answers are not compressed in practice; then http.client's own
    (chunk-aware) ``read1`` skips urllib3's decoding layer, a third of the reader's
    cost per chunk. A compressed body goes through urllib3, which decodes it.
    """
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    raw = getattr(response, "_fp", None)
    if encoding == "identity" and raw is not None and hasattr(raw, "read1"):
        return raw.read1
    return response.read1


def _put(channel: Channel, item: object, stall_timeout: float) -> bool:
    """Put ``item``; on a stall cancel the channel, so no path ends without a terminal
    item or a cancel (a final Failure silently dropped would leave the writer waiting)."""
    if channel.put(item, stall_timeout):  # type: ignore[arg-type]
        return True
    if not channel.cancelled:
        # Still full after the stall timeout: the client stopped reading.
        log.info("client stopped reading for %.0f s; cancelling the stream", stall_timeout)
        channel.cancel()
    return False


def _finish(response: urllib3.BaseHTTPResponse, *, reusable: bool) -> None:
    """Give the connection back to the pool if the body was read cleanly, else close it."""
    try:
        if reusable:
            response.drain_conn()  # the terminating chunk after [DONE]
        else:
            response.close()
    finally:
        response.release_conn()
