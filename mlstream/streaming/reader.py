"""The provider reader: runs on a pool worker, turns one upstream stream into items.

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

from ..errors import MLStreamError, ProtocolError, UpstreamError
from ..providers.base import StreamDecoder
from ..providers.events import Done, Failure, Started
from ..upstream import ProviderCall
from .channel import Channel

log = logging.getLogger(__name__)

# Bytes asked of the upstream socket per read; read1 returns what has arrived, so
# this only caps a burst, it never waits to fill.
READ_SIZE = 64 * 1024


def read_stream(channel: Channel, call: ProviderCall, decoder: StreamDecoder, stall_timeout: float) -> None:
    """Relay one upstream stream into ``channel``; returns when it is over."""
    if channel.cancelled:  # the client left while this job waited in the backlog
        return
    try:
        response = call.open(lambda seconds: not channel.wait_cancelled(seconds))
    except MLStreamError as error:
        _put(channel, Failure(error), stall_timeout)
        return
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
    except Exception as exc:  # noqa: BLE001 - a read error (already ours) or a decoder bug
        if not channel.cancelled:
            _put(channel, Failure(exc if isinstance(exc, MLStreamError) else call.failure(exc)), stall_timeout)
    finally:
        channel.detach_upstream()
        call.finish(response, reusable=completed and not channel.cancelled)
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
