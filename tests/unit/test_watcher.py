"""The readiness loop: an arm fires once (ready or timed out), never twice, and never after
it was taken back; fds are forgotten before reuse; a stress loop races readiness, timers
and disarms. Socket pairs on this machine stand in for provider sockets (no network)."""

from __future__ import annotations

import socket
import threading

import pytest

from mlstream.streaming import watcher as watching
from mlstream.streaming.watcher import Watcher

from ..support.timeouts import HANG_GUARD

pytestmark = pytest.mark.skipif(not watching.available(), reason="epoll is Linux's")

# How long a test waits to see that something did NOT happen (an absence has no event).
QUIET = 0.05


@pytest.fixture
def watcher():
    loop = Watcher()
    yield loop
    loop.close()


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


class Fired:
    """Records each call of an arm's callback and signals it."""

    def __init__(self) -> None:
        self.values: list[bool] = []
        self.event = threading.Event()

    def __call__(self, ready: bool) -> None:
        self.values.append(ready)
        self.event.set()

    def wait(self) -> bool:
        fired = self.event.wait(HANG_GUARD)
        self.event.clear()
        return fired


def test_a_readable_socket_fires_once_per_arm(watcher, pair):
    ours, theirs = pair
    fired = Fired()
    watcher.arm("s", ours.fileno(), HANG_GUARD, fired)
    assert not fired.event.wait(QUIET)  # nothing to read yet
    theirs.sendall(b"x")
    assert fired.wait() and fired.values == [True]
    theirs.sendall(b"y")  # more bytes, but the arm is spent
    assert not fired.event.wait(QUIET)
    watcher.arm("s", ours.fileno(), HANG_GUARD, fired)  # re-armed: bytes are there already
    assert fired.wait() and fired.values == [True, True]
    assert watcher.watched == 0


def test_a_socket_with_nothing_times_out(watcher, pair):
    ours, _ = pair
    fired = Fired()
    watcher.arm("s", ours.fileno(), 0.02, fired)
    assert fired.wait() and fired.values == [False]


def test_a_timer_alone_fires_false_and_a_disarmed_one_never(watcher):
    fired, taken_back = Fired(), Fired()
    watcher.arm("a", None, 0.01, fired)
    watcher.arm("b", None, 0.01, taken_back)
    assert watcher.disarm("b") is True
    assert fired.wait() and fired.values == [False]
    assert not taken_back.event.wait(QUIET) and taken_back.values == []
    assert watcher.disarm("a") is False  # fired already


def test_arming_a_key_again_replaces_its_arm(watcher, pair):
    ours, theirs = pair
    first, second = Fired(), Fired()
    watcher.arm("s", None, HANG_GUARD, first)
    watcher.arm("s", ours.fileno(), HANG_GUARD, second)
    theirs.sendall(b"x")
    assert second.wait() and second.values == [True]
    assert first.values == []


def test_a_forgotten_fd_number_can_be_reused_by_another_socket(watcher):
    old, old_peer = socket.socketpair()
    number = old.fileno()
    stale = Fired()
    watcher.arm("old", number, HANG_GUARD, stale)
    watcher.forget(number)
    old.close()
    old_peer.close()
    fresh, fresh_peer = socket.socketpair()
    try:
        fired = Fired()
        watcher.arm("new", fresh.fileno(), HANG_GUARD, fired)
        fresh_peer.sendall(b"x")
        assert fired.wait() and fired.values == [True]
        assert stale.values == []
    finally:
        fresh.close()
        fresh_peer.close()


def test_close_fires_what_still_waits_as_timed_out():
    loop = Watcher()
    fired = Fired()
    loop.arm("s", None, HANG_GUARD, fired)
    loop.close()
    assert fired.values == [False]
    late = Fired()
    loop.arm("t", None, HANG_GUARD, late)  # after close: at once, as timed out
    assert late.values == [False]


def test_a_failing_callback_does_not_stop_the_loop(watcher, caplog):
    def broken(_: bool) -> None:
        raise RuntimeError("a bug in a reader")

    watcher.arm("bad", None, 0.0, broken)
    fired = Fired()
    watcher.arm("good", None, 0.01, fired)
    assert fired.wait() and fired.values == [False]
    assert any("callback failed" in record.getMessage() for record in caplog.records)


def test_timers_left_by_arms_that_fired_do_not_pile_up(watcher, pair):
    ours, theirs = pair
    theirs.sendall(b"x")  # always readable: every arm fires by readiness, its timer stays behind
    for _ in range(5000):
        fired = Fired()
        watcher.arm("s", ours.fileno(), HANG_GUARD, fired)
        assert fired.wait()
    assert len(watcher._timers) <= 2 * watcher.watched + watching._HEAP_SLACK + 1


def test_stress_each_arm_fires_at_most_once_and_a_disarm_wins_or_loses_cleanly(watcher):
    """Bounded stress: timers due at once race disarms from another thread; each arm
    either fired once or was taken back, never both, never twice."""
    rounds = 2000
    calls = [0] * rounds
    disarmed = [False] * rounds
    done = threading.Semaphore(0)

    def callback(index: int):
        def fire(_: bool) -> None:
            calls[index] += 1
            done.release()
        return fire

    for index in range(rounds):
        watcher.arm(index, None, 0.0, callback(index))
        if index % 2 and watcher.disarm(index):
            disarmed[index] = True
            done.release()
    for _ in range(rounds):
        assert done.acquire(timeout=HANG_GUARD)
    for index in range(rounds):
        assert calls[index] == (0 if disarmed[index] else 1), index
