"""The provider reader: turns one upstream stream into items on its channel.

``start_stream`` opens the provider call on the calling thread when a pool worker
is free (the writer has nothing to do until the first token anyway, and the
hand-over to a worker costs a thread wake-up on the way to it), then hands the
body to a worker; when none is free, the whole job waits in the pool, in order.

    call.open() -> headers ---non-2xx---> Failure(provider's error)   -> writer: HTTP status
                          +---2xx------> Started, then decoded Delta..., Done | Failure
    read timeout / broken connection -> Failure                       -> writer: status or final event
    channel cancelled (client gone)  -> stop quietly, close the upstream connection

Every path ends with exactly one terminal item on the channel, or with the channel
cancelled (nobody is listening, or the writer stalled), so the writer never hangs.
The reader knows no HTTP client: the ``ProviderCall`` opens, reads and translates.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from ..errors import MLStreamError, Overloaded, ProtocolError, UpstreamError
from ..providers.base import StreamDecoder
from ..providers.events import Done, Failure, Started
from ..upstream import ProviderCall
from .channel import Channel
from .pool import StreamPool

log = logging.getLogger(__name__)

# Bytes asked of the upstream socket per read; read1 returns what has arrived, so
# this only caps a burst, it never waits to fill.
READ_SIZE = 64 * 1024
# How long the reader waits for the writer to take a stream's first token before it
# decodes on (channel.hand_over); only ever reached when the writer is busy elsewhere.
HAND_OVER_SECONDS = 0.005


def start_stream(pool: StreamPool, channel: Channel, call: ProviderCall, decoder: StreamDecoder,
                 stall_timeout: float) -> None:
    """Start relaying; raises Overloaded (before anything was sent) when the pool is full."""
    if not pool.lease():
        pool.submit(partial(read_stream, channel, call, decoder, stall_timeout))
        return
    try:
        response = open_response(channel, call, stall_timeout)
    except BaseException:
        pool.end_lease()
        raise
    if response is None:
        pool.end_lease()
        return
    try:
        pool.hand_over(partial(relay_body, channel, call, decoder, stall_timeout, response))
    except Overloaded as error:  # shutting down
        call.finish(response, reusable=False)
        channel.cancel(error)


def read_stream(channel: Channel, call: ProviderCall, decoder: StreamDecoder, stall_timeout: float) -> None:
    """Relay one upstream stream into ``channel``; returns when it is over."""
    if channel.cancelled:  # the client left while this job waited in the backlog
        return
    response = open_response(channel, call, stall_timeout)
    if response is not None:
        relay_body(channel, call, decoder, stall_timeout, response)


def open_response(channel: Channel, call: ProviderCall, stall_timeout: float) -> Any:
    """The provider's response, headers in; None if it failed (its Failure is on the channel)."""
    try:
        return call.open(lambda seconds: not channel.wait_cancelled(seconds))
    except MLStreamError as error:
        _put(channel, Failure(error), stall_timeout)
        return None


def relay_body(channel: Channel, call: ProviderCall, decoder: StreamDecoder, stall_timeout: float,
               response: Any) -> None:
    """From the provider's headers to the end of its body; the connection is then
    given back to the pool (read cleanly) or closed."""
    completed = False
    try:
        if not channel.attach_upstream(response):
            return
        if response.status >= 300:
            _put(channel, Failure(call.error(response)), stall_timeout)
            return
        if not _put(channel, Started(response.status), stall_timeout):
            return
        read = call.body_reader(response)
        first = True
        while True:
            data = read(READ_SIZE)
            items = decoder.feed(data) if data else decoder.finish()
            for item in items:
                if not _put(channel, item, stall_timeout, hand_over=first):
                    return
                first = False
                if isinstance(item, (Done, Failure)):
                    completed = isinstance(item, Done)
                    return
            if not data:
                return
    except ProtocolError as error:
        _put(channel, Failure(UpstreamError(f"the provider's stream is malformed: {error.reason}")), stall_timeout)
    except Exception as exc:  # noqa: BLE001 - a read error (already ours) or a decoder bug
        if not channel.cancelled:
            _put(channel, Failure(exc if isinstance(exc, MLStreamError) else call.failure(exc)), stall_timeout)
    finally:
        channel.detach_upstream()
        call.finish(response, reusable=completed and not channel.cancelled)


def _put(channel: Channel, item: object, stall_timeout: float, *, hand_over: bool = False) -> bool:
    """Put ``item``; on a stall cancel the channel, so no path ends without a terminal
    item or a cancel (a final Failure silently dropped would leave the writer waiting).
    ``hand_over``: wait for the writer to take it (the stream's first item)."""
    if (channel.hand_over(item, stall_timeout, HAND_OVER_SECONDS) if hand_over  # type: ignore[arg-type]
            else channel.put(item, stall_timeout)):  # type: ignore[arg-type]
        return True
    if not channel.cancelled:
        # Still full after the stall timeout: the client stopped reading.
        log.info("client stopped reading for %.0f s; cancelling the stream", stall_timeout)
        channel.cancel()
    return False
