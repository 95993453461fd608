"""The hang-up watcher on its own: socket pairs in this process, no server, no network.

Absence ("this channel was NOT cancelled") is checked against a sentinel: a second
watched socket is hung up after the event under test, and once the sentinel's
channel is cancelled the watcher has finished a poll round that would have seen
the first one too (epoll is level-triggered). No sleeps.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Iterator

import pytest

from mlstream.server.hangups import ClientGone, HangupWatcher
from mlstream.streaming.channel import Channel
from mlstream.providers.events import Failure

from ..support.timeouts import HANG_GUARD

SOCKET_TIMEOUT = 30.0  # what a handler's socket carries: any blocking read on it would stall this long

pytestmark = pytest.mark.skipif(not hasattr(select, "epoll"), reason="the watcher needs epoll (Linux)")


class GatedPoller:
    """A real epoll that can be held after ``poll()`` returns, before its events are used:
    the window in which a socket can be unwatched, closed or watched again."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self.hold = threading.Event()       # set: the next poll that reports a watched fd stops
        self.held = threading.Event()       # set by the watcher thread when it stopped
        self.release = threading.Event()
        self.fds: set[int] = set()

    def register(self, fd: int, eventmask: int) -> None:
        self.fds.add(fd)
        self._epoll.register(fd, eventmask)

    def unregister(self, fd: int) -> None:
        self._epoll.unregister(fd)

    def poll(self, timeout: float = -1) -> list[tuple[int, int]]:
        events = self._epoll.poll(timeout)
        if self.hold.is_set() and events:
            self.hold.clear()
            self.held.set()
            assert self.release.wait(HANG_GUARD)
        return events

    def close(self) -> None:
        self._epoll.close()


@pytest.fixture
def watcher() -> Iterator[HangupWatcher]:
    w = HangupWatcher()
    yield w
    w.close()


def pair() -> tuple[socket.socket, socket.socket]:
    server_side, client_side = socket.socketpair()
    server_side.settimeout(SOCKET_TIMEOUT)
    return server_side, client_side


def sentinel_round(watcher: HangupWatcher) -> None:
    """Return once the watcher has completed a poll round started after this call."""
    server_side, client_side = pair()
    channel = Channel(4)
    watcher.watch(server_side, channel)
    client_side.close()
    assert channel.wait_cancelled(HANG_GUARD), "the watcher never noticed the sentinel's hang-up"
    server_side.close()


def test_a_client_that_closes_cancels_its_stream_with_client_gone(watcher: HangupWatcher) -> None:
    server_side, client_side = pair()
    channel = Channel(4)
    watcher.watch(server_side, channel)
    client_side.close()
    assert channel.wait_cancelled(HANG_GUARD)
    item = channel.get(0)
    assert isinstance(item, Failure) and isinstance(item.error, ClientGone)
    assert watcher.watching == 0
    server_side.close()


def test_a_client_that_shuts_its_sending_side_counts_as_gone(watcher: HangupWatcher) -> None:
    server_side, client_side = pair()
    channel = Channel(4)
    watcher.watch(server_side, channel)
    client_side.shutdown(socket.SHUT_WR)
    assert channel.wait_cancelled(HANG_GUARD)
    server_side.close()
    client_side.close()


def test_a_pipelined_request_is_not_a_hang_up_and_is_never_read(watcher: HangupWatcher) -> None:
    server_side, client_side = pair()
    channel = Channel(4)
    watcher.watch(server_side, channel)
    client_side.sendall(b"POST /next HTTP/1.1\r\n\r\n")
    sentinel_round(watcher)
    assert not channel.cancelled
    assert watcher.watching == 1  # still watched: a hang-up after the pipelined bytes still counts
    server_side.setblocking(False)
    assert server_side.recv(100) == b"POST /next HTTP/1.1\r\n\r\n"  # nothing was consumed
    watcher.unwatch(server_side)
    server_side.close()
    client_side.close()


def test_an_unwatched_socket_is_left_alone(watcher: HangupWatcher) -> None:
    server_side, client_side = pair()
    channel = Channel(4)
    watcher.watch(server_side, channel)
    watcher.unwatch(server_side)
    watcher.unwatch(server_side)  # safe twice
    client_side.close()
    sentinel_round(watcher)
    assert not channel.cancelled
    server_side.close()


def _pair_reusing(fd: int) -> tuple[socket.socket, socket.socket]:
    """A connected pair whose first socket has descriptor ``fd``, just freed. The kernel
    hands out the lowest free number, so lower ones freed meanwhile (a socket another test
    left to the garbage collector) are taken by pairs held open until ``fd`` comes round."""
    held: list[socket.socket] = []
    try:
        for _ in range(64):
            first, second = pair()
            if second.fileno() == fd:
                first, second = second, first
            if first.fileno() == fd:
                return first, second
            held += [first, second]
        raise AssertionError(f"descriptor {fd} was not handed out again")
    finally:
        for sock in held:
            sock.close()


def test_a_stale_event_for_a_reused_descriptor_does_not_cancel_the_new_stream() -> None:
    poller = GatedPoller()
    watcher = HangupWatcher(poller)
    try:
        old_server, old_client = pair()
        fd = old_server.fileno()
        old_channel = Channel(4)
        watcher.watch(old_server, old_channel)
        poller.hold.set()
        old_client.close()
        assert poller.held.wait(HANG_GUARD)  # the poll reported fd as hung up; not acted on yet
        # Meanwhile its handler finished: unwatch, close; a new connection gets the same number.
        watcher.unwatch(old_server)
        old_server.close()
        new_server, new_client = _pair_reusing(fd)
        new_channel = Channel(4)
        watcher.watch(new_server, new_channel)
        poller.release.set()
        sentinel_round(watcher)
        assert not new_channel.cancelled
        assert not old_channel.cancelled  # unwatched before the watcher acted
        new_client.close()  # a real hang-up of the new connection is still seen
        assert new_channel.wait_cancelled(HANG_GUARD)
        new_server.close()
    finally:
        poller.release.set()
        watcher.close()


def test_watch_and_unwatch_never_wait_for_the_watcher_thread() -> None:
    """The freeze: the watcher thread used to peek at a socket with a blocking call while
    holding the lock every stream takes to watch and unwatch. Here the watcher is stopped
    mid-round, with an event in hand, and every stream must still come and go."""
    poller = GatedPoller()
    watcher = HangupWatcher(poller)
    try:
        server_side, client_side = pair()
        channel = Channel(4)
        watcher.watch(server_side, channel)
        poller.hold.set()
        client_side.shutdown(socket.SHUT_WR)
        assert poller.held.wait(HANG_GUARD)
        # The same socket, unwatched and watched again while the event is in flight
        # (a keep-alive client's next stream), and a crowd of other streams coming and going.
        done = threading.Event()

        def churn() -> None:
            watcher.unwatch(server_side)
            watcher.watch(server_side, Channel(4))
            for _ in range(200):
                s, c = pair()
                watcher.watch(s, Channel(4))
                watcher.unwatch(s)
                s.close()
                c.close()
            done.set()

        threading.Thread(target=churn, daemon=True).start()
        assert done.wait(HANG_GUARD), "watch/unwatch waited on the stopped watcher thread"
        poller.release.set()
        assert not channel.cancelled  # its watch was replaced before the watcher acted
        watcher.unwatch(server_side)
        server_side.close()
        client_side.close()
    finally:
        poller.release.set()
        watcher.close()


def test_many_streams_coming_and_going_lose_no_hang_up_and_invent_none(watcher: HangupWatcher) -> None:
    """Bounded stress: threads run keep-alive connections (watch, client pipelines the
    next request, unwatch, read it, watch again), and some clients hang up mid-stream.
    Every hang-up is noticed; no connection that stayed is ever cancelled."""
    threads, rounds = 8, 60
    wrongly_cancelled: list[int] = []
    missed: list[int] = []
    errors: list[BaseException] = []

    def connection(index: int) -> None:
        try:
            server_side, client_side = pair()
            for turn in range(rounds):
                channel = Channel(4)
                watcher.watch(server_side, channel)
                if index % 4 == 0 and turn == rounds - 1:
                    client_side.close()
                    if not channel.wait_cancelled(HANG_GUARD):
                        missed.append(index)
                    break
                client_side.sendall(b"next request")
                watcher.unwatch(server_side)
                if channel.cancelled:
                    wrongly_cancelled.append(index)
                assert server_side.recv(64) == b"next request"
            watcher.unwatch(server_side)
            server_side.close()
            client_side.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=connection, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_GUARD * 2)
        assert not worker.is_alive()
    assert not errors and not missed and not wrongly_cancelled
    assert watcher.watching == 0


def test_close_ends_the_thread_and_later_watches_are_ignored() -> None:
    watcher = HangupWatcher()
    thread = watcher._thread
    assert thread is not None
    watcher.close()
    watcher.close()  # safe twice
    thread.join(HANG_GUARD)
    assert not thread.is_alive()
    server_side, client_side = pair()
    watcher.watch(server_side, Channel(4))
    assert watcher.watching == 0
    server_side.close()
    client_side.close()
