"""StreamPool: admission, FIFO start, the active/queued counts, shutdown. No sockets.

Jobs block on Events the test releases, so counts are checked at known points;
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
    """Pools whose blocked jobs are released and whose workers are shut down afterwards."""
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
        pool.wait_until(lambda p: p.active == 0, HANG_GUARD)
        pool.shutdown()


def counts(pool: StreamPool) -> tuple[int, int]:
    """(active, queued), read under the pool's lock."""
    seen: list[tuple[int, int]] = []
    pool.wait_until(lambda p: seen.append((p.active, p.queued)) or True, 0)
    return seen[0]


def blocked_job(gate: threading.Event, started: list | None = None, name: object = None):
    def job():
        if started is not None:
            started.append(name)
        assert gate.wait(HANG_GUARD)
    return job


def test_admits_workers_plus_backlog_then_refuses_at_once(make_pool):
    pool, gate = make_pool(workers=2, backlog=3)
    for _ in range(5):
        pool.submit(blocked_job(gate))
    assert pool.wait_until(lambda p: p.active == 2 and p.queued == 3, HANG_GUARD)
    with pytest.raises(Overloaded) as refused:
        pool.submit(blocked_job(gate))
    assert refused.value.http_status == 429
    assert refused.value.headers["Retry-After"] == "1"
    assert pool.rejected == 1
    assert counts(pool) == (2, 3)  # the refused job left no trace
    gate.set()
    assert pool.wait_idle(HANG_GUARD)
    assert counts(pool) == (0, 0)


def test_a_freed_slot_admits_again(make_pool):
    pool, gate = make_pool(workers=1, backlog=0)
    first_done = threading.Event()

    def first():
        first_done.wait(HANG_GUARD)

    pool.submit(first)
    with pytest.raises(Overloaded):
        pool.submit(blocked_job(gate))
    first_done.set()
    assert pool.wait_idle(HANG_GUARD)
    pool.submit(blocked_job(gate))  # admitted now
    assert pool.rejected == 1


def test_queued_jobs_start_in_arrival_order(make_pool):
    pool, gate = make_pool(workers=1, backlog=30)
    started: list[object] = []
    pool.submit(blocked_job(gate, started, "blocker"))
    assert pool.wait_until(lambda p: p.active == 1, HANG_GUARD)
    for n in range(30):
        pool.submit(lambda n=n: started.append(n))
    assert counts(pool) == (1, 30)
    gate.set()
    assert pool.wait_idle(HANG_GUARD)
    assert started == ["blocker", *range(30)]


def test_a_running_job_is_counted_active_not_queued(make_pool):
    pool, _ = make_pool(workers=2, backlog=2)
    gates = [threading.Event() for _ in range(4)]
    seen_by_job: list[tuple[int, int]] = []
    try:
        for gate in gates:
            def job(gate=gate):
                seen_by_job.append(counts(pool))
                assert gate.wait(HANG_GUARD)
            pool.submit(job)
        assert pool.wait_until(lambda p: (p.active, p.queued) == (2, 2), HANG_GUARD)
        # Each job that finishes lets exactly one queued job become active.
        gates[0].set()
        assert pool.wait_until(lambda p: (p.active, p.queued) == (2, 1), HANG_GUARD)
        gates[1].set()
        assert pool.wait_until(lambda p: (p.active, p.queued) == (2, 0), HANG_GUARD)
        gates[2].set()
        assert pool.wait_until(lambda p: (p.active, p.queued) == (1, 0), HANG_GUARD)
    finally:
        for gate in gates:
            gate.set()
    assert pool.wait_idle(HANG_GUARD)
    # A running job always sees itself among the active ones and never among the queued.
    assert len(seen_by_job) == 4
    for active, queued in seen_by_job:
        assert 1 <= active <= 2 and active + queued <= 4


def run_with_monitor(pool: StreamPool, caller, callers: int = 4) -> list[tuple[int, int]]:
    """Bounded stress: ``callers`` threads run ``caller(index)`` while a monitor reads the
    counts; returns the snapshots once every caller is done and the pool is idle."""
    snapshots: list[tuple[int, int]] = []
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            snapshots.append(counts(pool))

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
        assert not thread.is_alive()
    assert pool.wait_idle(HANG_GUARD)
    stop.set()
    watcher.join(HANG_GUARD)
    assert not watcher.is_alive() and snapshots
    return snapshots


def test_counts_stay_within_bounds_under_churn(make_pool):
    """Bounded stress: several submitters, short jobs, a monitor reading the counts."""
    workers, backlog = 3, 4
    pool, _ = make_pool(workers, backlog)
    ran = []  # list.append is atomic: one entry per job that ran
    admitted = [0] * 4

    def submitter(index: int) -> None:
        for _ in range(150):
            try:
                pool.submit(lambda: ran.append(1))
                admitted[index] += 1
            except Overloaded:
                pass

    snapshots = run_with_monitor(pool, submitter)
    for active, queued in snapshots:
        # waiting jobs are kept by the pool itself, so each count is bounded, not only the sum
        assert 0 <= active <= workers and 0 <= queued <= backlog and active + queued <= workers + backlog
    assert len(ran) == sum(admitted)
    assert sum(admitted) + pool.rejected == 4 * 150
    assert counts(pool) == (0, 0)


def test_wait_idle_and_wait_until_time_out_with_false(make_pool):
    pool, gate = make_pool(workers=1, backlog=1)
    pool.submit(blocked_job(gate))
    assert pool.wait_idle(0.02) is False
    assert pool.wait_until(lambda p: p.active == 5, 0.02) is False
    assert pool.wait_until(lambda p: p.active == 1, HANG_GUARD) is True
    gate.set()
    assert pool.wait_idle(HANG_GUARD) is True


def test_wait_idle_wakes_as_soon_as_the_last_job_ends(make_pool):
    pool, gate = make_pool(workers=1, backlog=1)
    pool.submit(blocked_job(gate))
    waiter_result: list[bool] = []
    woke = threading.Event()

    def waiter():
        waiter_result.append(pool.wait_idle(HANG_GUARD))
        woke.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert not woke.wait(0.02)
    gate.set()
    # well before its own timeout: the finishing job must notify the waiter
    assert woke.wait(HANG_GUARD / 2), "wait_idle only noticed at its timeout"
    assert waiter_result == [True]


def test_wait_idle_on_an_unused_pool_is_true_at_once(make_pool):
    pool, _ = make_pool(workers=1, backlog=1)
    assert pool.wait_idle(0) is True


def test_a_failing_job_does_not_kill_its_worker(make_pool, caplog):
    pool, _ = make_pool(workers=1, backlog=5)
    ran: list[str] = []

    def broken():
        ran.append("broken")
        raise RuntimeError("a bug in a reader")

    with caplog.at_level(logging.ERROR, logger="mlstream.streaming.pool"):
        pool.submit(broken)
        pool.submit(lambda: ran.append("next"))
        assert pool.wait_idle(HANG_GUARD)
    assert ran == ["broken", "next"]  # the single worker lived on
    assert counts(pool) == (0, 0)
    assert any("stream reader failed" in record.getMessage() for record in caplog.records)


def test_submit_after_shutdown_is_refused_without_a_trace(make_pool):
    pool, _ = make_pool(workers=2, backlog=2)
    pool.shutdown()
    with pytest.raises(Overloaded, match="shutting down"):
        pool.submit(lambda: None)
    assert counts(pool) == (0, 0)
    assert pool.wait_idle(0)


def test_shutdown_lets_the_running_job_finish(make_pool):
    pool, gate = make_pool(workers=1, backlog=0)
    finished = threading.Event()

    def job():
        gate.wait(HANG_GUARD)
        finished.set()

    pool.submit(job)
    assert pool.wait_until(lambda p: p.active == 1, HANG_GUARD)
    pool.shutdown()
    gate.set()
    assert finished.wait(HANG_GUARD)
    assert pool.wait_idle(HANG_GUARD)


def test_shutdown_with_queued_jobs_leaves_the_counts_consistent(make_pool):
    pool, gate = make_pool(workers=1, backlog=2)
    ran: list[int] = []
    pool.submit(blocked_job(gate))
    pool.submit(lambda: ran.append(1))
    pool.submit(lambda: ran.append(2))
    assert pool.wait_until(lambda p: (p.active, p.queued) == (1, 2), HANG_GUARD)
    pool.shutdown()  # the two queued jobs are dropped by the executor
    gate.set()
    assert pool.wait_until(lambda p: p.active == 0, HANG_GUARD)
    assert pool.wait_idle(0.2), f"(active, queued) stuck at {counts(pool)} with nothing left to run"


# --- leases: a job opened on the caller's thread, its rest handed over ------------------


def test_a_lease_is_taken_only_while_a_worker_is_free_and_none_waits(make_pool):
    pool, gate = make_pool(2, 2)
    assert pool.lease()                          # one running on the caller's thread
    assert counts(pool) == (1, 0)
    pool.submit(blocked_job(gate))               # the second worker
    assert pool.wait_until(lambda p: p.active == 2, HANG_GUARD)
    assert not pool.lease()                      # no worker free: the caller must submit (FIFO)
    pool.submit(blocked_job(gate))
    assert counts(pool) == (2, 1)
    pool.end_lease()
    gate.set()
    assert pool.wait_idle(HANG_GUARD)


def test_a_handed_over_job_stays_counted_until_it_ends(make_pool):
    pool, gate = make_pool(1, 0)
    assert pool.lease()
    ran = threading.Event()

    def rest():
        ran.set()
        gate.wait(HANG_GUARD)

    pool.hand_over(rest)
    assert ran.wait(HANG_GUARD) and counts(pool) == (1, 0)
    with pytest.raises(Overloaded):              # its slot is still taken
        pool.submit(blocked_job(gate))
    gate.set()
    assert pool.wait_idle(HANG_GUARD)


def test_a_hand_over_after_shutdown_ends_the_lease(make_pool):
    pool, _ = make_pool(1, 0)
    assert pool.lease()
    pool.shutdown()
    with pytest.raises(Overloaded):
        pool.hand_over(lambda: None)
    assert counts(pool) == (0, 0)


def test_leases_and_submits_under_churn_keep_every_bound():
    """Bounded stress: callers that lease (open here, hand the rest over) or submit, a
    monitor reading the counts. Never more running than workers, never more jobs on the
    executor than it has threads (each job records how many run at that moment), every
    admitted job runs exactly once."""
    workers, backlog = 3, 4
    pool = StreamPool(workers, backlog)
    ran: list[int] = []
    running = [0]
    peak = [0]
    lock = threading.Lock()
    admitted = [0] * 4

    def job(number: int):
        def run():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            ran.append(number)
            with lock:
                running[0] -= 1
        return run

    def caller(index: int) -> None:
        for turn in range(150):
            number = index * 1000 + turn
            try:
                if turn % 2 and pool.lease():
                    pool.hand_over(job(number))
                else:
                    pool.submit(job(number))
                admitted[index] += 1
            except Overloaded:
                pass

    snapshots = run_with_monitor(pool, caller)
    pool.shutdown()
    assert all(0 <= active <= workers and 0 <= queued <= backlog for active, queued in snapshots)
    assert peak[0] <= workers
    assert sorted(ran) == sorted(set(ran)) and len(ran) == sum(admitted)
    assert counts(pool) == (0, 0)
