"""The provider reader: turns one upstream stream into items on its channel.

``start_stream`` admits the stream (``pool.admit``: 429 when the readers are a backlog
behind), opens the provider call on the calling thread (the client's handler, which
has nothing to do until the first token anyway) and reads the first token there too
if it comes soon. The rest of the body is read in slices: the stream's socket waits
on the watcher, holding no thread; when bytes arrive a pool worker reads and decodes
what is there, puts it on the channel, and gives the socket back to the watcher. A
client slower than its provider makes the stream wait for a credit (``when_credit``),
again holding no thread, until the stall timeout cancels it. A body that cannot be
read without blocking (a content coding, no epoll) is read by one worker to its end,
as before.

    call.open() -> headers ---non-2xx---> Failure(provider's error)   -> writer: HTTP status
                          +---2xx------> Started, then decoded Delta..., Done | Failure
    read timeout / broken connection -> Failure                       -> writer: status or final event
    channel cancelled (client gone)  -> stop quietly, close the upstream connection

Every path ends with exactly one terminal item on the channel, or with the channel
cancelled (nobody is listening, or the writer stalled), so the writer never hangs; and
with exactly one ``pool.end``. The reader knows no HTTP client: the ``ProviderCall``
opens, reads and translates.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from ..errors import MLStreamError, ProtocolError, ShuttingDown, UpstreamError
from ..providers.base import StreamDecoder
from ..providers.events import Done, Failure, Started
from ..speedups import body_ready
from ..upstream.body import SocketBody
from ..upstream.client import ProviderCall
from .channel import Channel
from .pool import StreamPool
from .watcher import Watcher

log = logging.getLogger(__name__)

# Bytes asked of the upstream socket per read; read1 returns what has arrived, so
# this only caps a burst, it never waits to fill.
READ_SIZE = 64 * 1024
# How long the reader waits for the writer to take a stream's first token before it
# decodes on (channel.hand_over); only ever reached when the writer is busy elsewhere.
HAND_OVER_SECONDS = 0.005
# How long the thread that opened a provider call waits for the body's first item
# before it hands the reading to a worker: providers send their first event within
# milliseconds of their head, and this thread has nothing else to do meanwhile (the
# status line is held for the first event anyway).
FIRST_BYTES_WAIT_SECONDS = 0.05
# Reads one slice takes before the stream goes to the back of the pool's queue: a
# stream whose provider sends faster than it is read cannot keep a worker from the rest.
SLICE_READS = 16


class Reroute(Protocol):
    """Where a stream goes when its provider fails before answering (a router model's next
    target): only ever asked before the provider's 2xx head, so before the client's first byte."""

    def after(self, error: MLStreamError) -> "tuple[ProviderCall, StreamDecoder] | MLStreamError":
        """The next call to try, or the error the stream ends with."""

    def opened(self) -> None:
        """The call last given answered 2xx: the stream is committed to it."""


def start_stream(pool: StreamPool, watcher: Watcher | None, channel: Channel, call: ProviderCall,
                 decoder: StreamDecoder, stall_timeout: float, reroute: Reroute | None = None) -> None:
    """Start relaying; raises Overloaded (before anything was sent) when the readers are
    a backlog behind. ``watcher`` None: the body is read by a worker that waits on it."""
    pool.admit()
    relay = None
    try:
        opened = open_response(channel, call, decoder, stall_timeout, reroute)
        if opened is None:
            pool.end()
            return
        call, decoder, response = opened
        relay = BodyRelay(channel, call, decoder, response, stall_timeout, pool, watcher)
        more = relay.run(steps=0, here=True)  # the head: attached (cancel wakes what follows), Started put
        # The first item is read here too if it comes soon: often with the head already,
        # else in the next packets (OpenAI sends a role-only chunk, no item, first).
        deadline = time.monotonic() + FIRST_BYTES_WAIT_SECONDS
        while (more and not relay.relayed and (left := deadline - time.monotonic()) > 0
               and body_ready(response, left)):
            more = relay.run(steps=1, here=True)
    except BaseException:
        if relay is None:
            pool.end()
        else:
            relay.close()
        raise
    if more:
        # The rest once the writer has sent what is here and would wait: a worker woken
        # now would take the GIL from the writer on its way to the client.
        channel.defer_reader(relay.resume)


def read_stream(channel: Channel, call: ProviderCall, decoder: StreamDecoder, stall_timeout: float,
                reroute: Reroute | None = None) -> None:
    """Relay one upstream stream into ``channel``; returns when it is over."""
    if channel.cancelled:  # the client left while this job waited in the backlog
        return
    opened = open_response(channel, call, decoder, stall_timeout, reroute)
    if opened is not None:
        BodyRelay(channel, *opened, stall_timeout).run()


def open_response(channel: Channel, call: ProviderCall, decoder: StreamDecoder, stall_timeout: float,
                  reroute: Reroute | None = None) -> tuple[ProviderCall, StreamDecoder, Any] | None:
    """The provider's response, headers in, with the call and decoder it belongs to; None
    if it failed (its Failure is on the channel). With ``reroute``, a call that fails or
    answers an error status gives way to the next one, until one answers 2xx."""
    while True:
        try:
            response = call.open(lambda seconds: not channel.wait_cancelled(seconds))
            if reroute is None or response.status < 300:
                if reroute is not None:
                    reroute.opened()
                return call, decoder, response
            error: MLStreamError = call.error(response)  # reads the (bounded) error body
        except MLStreamError as failed:
            error = failed
        if reroute is None or channel.cancelled:
            _put(channel, Failure(error), stall_timeout)
            return None
        following = reroute.after(error)
        if isinstance(following, MLStreamError):
            _put(channel, Failure(following), stall_timeout)
            return None
        call, decoder = following


class BodyRelay:
    """A response, from its headers to the end of its body, onto the channel: a read at
    a time on the thread that calls ``run``, or in slices on the pool once ``resume``d.
    When it is over the connection is given back to the pool (read cleanly) or closed,
    and the stream's ``pool.end`` is called."""

    def __init__(self, channel: Channel, call: ProviderCall, decoder: StreamDecoder, response: Any,
                 stall_timeout: float, pool: StreamPool | None = None, watcher: Watcher | None = None) -> None:
        self._channel = channel
        self._call = call
        self._decoder = decoder
        self._stall = stall_timeout
        self._response = response
        self._pool = pool
        self._watcher = watcher
        self._read: Any = None  # set once the headers were accepted and Started put
        # The worker's reader: every chunk that has arrived in one read. Made at the
        # worker's first read, after the writer's thread last read (and peeked, through
        # http.client: body_ready) the body its own way.
        self._bulk_read: Any = None
        self._body: SocketBody | None = None  # the slices' reader, once resumed on the watcher
        self._first = True      # the next item is the stream's first after Started
        self._completed = False
        self._ended = False     # over: closed, and the pool told
        self._timed_out = False  # the watcher's read timeout passed
        # Items decoded on the writer's thread that did not fit: that thread must never
        # wait for room in its own channel, so the worker puts them first.
        self._pending: list[Any] = []
        self._pending_data = b""
        self._terminal = False  # the pending items end the stream (a Done or a Failure is among them)

    def resume(self) -> None:
        """Hand the rest of the body to the pool: in slices between waits on the watcher
        when the socket can be read without blocking, else one worker to its end. Runs
        once (``Channel.defer_reader``), on whichever thread the channel runs it."""
        pool = self._pool
        assert pool is not None, "a relay resumed needs its pool"
        if self._watcher is not None and not self._channel.cancelled:
            try:
                self._body = self._call.socket_body(self._response)
            except MLStreamError:
                self._body = None
        if self._body is not None:
            pending, self._pending = self._pending, []
            self._take(pending)  # what the writer's thread left: its terminal item marked
            pool.run(self._slice, self._dropped)
        else:
            pool.run(self.run, self._dropped)

    def run(self, steps: int | None = None, *, here: bool = False) -> bool:
        """Read until the stream is over, or ``steps`` reads (0: only its start); True if
        it is not over yet. ``here``: on the writer's own thread (then the first item
        is not handed over: nobody would take it while this thread puts it)."""
        try:
            over = self._read is None and not self._begin()
            taken = 0
            while not over and (steps is None or taken < steps):
                # Cancelled (the client left) while this waited for a worker: read nothing more.
                over = self._channel.cancelled or not self._step(here)
                taken += 1
        except ProtocolError as error:
            over = self._fail(UpstreamError(f"the provider's stream is malformed: {error.reason}"), here)
        except Exception as exc:  # noqa: BLE001 - a read error (already ours) or a decoder bug
            over = self._fail(exc if isinstance(exc, MLStreamError) else self._call.failure(exc), here)
        if over:
            self.close()
        return not over

    @property
    def relayed(self) -> bool:
        """Whether an item after Started was put on the channel (or kept to put)."""
        return not self._first or bool(self._pending)

    def close(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            self._release()
        finally:
            if self._pool is not None:
                self._pool.end()

    def _release(self) -> None:
        self._channel.detach_upstream()
        reusable = self._completed and not self._channel.cancelled
        if self._body is not None:
            if self._watcher is not None:
                self._watcher.forget(self._body.fileno())
            self._body.restore()
            reusable = reusable and self._body.done
        elif reusable and self._bulk_read is not None:
            # What follows [DONE] (the last chunk, often in a later packet) is read by the
            # reader that knows where the chunk framing stands; http.client's own state
            # stopped where the worker took over, so its drain must find the body ended.
            try:
                while self._bulk_read(READ_SIZE):
                    pass
            except MLStreamError:
                reusable = False
        self._call.finish(self._response, reusable=reusable)

    def _begin(self) -> bool:
        channel, response = self._channel, self._response
        if not channel.attach_upstream(response):
            return False
        if response.status >= 300:
            _put(channel, Failure(self._call.error(response)), self._stall)
            return False
        if not _put(channel, Started(response.status), self._stall):
            return False
        self._read = self._call.body_reader(response)
        return True

    def _step(self, here: bool) -> bool:
        """One read, decoded and put; False when the stream is over. ``here`` (on the
        writer's thread): put without waiting, and keep what does not fit for later."""
        if self._pending:
            items, data = self._pending, self._pending_data
            self._pending = []
        else:
            if here:
                data = self._read(READ_SIZE)
            else:
                if self._bulk_read is None:
                    self._bulk_read = self._call.bulk_body_reader(self._response)
                data = self._bulk_read(READ_SIZE)
            items = self._decoder.feed(data) if data else self._decoder.finish()
        if not here:
            return self._put_all(items, data)
        for index, item in enumerate(items):
            if isinstance(item, Failure):  # the provider's words, inside a 2xx stream
                self._call.redacted(item.error)
            if not self._channel.put(item, 0):
                if self._channel.cancelled:
                    return False
                self._pending, self._pending_data = items[index:], data
                return True
            self._first = False
            if isinstance(item, (Done, Failure)):
                self._completed = isinstance(item, Done)
                return False
        return bool(data)

    def _put_all(self, items: list[Any], data: bytes) -> bool:
        """On the worker: the stream's first item handed over alone, every other item
        of the read in one ``put_many`` (one wake-up of the writer). False when the
        stream is over."""
        end = len(items)
        terminal = None
        for index, item in enumerate(items):
            if isinstance(item, (Done, Failure)):
                if isinstance(item, Failure):  # the provider's words, inside a 2xx stream
                    self._call.redacted(item.error)
                terminal, end = item, index + 1
                break
        start = 0
        if self._first and end:
            if not _put(self._channel, items[0], self._stall, hand_over=True):
                return False
            self._first = False
            start = 1
        if start < end and not _put_many(self._channel, items[start:end] if start or end < len(items) else items,
                                         self._stall):
            return False
        if terminal is not None:
            self._completed = isinstance(terminal, Done)
            return False
        return bool(data)

    def _fail(self, error: MLStreamError, here: bool) -> bool:
        """Put the stream's final Failure; False if it must wait for the worker (``here``,
        and no room: the writer's thread never waits on its own channel)."""
        channel = self._channel
        if channel.cancelled:
            return True
        error = self._call.redacted(error)
        if not here:
            _put(channel, Failure(error), self._stall)
            return True
        if channel.put(Failure(error), 0) or channel.cancelled:
            return True
        self._pending, self._pending_data = [Failure(error)], b""
        return False


    # --- slices: on a pool worker, never waiting ----------------------------------------

    def _slice(self) -> None:
        """One slice: put what is pending, read and decode what has arrived, up to
        SLICE_READS reads; then wait on the watcher (nothing more has arrived), on the
        channel (no room), or at the back of the pool's queue (the budget is spent)."""
        channel, body = self._channel, self._body
        assert body is not None
        try:
            if self._timed_out:
                self._timed_out = False
                raise self._call.failure(TimeoutError("no bytes within the read timeout"))
            for _ in range(SLICE_READS):
                if channel.cancelled:
                    self.close()
                    return
                if self._pending:
                    if not self._put_pending():
                        return  # waiting for room: the channel or the stall timer resumes it
                    if self._terminal:
                        self._finish_body()
                        return
                    continue
                data = body.read()
                if data is None:  # nothing more has arrived
                    self._watch()
                    return
                if self._terminal:  # Done relayed: what follows is the body's end
                    if body.done:
                        self.close()
                        return
                    continue
                if not data and not body.done:  # only the chunk framing arrived
                    continue
                self._take(self._decoder.feed(data) if data else self._decoder.finish())
                if not data and not self._terminal:  # the body ended and the decoder's finish
                    self._terminal = True            # with it: what it gave goes, then it is over
                    if not self._pending:
                        self.close()
                        return
        except ProtocolError as error:
            self._fail_later(UpstreamError(f"the provider's stream is malformed: {error.reason}"))
            return
        except Exception as exc:  # noqa: BLE001 - a read error (already ours) or a decoder bug
            self._fail_later(exc if isinstance(exc, MLStreamError) else self._call.failure(exc))
            return
        self._again()

    def _take(self, items: list[Any]) -> None:
        """A read's items become pending, up to and with the stream's terminal item."""
        for index, item in enumerate(items):
            if isinstance(item, (Done, Failure)):
                if isinstance(item, Failure):  # the provider's words, inside a 2xx stream
                    self._call.redacted(item.error)
                self._completed = isinstance(item, Done)
                self._terminal = True
                items = items[:index + 1]
                break
        if items:
            self._pending = items
            self._first = False

    def _put_pending(self) -> bool:
        """Put the pending items that have room; True if all went. Else the stream waits
        for a credit (armed before asking, so the timer cannot miss a credit given back)."""
        pending = self._pending
        taken = self._channel.put_now(pending)
        if taken == len(pending):
            self._pending = []
            return True
        self._pending = pending[taken:]
        if self._channel.cancelled:
            self.close()
            return False
        watcher = self._watcher
        assert watcher is not None
        watcher.arm(self, None, self._stall, self._stalled)
        if self._channel.when_credit(self._credit_back):
            return False
        if watcher.disarm(self):  # room came back meanwhile: go on in this slice
            return self._put_pending()
        return False  # the timer fired meanwhile: its slice goes on

    def _finish_body(self) -> None:
        """The terminal item is put: read the body's end (the last chunk often comes in
        a later packet) so the connection can be reused, else close at once."""
        body = self._body
        if body is not None and self._completed and not body.done:
            self._again()
            return
        self.close()

    def _fail_later(self, error: MLStreamError) -> None:
        """The stream's final Failure, put as room allows (the reading is over)."""
        if self._channel.cancelled or self._terminal:
            self._completed = False
            self.close()
            return
        self._completed = False
        self._terminal = True
        self._pending = [Failure(self._call.redacted(error))]
        if self._put_pending():
            self.close()

    def _watch(self) -> None:
        body = self._body
        assert body is not None and self._watcher is not None
        self._watcher.arm(self, body.fileno(), body.timeout, self._readable, write=body.wants_write)

    def _again(self) -> None:
        assert self._pool is not None
        self._pool.run(self._slice, self._dropped)

    def _readable(self, ready: bool) -> None:
        """The watcher: bytes arrived (``ready``), or the read timeout passed."""
        if not ready:
            self._timed_out = True
        self._again()

    def _credit_back(self) -> None:
        """The channel: the writer took an item (or the stream was cancelled)."""
        if self._watcher is not None and self._watcher.disarm(self):
            self._again()

    def _stalled(self, _: bool) -> None:
        """The watcher: no room came back within the stall timeout."""
        if self._channel.forget_credit_waiter():
            log.info("client stopped reading for %.0f s; cancelling the stream", self._stall)
            self._channel.cancel()
        self._again()

    def _dropped(self) -> None:
        """The pool shut down before this stream's next slice ran."""
        self._channel.cancel(ShuttingDown("the server is shutting down"))
        self.close()


def _put_many(channel: Channel, items: list[Any], stall_timeout: float) -> bool:
    """``put_many``; on a stall cancel the channel (as ``_put``)."""
    if channel.put_many(items, stall_timeout):
        return True
    if not channel.cancelled:
        log.info("client stopped reading for %.0f s; cancelling the stream", stall_timeout)
        channel.cancel()
    return False


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
