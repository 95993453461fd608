"""Deadlines: an armed socket is shut down when its time is up, a disarmed one never.

A ``socket.socketpair()`` shows the real effect (a blocked recv returns); stub
sockets record shutdown() calls and signal them through an Event, so nothing
here sleeps to wait for a deadline thread.
"""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest

from mlstream.server.deadlines import Deadlines

from ..support.timeouts import HANG_GUARD


class StubSocket:
    def __init__(self, name: object = None) -> None:
        self.name = name
        self.shutdowns: list[int] = []
        self.fired = threading.Event()

    def shutdown(self, how: int) -> None:
        self.shutdowns.append(how)
        self.fired.set()


@pytest.fixture
def deadlines():
    before = set(threading.enumerate())
    enforcer = Deadlines()
    yield enforcer
    enforcer.close()
    for thread in set(threading.enumerate()) - before:
        if thread.name == "mlstream-deadlines":
            thread.join(HANG_GUARD)


def test_an_expired_deadline_unblocks_a_read_on_the_socket(deadlines):
    server_side, client_side = socket.socketpair()
    with server_side, client_side:
        server_side.settimeout(HANG_GUARD)  # the hang guard; the deadline must act long before
        deadlines.arm(server_side, 0.05)
        started = time.monotonic()
        assert server_side.recv(1) == b""  # a slowloris client sent nothing: the read ends
        assert time.monotonic() - started < HANG_GUARD / 2


def test_an_expired_deadline_shuts_both_directions(deadlines):
    sock = StubSocket()
    deadlines.arm(sock, 0)
    assert sock.fired.wait(HANG_GUARD)
    assert sock.shutdowns == [socket.SHUT_RDWR]


def test_a_disarmed_deadline_never_fires(deadlines):
    disarmed, sentinel = StubSocket("disarmed"), StubSocket("sentinel")
    deadlines.disarm(deadlines.arm(disarmed, 0.2))  # room for a descheduled test thread
    deadlines.arm(sentinel, 0.25)  # later than the disarmed one: once it fired, that one was due
    assert sentinel.fired.wait(HANG_GUARD)
    assert disarmed.shutdowns == []


def test_a_new_earlier_deadline_is_not_stuck_behind_a_later_one(deadlines):
    late, early = StubSocket("late"), StubSocket("early")
    deadlines.arm(late, HANG_GUARD * 2)
    deadlines.arm(early, 0.02)  # the thread is waiting for the late one: it must wake up
    assert early.fired.wait(HANG_GUARD / 2), "the earlier deadline waited for the later one"
    assert late.shutdowns == []


def test_deadlines_fire_in_time_order(deadlines):
    fired: list[int] = []
    last = StubSocket()
    socks = []
    for n in (3, 0, 2, 1):
        sock = StubSocket(n)
        sock.shutdown = lambda how, n=n: fired.append(n)  # type: ignore[method-assign]
        socks.append(sock)
        deadlines.arm(sock, 0.05 * n)  # steps wide enough that arming order cannot matter
    deadlines.arm(last, 0.2)
    assert last.fired.wait(HANG_GUARD)
    assert fired == [0, 1, 2, 3]


def test_a_shutdown_error_does_not_stop_the_thread(deadlines):
    class Gone(StubSocket):
        def shutdown(self, how):
            super().shutdown(how)
            raise OSError("not connected")

    gone, after = Gone(), StubSocket()
    deadlines.arm(gone, 0)
    assert gone.fired.wait(HANG_GUARD)
    deadlines.arm(after, 0)
    assert after.fired.wait(HANG_GUARD)


def test_arms_and_disarms_from_many_threads():
    """Bounded stress: whatever is disarmed before its deadline never fires; the rest fire once."""
    deadlines = Deadlines()
    try:
        records: list[tuple[StubSocket, bool]] = []  # (sock, disarmed before its deadline)
        latest = [0.0]
        lock = threading.Lock()

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            mine = []
            for n in range(200):
                sock, seconds = StubSocket((seed, n)), rng.uniform(0, 0.05)
                before = time.monotonic()
                token = deadlines.arm(sock, seconds)
                disarm = rng.random() < 0.5
                if disarm:
                    deadlines.disarm(token)
                # arm's deadline is at least before + seconds: a disarm done by then was in time
                in_time = disarm and time.monotonic() < before + seconds
                mine.append((sock, disarm, in_time))
                with lock:
                    latest[0] = max(latest[0], time.monotonic() + seconds)
            with lock:
                records.extend(mine)

        threads = [threading.Thread(target=worker, args=(seed,), daemon=True) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG_GUARD)
            assert not thread.is_alive()
        sentinel = StubSocket("sentinel")
        deadlines.arm(sentinel, max(0.0, latest[0] - time.monotonic()) + 0.01)
        assert sentinel.fired.wait(HANG_GUARD)  # every earlier deadline has been handled
        in_time = [sock for sock, disarm, ok in records if ok]
        kept = [sock for sock, disarm, _ in records if not disarm]
        assert len(records) == 800 and len(in_time) > 100  # the check is not vacuous
        assert [sock.name for sock in in_time if sock.shutdowns] == []
        assert [sock.name for sock in kept if sock.shutdowns != [socket.SHUT_RDWR]] == []
    finally:
        deadlines.close()


def test_close_ends_the_thread_and_nothing_fires_after():
    before = set(threading.enumerate())
    deadlines = Deadlines()
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name == "mlstream-deadlines"]
    pending = StubSocket()
    deadlines.arm(pending, 1.0)
    deadlines.close()
    thread.join(HANG_GUARD)
    assert not thread.is_alive()
    assert pending.shutdowns == []
    deadlines.close()  # twice is harmless


def test_close_ends_a_thread_waiting_with_nothing_armed():
    before = set(threading.enumerate())
    deadlines = Deadlines()
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name == "mlstream-deadlines"]
    deadlines.close()
    thread.join(HANG_GUARD)
    assert not thread.is_alive()


def test_disarming_after_the_deadline_fired_leaves_nothing_behind(deadlines):
    # White-box: the leak is only visible in the private set. The handler disarms in a
    # finally block, so every request head that timed out is disarmed after firing.
    for _ in range(50):
        sock = StubSocket()
        token = deadlines.arm(sock, 0)
        assert sock.fired.wait(HANG_GUARD)
        deadlines.disarm(token)
    sentinel = StubSocket()
    deadlines.arm(sentinel, 0)
    assert sentinel.fired.wait(HANG_GUARD)
    assert len(deadlines._disarmed) == 0
