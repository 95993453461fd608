"""Channel: credits, cancel from either side, the upstream hand-off. No sockets.

Threads here are real; every wait has a generous hang guard (a join or an
Event wait with a timeout) and nothing sleeps to wait for something to happen.
"""

from __future__ import annotations

import threading
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mlstream.errors import MLStreamError, UpstreamError
from mlstream.streaming.channel import Channel
from mlstream.providers.events import Delta, Done, Failure, Started

from ..support.threads import run_in_thread
from ..support.timeouts import HANG_GUARD


class StubUpstream:
    """Stands in for the urllib3 response: records shutdown() calls."""

    def __init__(self, fail: bool = False) -> None:
        self.shutdowns = 0
        self.fail = fail

    def shutdown(self) -> None:
        self.shutdowns += 1
        if self.fail:
            raise OSError("the socket is already gone")


def join(thread: threading.Thread) -> None:
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "the thread is still blocked"


# --- credits and capacity -------------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 2, 5])
def test_put_succeeds_for_capacity_items_then_stalls(capacity):
    channel = Channel(capacity)
    for n in range(capacity):
        assert channel.put(Delta(n), timeout=0)
    # One more finds no credit: a stall, reported as False, and the channel is not cancelled.
    assert channel.put(Delta("one too many"), timeout=0.02) is False
    assert not channel.cancelled
    assert [channel.get_nowait() for _ in range(capacity)] == [Delta(n) for n in range(capacity)]


def test_get_returns_the_credit_so_the_reader_can_go_on():
    channel = Channel(1)
    for n in range(20):  # far more items than capacity, one credit recycled each time
        assert channel.put(Delta(n), timeout=0), f"no credit for item {n}"
        assert channel.get(0) == Delta(n)


def test_get_nowait_returns_the_credit_too():
    channel = Channel(1)
    for n in range(5):
        assert channel.put(Delta(n), timeout=0)
        assert channel.get_nowait() == Delta(n)


def test_get_times_out_with_none_when_nothing_comes():
    assert Channel(2).get(timeout=0.01) is None


def test_get_nowait_on_an_empty_channel_is_none():
    assert Channel(2).get_nowait() is None


def test_a_blocked_put_resumes_when_the_writer_takes_an_item():
    channel = Channel(1)
    assert channel.put(Delta("first"), timeout=0)
    thread, result, finished = run_in_thread(channel.put, Delta("second"), None)
    assert not finished.wait(0.05)  # really blocked on the credit
    assert channel.get(0) == Delta("first")
    join(thread)
    assert result == [True]
    assert channel.get(0) == Delta("second")


# --- cancel ---------------------------------------------------------------------------


def test_cancel_from_the_writer_wakes_a_reader_blocked_in_put():
    channel = Channel(1)
    assert channel.put(Delta(0), timeout=0)
    thread, result, finished = run_in_thread(channel.put, Delta(1), None)  # no timeout: only cancel frees it
    assert not finished.wait(0.02)
    channel.cancel(MLStreamError("client gone"))
    assert finished.wait(HANG_GUARD), "put stayed blocked after cancel"
    join(thread)
    assert result == [False]


def test_cancel_from_the_reader_wakes_a_writer_blocked_in_get():
    channel = Channel(4)
    error = UpstreamError("the provider went away")
    thread, result, finished = run_in_thread(channel.get, None)  # no timeout: only cancel frees it
    assert not finished.wait(0.02)
    channel.cancel(error)
    assert finished.wait(HANG_GUARD), "get stayed blocked after cancel"
    join(thread)
    assert result == [Failure(error)]
    assert result[0].error is error


def test_get_after_cancel_is_the_failure_at_once_even_with_items_queued():
    channel = Channel(4)
    error = MLStreamError("shutting down", status=503)
    assert channel.put(Started(), timeout=0)
    assert channel.put(Delta("lost"), timeout=0)
    channel.cancel(error)
    for _ in range(3):  # every later get, not just the first
        item = channel.get(timeout=None)
        assert isinstance(item, Failure) and item.error is error
    assert channel.get_nowait() is None


def test_cancel_without_an_error_still_yields_a_failure():
    channel = Channel(1)
    channel.cancel()
    item = channel.get(None)
    assert isinstance(item, Failure) and isinstance(item.error, MLStreamError)


def test_put_after_cancel_is_refused():
    channel = Channel(3)
    channel.cancel()
    assert channel.put(Delta("late"), timeout=None) is False
    assert channel.cancelled


def test_cancel_twice_is_safe_and_keeps_the_first_error():
    channel = Channel(1)
    first, second = MLStreamError("first"), MLStreamError("second")
    channel.cancel(first)
    channel.cancel(second)
    assert channel.get(None) == Failure(first)
    assert channel.put(Delta(0), timeout=0) is False


def test_wait_cancelled():
    channel = Channel(1)
    assert channel.wait_cancelled(0.01) is False
    thread, result, _ = run_in_thread(channel.wait_cancelled, HANG_GUARD)
    channel.cancel()
    join(thread)
    assert result == [True]


def test_get_nowait_swallowing_the_wake_token_does_not_hide_the_cancel():
    # The writer batches with get_nowait; if that takes the wake-up token, a later
    # blocking get must still see the cancel instead of waiting forever.
    channel = Channel(2)
    channel.cancel(MLStreamError("gone"))
    assert channel.get_nowait() is None
    thread, result, _ = run_in_thread(channel.get, None)
    join(thread)
    assert isinstance(result[0], Failure)


# --- the upstream hand-off ------------------------------------------------------------


def test_cancel_while_attached_shuts_the_upstream_down_once():
    channel = Channel(1)
    upstream = StubUpstream()
    assert channel.attach_upstream(upstream) is True
    assert upstream.shutdowns == 0
    channel.cancel()
    channel.cancel()
    assert upstream.shutdowns == 1


def test_attach_after_cancel_shuts_the_upstream_down_and_is_refused():
    channel = Channel(1)
    channel.cancel()
    upstream = StubUpstream()
    assert channel.attach_upstream(upstream) is False
    assert upstream.shutdowns == 1


def test_detached_upstream_is_left_alone_by_cancel():
    channel = Channel(1)
    upstream = StubUpstream()
    assert channel.attach_upstream(upstream)
    channel.detach_upstream()
    channel.cancel()
    assert upstream.shutdowns == 0


def test_a_failing_shutdown_does_not_break_cancel():
    channel = Channel(1)
    upstream = StubUpstream(fail=True)
    assert channel.attach_upstream(upstream)
    channel.cancel(MLStreamError("gone"))
    assert upstream.shutdowns == 1
    assert channel.cancelled and isinstance(channel.get(0), Failure)
    assert channel.attach_upstream(StubUpstream(fail=True)) is False  # refused, not raised


def test_cancel_racing_attach_shuts_the_upstream_down_exactly_once():
    # Whichever wins, the upstream must end up shut down, exactly once.
    for _ in range(200):
        channel = Channel(1)
        upstream = StubUpstream()
        race_cancel_with(channel, lambda: channel.attach_upstream(upstream))
        assert upstream.shutdowns == 1


def race_cancel_with(channel: Channel, action) -> None:
    """``action()`` on a thread released at the same moment as ``channel.cancel()`` here."""
    barrier = threading.Barrier(2)

    def body():
        barrier.wait(HANG_GUARD)
        action()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    barrier.wait(HANG_GUARD)
    channel.cancel()
    join(thread)


# --- properties -----------------------------------------------------------------------


class ChannelModel(RuleBasedStateMachine):
    """Single-threaded, non-blocking operations against a bounded FIFO model."""

    @initialize(capacity=st.integers(min_value=1, max_value=6))
    def start(self, capacity):
        self.channel = Channel(capacity)
        self.capacity = capacity
        self.model: deque = deque()
        self.next_value = 0
        self.error: MLStreamError | None = None
        self.cancelled = False

    @rule()
    def put(self):
        value = Delta(self.next_value)
        accepted = self.channel.put(value, timeout=0)
        if self.cancelled or len(self.model) == self.capacity:
            assert accepted is False
        else:
            assert accepted is True
            self.model.append(value)
            self.next_value += 1

    @rule()
    def get(self):
        item = self.channel.get(timeout=0)
        if self.cancelled:
            assert item == Failure(self.error)
        elif self.model:
            assert item == self.model.popleft()
        else:
            assert item is None

    @rule()
    def get_nowait(self):
        item = self.channel.get_nowait()
        if self.cancelled or not self.model:
            assert item is None
        else:
            assert item == self.model.popleft()

    @precondition(lambda self: not self.cancelled)
    @rule(reason=st.text(max_size=5))
    def cancel(self, reason):
        self.error = MLStreamError(reason)
        self.cancelled = True
        self.channel.cancel(self.error)

    @rule()
    def cancel_again(self):
        error = MLStreamError("second")
        self.channel.cancel(error)
        if not self.cancelled:  # the first cancel after all: its error is the one kept
            self.cancelled, self.error = True, error

    @invariant()
    def flag(self):
        assert self.channel.cancelled == self.cancelled


ChannelModel.TestCase.settings = settings(max_examples=150, deadline=None)
TestChannelModel = ChannelModel.TestCase


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 8), count=st.integers(0, 200), batch=st.booleans())
def test_every_item_arrives_exactly_once_and_in_order(capacity, count, batch):
    channel = Channel(capacity)
    sent = [Delta(n) for n in range(count)] + [Done("stop")]

    def produce():
        return all(channel.put(item, timeout=None) for item in sent)

    _drain_in_order(channel, sent, run_in_thread(produce), batch)


def _drain_in_order(channel: Channel, sent: list, started: tuple, batch: bool, capacity: int | None = None) -> None:
    """Take every item ``produce`` (started in ``started``) puts, as the writer does (one
    wait, then, batching, what else is there), and check they are ``sent`` exactly once
    and in order; the channel never holds more than ``capacity``."""
    producer, produced, _ = started
    received: list = []
    while len(received) < len(sent):
        if capacity is not None:
            assert channel.held <= capacity
        item = channel.get(timeout=HANG_GUARD)
        assert item is not None, "no item within the hang guard"
        received.append(item)
        while batch and len(received) < len(sent):  # the writer's batching path
            item = channel.get_nowait()
            if item is None:
                break
            received.append(item)
    join(producer)
    assert produced == [True]
    assert received == sent
    assert channel.get_nowait() is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 4), count=st.integers(1, 60),
       cancel_after=st.integers(0, 60), cancel_by_writer=st.booleans())
def test_cancel_at_any_point_frees_both_sides(capacity, count, cancel_after, cancel_by_writer):
    """Whoever cancels, whenever: both threads end, and what arrived is a prefix in order."""
    channel = Channel(capacity)
    error = MLStreamError("cancelled")
    sent = [Delta(n) for n in range(count)]

    def produce():
        for n, item in enumerate(sent):
            if not cancel_by_writer and n == cancel_after:
                channel.cancel(error)
            if not channel.put(item, timeout=None):
                return n
        return len(sent)

    def consume():
        received = []
        while True:
            if cancel_by_writer and len(received) == cancel_after:
                channel.cancel(error)
            # no timeout: a lost wake-up hangs here and the hang guard below reports it
            item = channel.get(timeout=None)
            if isinstance(item, Failure):
                return received, item
            received.append(item)
            if len(received) == len(sent):
                return received, None

    producer, produced, _ = run_in_thread(produce)
    consumer, consumed, _ = run_in_thread(consume)
    join(producer)
    if not consumed and not channel.cancelled:
        channel.cancel(error)  # nobody cancelled (cancel point past the end): release the consumer
    join(consumer)
    received, failure = consumed[0]
    assert received == sent[:len(received)]
    assert produced[0] >= len(received)
    if failure is not None:
        assert failure.error is error


def test_many_cancels_racing_a_blocked_put_and_get():
    """Bounded stress: cancel lands while each side may be blocked or just arriving."""
    for round_ in range(300):
        channel = Channel(1)
        assert channel.put(Delta("fills the only credit"), timeout=0)
        go = threading.Barrier(3)
        outcomes: dict[str, object] = {}

        def reader():
            go.wait(HANG_GUARD)
            outcomes["put"] = channel.put(Delta("blocked"), timeout=None)

        def writer():
            go.wait(HANG_GUARD)
            # drain until the failure: at most the two items, then the cancel
            while not isinstance(item := channel.get(timeout=None), Failure):
                pass
            outcomes["get"] = item

        threads = [threading.Thread(target=reader, daemon=True), threading.Thread(target=writer, daemon=True)]
        for thread in threads:
            thread.start()
        go.wait(HANG_GUARD)
        channel.cancel(MLStreamError(f"round {round_}"))
        for thread in threads:
            join(thread)
        assert isinstance(outcomes["get"], Failure)
        assert outcomes["get"].error.reason == f"round {round_}"
        assert outcomes["put"] in (True, False)


def test_hand_over_returns_once_the_writer_took_the_item():
    channel = Channel(4)
    returned = []
    # A wait far past the hang guard: only the writer taking the item can end it in time.
    reader = threading.Thread(target=lambda: returned.append(channel.hand_over(Delta("first"), HANG_GUARD, 60)),
                              daemon=True)
    reader.start()
    assert channel.get(HANG_GUARD) == Delta("first")
    reader.join(HANG_GUARD)
    assert not reader.is_alive() and returned == [True]


def test_hand_over_to_a_writer_that_is_not_reading_waits_only_its_bound():
    channel = Channel(4)
    assert channel.hand_over(Delta("first"), HANG_GUARD, 0.01)
    assert channel.get(0) == Delta("first")


def test_hand_over_on_a_cancelled_channel_is_false():
    channel = Channel(4)
    channel.cancel()
    assert not channel.hand_over(Delta("first"), HANG_GUARD, HANG_GUARD)


# --- the deferred reader start (defer_reader) -------------------------------------------


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.calls += 1


def test_a_deferred_start_waits_until_the_writer_finds_the_channel_empty():
    channel = Channel(4)
    start = Counter()
    channel.put(Started(200))
    channel.put(Delta("first"))
    channel.defer_reader(start)
    assert channel.get(0) == Started(200)
    assert start.calls == 0                     # items were there: no wait, no start
    assert channel.get(0) == Delta("first")
    assert start.calls == 0
    assert channel.get_nowait() is None and start.calls == 0  # get_nowait never waits: no start
    assert channel.get(0) is None               # the first wait on an empty channel starts it
    assert start.calls == 1
    channel.get(0)
    channel.cancel()
    assert start.calls == 1                     # once


def test_a_deferred_start_runs_at_cancel_when_the_writer_never_waited():
    channel = Channel(4)
    start = Counter()
    channel.defer_reader(start)
    channel.cancel()
    assert start.calls == 1
    channel.get(0)
    assert start.calls == 1


def test_a_start_deferred_on_a_cancelled_channel_runs_at_once():
    channel = Channel(4)
    channel.cancel()
    start = Counter()
    channel.defer_reader(start)
    assert start.calls == 1


def test_a_cancel_racing_the_writers_first_wait_starts_the_reader_exactly_once():
    for _ in range(300):
        channel = Channel(2)
        start = Counter()
        channel.defer_reader(start)
        race_cancel_with(channel, lambda: channel.get(0))
        assert start.calls == 1


# --- put_many: a read's items in one hand-over ------------------------------------------


def test_put_many_puts_what_fits_and_waits_for_the_rest():
    channel = Channel(3)
    items = [Delta(n) for n in range(7)] + [Done("stop")]
    producer, produced, finished = run_in_thread(channel.put_many, items, None)
    # three fit at once; the reader then waits for the writer
    assert not finished.wait(0.05)
    assert channel.held == 3
    received = [channel.get(timeout=HANG_GUARD) for _ in items]
    join(producer)
    assert produced == [True] and received == items
    assert channel.held == 0


def test_put_many_of_what_fits_is_one_hand_over():
    channel = Channel(8)
    items = [Delta(n) for n in range(5)]
    assert channel.put_many(items, 0)
    assert channel._items.qsize() == 1  # one list: one wake-up of the writer
    assert [channel.get_nowait() for _ in items] == items
    assert channel.get_nowait() is None


def test_put_many_on_a_full_channel_stalls_at_its_timeout():
    channel = Channel(2)
    assert channel.put_many([Delta(0), Delta(1)], 0)
    assert channel.put_many([Delta(2)], timeout=0.01) is False


def test_cancel_wakes_a_reader_blocked_in_put_many():
    channel = Channel(1)
    producer, produced, _ = run_in_thread(channel.put_many, [Delta(0), Delta(1), Delta(2)], None)
    assert channel.held == 1
    channel.cancel(UpstreamError("gone"))
    join(producer)
    assert produced == [False]
    failure = channel.get(timeout=HANG_GUARD)
    assert isinstance(failure, Failure) and failure.error.reason == "gone"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 8), sizes=st.lists(st.integers(1, 40), max_size=12), batch=st.booleans())
def test_put_many_items_arrive_exactly_once_and_in_order(capacity, sizes, batch):
    channel = Channel(capacity)
    reads, n = [], 0
    for size in sizes:
        reads.append([Delta(i) for i in range(n, n + size)])
        n += size
    reads.append([Done("stop")])
    sent = [item for read in reads for item in read]

    def produce():
        return all(channel.put_many(read, timeout=None) for read in reads)

    _drain_in_order(channel, sent, run_in_thread(produce), batch, capacity)


def test_put_many_racing_cancel_never_hangs_either_side():
    for round_ in range(200):  # bounded stress: cancel lands anywhere in the stream
        channel = Channel(2)
        items = [Delta(n) for n in range(30)]
        producer, _, _ = run_in_thread(channel.put_many, items, None)
        taken = 0
        while True:
            item = channel.get(timeout=HANG_GUARD)
            assert item is not None
            if isinstance(item, Failure):
                break
            taken += 1
            if taken == round_ % 31:
                channel.cancel()
            if taken == len(items):
                channel.cancel()
        join(producer)


def test_the_bound_is_capacity_items_with_fresh_credits_and_given_back_ones_alike():
    channel = Channel(3)
    assert channel.put(Delta(0), 0) and channel.put_many([Delta(1), Delta(2)], 0)
    assert channel.held == 3
    assert not channel.put(Delta(3), 0) and not channel.put_many([Delta(3)], 0)
    assert channel.get(0) == Delta(0) and channel.held == 2
    assert channel.put_many([Delta(3)], 0) and not channel.put(Delta(4), 0)
    assert [channel.get(0) for _ in range(3)] == [Delta(1), Delta(2), Delta(3)]
    assert channel.held == 0
    assert channel.put_many([Delta(5), Delta(6), Delta(7)], 0) and channel.held == 3


# --- put_now and when_credit: a reader on a pool worker never waits for room ---------------


def test_put_now_takes_what_has_room_and_never_waits():
    channel = Channel(3)
    items = [Delta(str(n)) for n in range(5)]
    assert channel.put_now(items) == 3
    assert channel.put_now(items[3:]) == 0  # full: nothing, at once
    assert channel.get(0) == Delta("0")
    assert channel.put_now(items[3:]) == 1
    assert [channel.get(0) for _ in range(3)] == [Delta("1"), Delta("2"), Delta("3")]
    channel.cancel()
    assert channel.put_now(items) == 0


def test_when_credit_calls_back_once_the_writer_takes_an_item():
    channel = Channel(1)
    assert channel.put_now([Delta("a")]) == 1
    calls: list[int] = []
    assert channel.when_credit(lambda: calls.append(1)) is True
    assert calls == []
    assert channel.get(0) == Delta("a")
    assert calls == [1]
    assert channel.put_now([Delta("b")]) == 1
    assert channel.get(0) == Delta("b")
    assert calls == [1]  # once: the callback is not kept after it ran


def test_when_credit_with_room_already_free_is_refused_so_the_reader_puts_now():
    channel = Channel(2)
    calls: list[int] = []
    assert channel.when_credit(lambda: calls.append(1)) is False
    assert channel.get_nowait() is None and calls == []  # not kept


def test_cancel_calls_the_waiting_reader_back_and_forget_takes_it_back():
    channel = Channel(1)
    channel.put_now([Delta("a")])
    calls: list[int] = []
    assert channel.when_credit(lambda: calls.append(1))
    assert channel.forget_credit_waiter() is True
    channel.cancel()
    assert calls == []
    other = Channel(1)
    other.put_now([Delta("a")])
    assert other.when_credit(lambda: calls.append(2))
    other.cancel()
    assert calls == [2]
    assert other.when_credit(lambda: calls.append(3)) is False  # cancelled: put (and see it) now


def test_stress_a_reader_that_waits_for_credits_is_called_back_exactly_once_each_time():
    """Bounded stress: a writer takes items while the reader puts without waiting and,
    when full, registers for a credit; every registration is answered exactly once (or
    refused because room came back), and every item arrives in order."""
    total = 3000
    channel = Channel(2)
    received: list[int] = []
    woken = threading.Semaphore(0)
    answered = [0]

    def writer() -> None:
        while len(received) < total:
            item = channel.get(HANG_GUARD)
            assert item is not None, "the reader stopped"
            received.append(int(item.content))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()

    def woke() -> None:
        answered[0] += 1
        woken.release()

    registered = 0
    sent = 0
    while sent < total:
        taken = channel.put_now([Delta(str(n)) for n in range(sent, min(sent + 3, total))])
        sent += taken
        if taken == 0 and channel.when_credit(woke):
            registered += 1
            assert woken.acquire(timeout=HANG_GUARD)
    thread.join(HANG_GUARD)
    assert not thread.is_alive()
    assert received == list(range(total))
    assert answered[0] == registered
