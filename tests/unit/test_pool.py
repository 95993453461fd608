"""StreamPool: admission by the backlog of waiting slices, FIFO slices, the counts,
shutdown. No sockets.

Slices block on Events the test releases, so counts are checked at known points;
the pool's own wait_until (under its lock) is how a test waits for a count.
"""

from __future__ import annotations

import logging
import threading

import pytest

from mlstream.errors import Overloaded
from mlstream.streaming.pool import StreamPool

from ..support.timeouts import HANG_GUARD


@pytest.fixture
def make_pool():
    """Pools whose blocked slices are released and whose workers are shut down afterwards."""
    pools: list[StreamPool] = []
    gates: list[threading.Event] = []

    def make(workers: int, backlog: int) -> tuple[StreamPool, threading.Event]:
        pool, gate = StreamPool(workers, backlog), threading.Event()
        pools.append(pool)
        gates.append(gate)
        return pool, gate

    yield make
    for gate in gates:
        gate.set()  # never leave a worker blocked: its thread is not a daemon
    for pool in pools:
        pool.wait_until(lambda p: p.queued + p.running == 0, HANG_GUARD)
        pool.shutdown()


def counts(pool: StreamPool) -> tuple[int, int, int]:
    """(active, queued, running), read under the pool's lock."""
    seen: list[tuple[int, int, int]] = []
    pool.wait_until(lambda p: seen.append((p.active, p.queued, p.running)) or True, 0)
    return seen[0]


def blocked_job(gate: threading.Event, started: list | None = None, name: object = None):
    def job():
        if started is not None:
            started.append(name)
        assert gate.wait(HANG_GUARD)
    return job


def test_live_streams_are_not_bounded_by_the_workers(make_pool):
    pool, _ = make_pool(workers=1, backlog=0)
    for _ in range(1000):  # waiting on the watcher, a live stream holds no worker
        pool.admit()
    assert counts(pool) == (1000, 0, 0)
    for _ in range(1000):
        pool.end()
    assert pool.wait_idle(0)


def test_more_than_the_backlog_waiting_refuses_new_streams_at_once(make_pool):
    pool, gate = make_pool(workers=1, backlog=2)
    pool.admit()
    pool.run(blocked_job(gate))
    assert pool.wait_until(lambda p: p.running == 1, HANG_GUARD)
    for _ in range(3):
        pool.admit()
        pool.run(blocked_job(gate))
    assert counts(pool) == (4, 3, 1)
    with pytest.raises(Overloaded, match="behind"):
        pool.admit()
    assert pool.rejected == 1
    gate.set()
    assert pool.wait_until(lambda p: p.queued + p.running == 0, HANG_GUARD)
    pool.admit()  # caught up: admitted again
    for _ in range(5):
        pool.end()
    assert pool.wait_idle(0)


def test_slices_run_in_arrival_order(make_pool):
    pool, gate = make_pool(workers=1, backlog=10)
    started: list[object] = []
    pool.run(blocked_job(gate, started, "blocker"))
    assert pool.wait_until(lambda p: p.running == 1, HANG_GUARD)
    for n in range(5):
        pool.run(lambda n=n: started.append(n))
    gate.set()
    assert pool.wait_idle(HANG_GUARD)
    assert started == ["blocker", 0, 1, 2, 3, 4]


def test_a_running_slice_is_counted_running_not_queued(make_pool):
    pool, gate = make_pool(workers=2, backlog=5)
    seen_by_job: list[tuple[int, int, int]] = []
    gates = [threading.Event() for _ in range(4)]

    def job_waiting_on(own: threading.Event):
        def job():
            seen_by_job.append(counts(pool))
            assert own.wait(HANG_GUARD)
        return job

    for own in gates:
        pool.run(job_waiting_on(own))
    assert pool.wait_until(lambda p: (p.queued, p.running) == (2, 2), HANG_GUARD)
    for own in gates:
        own.set()
    assert pool.wait_idle(HANG_GUARD)
    assert len(seen_by_job) == 4
    for _, queued, running in seen_by_job:  # a slice always sees itself running
        assert 1 <= running <= 2 and queued + running <= 4


def test_counts_stay_within_bounds_under_churn(make_pool):
    """Bounded stress: several threads admit streams and run their slices (each slice
    runs the next of its stream, as the reader does), a monitor reads the counts."""
    workers, backlog = 3, 4
    pool, _ = make_pool(workers, backlog)
    ran: list[int] = []  # list.append is atomic: one entry per slice that ran
    admitted = [0] * 4
    snapshots: list[tuple[int, int, int]] = []
    stop = threading.Event()

    def stream_slices(left: int) -> None:
        ran.append(1)
        if left:
            pool.run(lambda: stream_slices(left - 1))
        else:
            pool.end()

    def opener(index: int) -> None:
        for _ in range(150):
            try:
                pool.admit()
            except Overloaded:
                continue
            admitted[index] += 1
            pool.run(lambda: stream_slices(2))

    def monitor() -> None:
        while not stop.is_set():
            snapshots.append(counts(pool))

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    threads = [threading.Thread(target=opener, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
        assert not thread.is_alive()
    assert pool.wait_idle(HANG_GUARD)
    stop.set()
    watcher.join(HANG_GUARD)
    assert snapshots
    for active, queued, running in snapshots:
        assert active >= 0 and 0 <= running <= workers and queued >= 0
    assert len(ran) == 3 * sum(admitted)
    assert sum(admitted) + pool.rejected == 4 * 150
    assert counts(pool) == (0, 0, 0)


def test_wait_idle_and_wait_until_time_out_with_false(make_pool):
    pool, gate = make_pool(workers=1, backlog=1)
    pool.run(blocked_job(gate))
    assert pool.wait_idle(0.02) is False
    assert pool.wait_until(lambda p: p.running == 5, 0.02) is False
    assert pool.wait_until(lambda p: p.running == 1, HANG_GUARD) is True
    gate.set()
    assert pool.wait_idle(HANG_GUARD) is True


def test_wait_idle_wakes_as_soon_as_the_last_stream_ends(make_pool):
    pool, _ = make_pool(workers=1, backlog=1)
    pool.admit()
    waiter_result: list[bool] = []
    woke = threading.Event()

    def waiter():
        waiter_result.append(pool.wait_idle(HANG_GUARD))
        woke.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert not woke.wait(0.02)
    pool.end()
    # well before its own timeout: the end must notify the waiter
    assert woke.wait(HANG_GUARD / 2), "wait_idle only noticed at its timeout"
    assert waiter_result == [True]


def test_wait_idle_on_an_unused_pool_is_true_at_once(make_pool):
    pool, _ = make_pool(workers=1, backlog=1)
    assert pool.wait_idle(0) is True


def test_a_failing_slice_does_not_kill_its_worker(make_pool, caplog):
    pool, _ = make_pool(workers=1, backlog=5)
    ran: list[str] = []

    def broken():
        ran.append("broken")
        raise RuntimeError("a bug in a reader")

    with caplog.at_level(logging.ERROR, logger="mlstream.streaming.pool"):
        pool.run(broken)
        pool.run(lambda: ran.append("next"))
        assert pool.wait_idle(HANG_GUARD)
    assert ran == ["broken", "next"]  # the single worker lived on
    assert counts(pool) == (0, 0, 0)
    assert any("stream reader failed" in record.getMessage() for record in caplog.records)


def test_after_shutdown_streams_are_refused_and_slices_dropped(make_pool):
    pool, _ = make_pool(workers=2, backlog=2)
    pool.shutdown()
    with pytest.raises(Overloaded, match="shutting down"):
        pool.admit()
    dropped: list[int] = []
    pool.run(lambda: None, lambda: dropped.append(1))
    assert dropped == [1]
    assert counts(pool) == (0, 0, 0)


def test_shutdown_lets_the_running_slice_finish_and_drops_the_waiting(make_pool):
    pool, gate = make_pool(workers=1, backlog=2)
    finished = threading.Event()
    ran: list[int] = []
    dropped: list[int] = []

    def job():
        gate.wait(HANG_GUARD)
        finished.set()

    pool.run(job)
    assert pool.wait_until(lambda p: p.running == 1, HANG_GUARD)
    pool.run(lambda: ran.append(1), lambda: dropped.append(1))
    pool.run(lambda: ran.append(2), lambda: dropped.append(2))
    assert pool.wait_until(lambda p: p.queued == 2, HANG_GUARD)
    pool.shutdown()  # the two waiting slices are dropped by the executor
    gate.set()
    assert finished.wait(HANG_GUARD)
    assert pool.wait_idle(HANG_GUARD)
    assert ran == [] and sorted(dropped) == [1, 2]
