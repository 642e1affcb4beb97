"""Segment buffering: blocks from one INCRBY, prefetch, block-size adaptation, threads, processes, fork.

No timing asserts: the clock that drives adaptation is injected, and "prefetched before running dry"
is read from the buffer's statistics.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import date
from datetime import time as clock_time
from types import SimpleNamespace
from typing import Any

import pytest

from sa_redis_ids import Buffering, ConfigError, DayPurged, RedisIds, SequenceExhausted
from sa_redis_ids import buffering as buffered
from sa_redis_ids.bounds import BIGINT_MAX
from sa_redis_ids.buffering import BufferedGenerator, BufferStats, Segment, SegmentBuffer
from sa_redis_ids.generators.day_counter import DatedBlock
from sa_redis_ids.redis.nodes import RedisClock
from tests.conftest import Backend
from tests.support.days import shift_to_local
from tests.support.servers import RedisServer
from tests.support.uniqueness import (
    GeneratorSpec,
    draw_in_processes,
    draw_in_threads,
    duplicates,
)

StartServers = Callable[[int], list[RedisServer]]


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stats(generator: BufferedGenerator[Any]) -> BufferStats:
    found = generator.stats()
    assert found is not None, "the generator is not buffered"
    return found


def settle(generator: BufferedGenerator[Any]) -> None:
    assert generator.buffer is not None
    assert generator.buffer.settle(timeout=30), "a fetch did not finish in 30 s"


def draw_until_fetch(generator: BufferedGenerator[Any], clock: FakeClock, step: float) -> list[int]:
    """Draw one value at a time (moving ``clock`` by ``step`` before each) until a block arrives."""
    before = stats(generator).blocks_taken
    drawn: list[int] = []
    while stats(generator).blocks_taken == before:
        clock.now += step
        drawn.append(generator.next_id())
        settle(generator)
    return drawn


def counter_of(backend: Backend, generator: BufferedGenerator[Any]) -> int:
    return int(backend.client.get(generator.counter_key) or 0)


# -- behaviour on every backend ------------------------------------------------------------------


def test_buffered_sequence_hands_out_its_block_from_memory(backend: Backend) -> None:
    users = backend.ids().sequence("users", block=Buffering(100, max_block=100))
    assert [users.next_id() for _ in range(5)] == [1, 2, 3, 4, 5]
    assert stats(users).blocks_taken == 1
    assert counter_of(backend, users) == 100, "one INCRBY took the whole block"
    assert users.next_ids(3) == [6, 7, 8]
    assert stats(users).blocks_taken == 1, "a batch that fits the buffer costs no round trip"


def test_every_block_taken_is_issued_or_still_buffered(backend: Backend) -> None:
    ids = backend.ids()
    users = ids.sequence("users", block=Buffering(20, max_block=20))
    values = [users.next_id() for _ in range(95)] + users.next_ids(30)
    settle(users)
    found = stats(users)
    assert values[:95] == list(range(1, 96))
    assert len(set(values)) == 125
    assert set(values) <= set(range(1, found.ids_taken + 1))
    assert found.ids_issued == 125
    assert found.ids_taken == counter_of(backend, users) == found.ids_issued + found.ids_left
    assert found.ids_dropped == 0


def test_a_large_batch_is_fetched_directly_after_draining_the_buffer(ids: RedisIds) -> None:
    users = ids.sequence("users", block=Buffering(100, max_block=100, prefetch=None))
    first = users.next_id()
    batch = users.next_ids(1000)
    assert [first, *batch] == list(range(1, 1002))
    found = stats(users)
    assert found.blocks_taken == 2, "the rest of the block, then 901 values in one call"
    assert found.ids_left == 0
    assert users.next_id() == 1002


def test_prefetch_happens_before_the_buffer_runs_dry(ids: RedisIds) -> None:
    clock = FakeClock()
    users = ids.sequence("users", block=Buffering(100, max_block=100, clock=clock))
    assert users.next_id() == 1
    assert stats(users).waits == 1, "the very first call waits for the first block"
    draw_until_fetch(users, clock, 0.0)
    found = stats(users)
    assert found.prefetches == 1
    assert found.blocks_taken == 2
    assert found.ids_issued == 11, "the next block came after 10% of the first was used"
    assert found.ids_left == 89 + 100
    values = [users.next_id() for _ in range(189)]
    assert values == list(range(12, 201))
    assert stats(users).waits == 1, "no caller waited for Redis after the first block"


def test_block_size_doubles_when_fast_and_halves_when_slow(ids: RedisIds) -> None:
    clock = FakeClock()
    options = Buffering(100, min_block=25, max_block=800, target_seconds=10, clock=clock)
    users = ids.sequence("users", block=options)
    users.next_id()
    sizes = []
    for _ in range(5):  # no time passes: every block would last 0 s < 10 s
        draw_until_fetch(users, clock, 0.0)
        sizes.append(stats(users).block_size)
    assert sizes == [200, 400, 800, 800, 800]
    sizes = []
    for _ in range(7):  # one second per ID: a block of n lasts n s > 2 × 10 s until n is 25
        draw_until_fetch(users, clock, 1.0)
        sizes.append(stats(users).block_size)
    assert sizes == [400, 200, 100, 50, 25, 25, 25]
    for _ in range(3):  # 0.5 s per ID: 25 IDs last 12.5 s, within [10 s, 20 s]: the size stays
        draw_until_fetch(users, clock, 0.5)
        assert stats(users).block_size == 25
    values = users.next_ids(5000)
    assert len(set(values)) == 5000


def test_threads_share_one_buffer_without_duplicates_or_lost_blocks(backend: Backend) -> None:
    users = backend.ids().sequence("users", block=Buffering(50, max_block=400))
    values: list[list[int]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def work(slot: int) -> None:
        barrier.wait()
        for i in range(1500):
            if i % 100 == 0:
                values[slot].extend(users.next_ids(7))
            else:
                values[slot].append(users.next_id())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    settle(users)
    flat = [v for chunk in values for v in chunk]
    assert duplicates(flat) == {}
    found = stats(users)
    assert found.ids_issued == len(flat)
    assert found.ids_taken == counter_of(backend, users), "no block was taken and then lost"
    assert set(flat) <= set(range(1, found.ids_taken + 1))


def test_the_end_of_the_sequence_is_reached_with_smaller_blocks(ids: RedisIds) -> None:
    top = ids.sequence("top", start=BIGINT_MAX - 9, block=Buffering(4, max_block=4))
    values = [top.next_id() for _ in range(10)]
    assert values == list(range(BIGINT_MAX - 9, BIGINT_MAX + 1))
    with pytest.raises(SequenceExhausted):
        top.next_id()


def test_a_batch_past_the_end_of_the_sequence_raises_instead_of_coming_short(
    ids: RedisIds,
) -> None:
    top = ids.sequence("top", start=BIGINT_MAX - 9, block=Buffering(4, max_block=4, prefetch=None))
    with pytest.raises(SequenceExhausted):
        top.next_ids(12)  # 10 values left
    assert top.next_id() == BIGINT_MAX - 9
    with pytest.raises(SequenceExhausted):
        top.next_ids(10)  # 3 buffered and 6 in Redis
    assert stats(top).ids_dropped == 3, "the buffered values it took are gaps"
    assert top.next_ids(6) == list(range(BIGINT_MAX - 5, BIGINT_MAX + 1))


def test_dropped_values_are_gaps_never_reissued(ids: RedisIds) -> None:
    users = ids.sequence("users", block=Buffering(10, max_block=10, prefetch=None))
    assert users.next_ids(3) == [1, 2, 3]
    assert users.buffer is not None
    assert users.buffer.drop() == 7
    assert users.next_id() == 11


def test_a_block_fetched_before_a_drop_is_never_handed_out_after_it() -> None:
    counter = iter(range(1, 10_000))
    started, release = threading.Event(), threading.Event()

    def fetch(n: int) -> Segment[int]:
        values = [next(counter) for _ in range(n)]
        if values[0] > 1:  # taken from the source now, lands after the drop
            started.set()
            assert release.wait(30)
        return Segment(values)

    buffer = SegmentBuffer(fetch, Buffering(10, max_block=10).resolved(10**9))
    assert [buffer.next_id(), buffer.next_id()] == [1, 2]  # past the prefetch point
    assert started.wait(30), "the prefetch started"
    buffer.drop()
    release.set()
    assert buffer.settle(timeout=30)
    assert buffer.next_id() == 21, "the block 11..20 fetched before the drop is a gap"
    assert buffer.stats().ids_dropped == 10


def test_an_unbuffered_generator_has_no_stats(ids: RedisIds) -> None:
    assert ids.sequence("plain").stats() is None
    assert ids.sequence("plain").buffer is None


def test_same_buffering_gives_the_same_generator_and_other_buffering_is_refused(
    ids: RedisIds,
) -> None:
    users = ids.sequence("users", block=1000)
    assert ids.sequence("users", block=1000) is users
    assert ids.sequence("users", block=Buffering(1000, target_seconds=60)) is users, "60 == 60.0"
    with pytest.raises(ConfigError, match="already exists"):
        ids.sequence("users")
    with pytest.raises(ConfigError, match="already exists"):
        ids.sequence("users", block=500)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (0, "block=0"),
        (2.5, "block must be an int"),
        (Buffering(100, max_block=50), "max_block=50 is below block=100"),
        (Buffering(100, min_block=200), "min_block=200"),
    ],
)
def test_bad_buffer_options_are_config_errors(ids: RedisIds, block: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        ids.sequence("users", block=block)
    assert caught.value.namespace == "users"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefetch": 1.5}, "prefetch=1.5"),
        ({"target_seconds": 0}, "target_seconds=0"),
    ],
)
def test_buffering_refuses_bad_options_when_made(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Buffering(100, **options)


def test_a_block_larger_than_the_sequence_can_ever_issue_is_refused(ids: RedisIds) -> None:
    with pytest.raises(ConfigError, match="block=10"):
        ids.sequence("top", start=BIGINT_MAX - 4, block=10)


def test_default_max_block_is_bounded_by_capacity() -> None:
    assert Buffering(1000).resolved(BIGINT_MAX).max_block == 100_000
    assert Buffering(10).resolved(1_000_000).max_block == 1000, "0.1% of a small capacity"
    assert Buffering(10).resolved(9_999).max_block == 10, "never below block"


# -- expiring segments (what a date-prefixed buffer relies on) -----------------------------------


def test_an_expired_segment_is_dropped_and_the_next_block_is_fetched() -> None:
    clock = FakeClock()
    counter = iter(range(1, 10_000))
    lifetimes = iter([5.0, 5.0, None])

    def fetch(n: int) -> Segment[int]:
        return Segment([next(counter) for _ in range(n)], lifetime=next(lifetimes))

    options = Buffering(10, prefetch=None).resolved(10**9)
    buffer = SegmentBuffer(fetch, options, clock=clock, expiring=True)
    assert [buffer.next_id() for _ in range(3)] == [1, 2, 3]
    clock.now += 5.0
    assert buffer.next_id() == 11, "7 values of the expired segment were dropped"
    assert buffer.next_ids(2) == [12, 13]
    clock.now += 5.0
    assert buffer.next_ids(2) == [21, 22]
    found = buffer.stats()
    assert (found.blocks_dropped, found.ids_dropped, found.blocks_taken) == (2, 14, 3)


@pytest.mark.parametrize("gil", [True, False], ids=["gil", "free-threaded"])
@pytest.mark.parametrize("expiring", [False, True], ids=["plain", "expiring"])
def test_every_hot_path_shares_a_buffer_between_threads_without_losing_values(
    monkeypatch: pytest.MonkeyPatch, gil: bool, expiring: bool
) -> None:
    """Both the lock-free path (with a GIL) and the locked one (free-threaded builds), with and
    without segment deadlines, under a tiny thread switch interval."""
    monkeypatch.setattr(buffered, "GIL", gil)
    lock = threading.Lock()
    taken = [0]

    def fetch(n: int) -> Segment[int]:
        with lock:
            first = taken[0] + 1
            taken[0] += n
        return Segment(range(first, first + n), lifetime=0.001 if first % 3 == 0 else None)

    options = Buffering(7, max_block=64).resolved(10**9)
    buffer = SegmentBuffer(fetch, options, expiring=expiring)
    drawn: list[list[int]] = [[] for _ in range(8)]

    def work(slot: int) -> None:
        for i in range(2000):
            if i % 50 == 0:
                drawn[slot].extend(buffer.next_ids(i % 97))
            else:
                drawn[slot].append(buffer.next_id())

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(before)
    assert buffer.settle(timeout=30)
    flat = [v for chunk in drawn for v in chunk]
    assert duplicates(flat) == {}
    found = buffer.stats()
    assert found.ids_taken == taken[0]
    assert found.ids_issued == len(flat)
    assert len(set(range(1, taken[0] + 1)) - set(flat)) == found.ids_left + found.ids_dropped
    if not expiring:
        assert found.ids_dropped == 0


# -- DatePrefixed: a block never spans two days ----------------------------------------------------

DAY = date(2026, 11, 22)
NEXT_DAY = date(2026, 11, 23)


def test_a_date_prefixed_buffer_is_dropped_at_the_day_change(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices", block=Buffering(100, max_block=100))
    shift_to_local(invoices, DAY, clock_time(23, 59, 0))
    before = [invoices.next_id() for _ in range(5)]
    assert [invoices.parse(v).day for v in before] == [DAY] * 5
    assert [invoices.parse(v).counter for v in before] == [1, 2, 3, 4, 5]
    assert stats(invoices).ids_left == 95
    shift_to_local(invoices, NEXT_DAY, clock_time(0, 0, 1))
    after = invoices.next_id()
    assert invoices.parse(after).day == NEXT_DAY
    assert invoices.parse(after).counter == 1, "the new day's first block"
    found = stats(invoices)
    assert (found.blocks_dropped, found.ids_dropped) == (1, 95)


def test_a_block_prefetched_before_midnight_is_dropped_after_it(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices", block=Buffering(100, max_block=100))
    shift_to_local(invoices, DAY, clock_time(23, 59, 0))
    invoices.next_id()
    draw_until_fetch(invoices, FakeClock(), 0.0)  # the prefetched block is of DAY too
    assert stats(invoices).ids_left == 89 + 100
    shift_to_local(invoices, NEXT_DAY, clock_time(0, 0, 1))
    batch = invoices.next_ids(3)
    assert [(invoices.parse(v).day, invoices.parse(v).counter) for v in batch] == [
        (NEXT_DAY, 1),
        (NEXT_DAY, 2),
        (NEXT_DAY, 3),
    ]
    found = stats(invoices)
    assert (found.blocks_dropped, found.ids_dropped) == (2, 189)


def test_a_buffered_date_prefixed_day_keeps_its_capacity_for_other_processes(
    ids: RedisIds,
) -> None:
    small = ids.date_prefixed("small", length=12, block=10)  # 4 counter digits: 9,999 a day
    assert small.buffer is not None
    assert small.buffer.options.max_block == 10, "at most 0.1% of a day by default"
    values = small.next_ids(25)
    assert len(set(values)) == 25


def test_a_batch_past_the_end_of_a_day_raises_instead_of_coming_short(ids: RedisIds) -> None:
    tiny = ids.date_prefixed("tiny", length=9, block=Buffering(4, prefetch=None))  # 9 a day
    shift_to_local(tiny, DAY, clock_time(12, 0))
    with pytest.raises(SequenceExhausted):
        tiny.next_ids(12)
    assert [tiny.parse(v).counter for v in tiny.next_ids(9)] == list(range(1, 10))


def test_a_days_block_is_dropped_when_a_later_days_block_arrives(ids: RedisIds) -> None:
    clock = FakeClock()  # the local clock stands still: only the Redis clock steps past midnight
    invoices = ids.date_prefixed("invoices", block=Buffering(100, max_block=100, clock=clock))
    shift_to_local(invoices, DAY, clock_time(23, 59, 0))
    invoices.next_id()
    draw_until_fetch(invoices, clock, 0.0)
    shift_to_local(invoices, NEXT_DAY, clock_time(0, 0, 1))
    draw_until_fetch(invoices, clock, 0.0)  # the first block fetched after the step
    assert [invoices.parse(invoices.next_id()).day for _ in range(5)] == [NEXT_DAY] * 5


def test_a_days_block_expires_before_its_day_ends_by_the_redis_clock() -> None:
    clock = FakeClock()
    counter = iter(range(1, 10_000))

    def take_block(n: int) -> DatedBlock[int]:  # Redis read 0 ms: it may have been 0.999 ms
        return DatedBlock(DAY, [next(counter) for _ in range(n)], redis_now_ms=0, day_end_ms=1000)

    generator = SimpleNamespace(redis_clock=RedisClock(), _take_block=take_block)
    fetch, _ = buffered.day_source(generator)
    options = Buffering(10, prefetch=None).resolved(10**9)
    buffer = SegmentBuffer(fetch, options, clock=clock, expiring=True)
    assert buffer.next_id() == 1
    clock.now += 0.999
    assert buffer.next_id() == 11, "the block was dropped by 0.999 s after the request was sent"


def test_purging_a_day_drops_this_processes_buffered_blocks_of_it(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices", block=Buffering(100, max_block=100, prefetch=None))
    shift_to_local(invoices, DAY, clock_time(12, 0))
    invoices.next_id()
    assert invoices.purge_before(NEXT_DAY) == [DAY]
    assert stats(invoices).ids_left == 0
    with pytest.raises(DayPurged):
        invoices.next_id()


def test_a_block_of_a_retired_period_in_flight_is_dropped_when_it_lands() -> None:
    counter = iter(range(1, 10_000))
    started, release = threading.Event(), threading.Event()

    def fetch(n: int) -> Segment[int]:
        values = [next(counter) for _ in range(n)]
        if values[0] > 1:  # taken from the source now, lands after the period is retired
            started.set()
            assert release.wait(30)
        return Segment(values, lifetime=1e6, period_end=1000)

    options = Buffering(10, max_block=10).resolved(10**9)
    buffer = SegmentBuffer(fetch, options, expiring=True)
    assert [buffer.next_id(), buffer.next_id()] == [1, 2]  # past the prefetch point
    assert started.wait(30), "the prefetch started"
    assert buffer.end_periods(1000) == 8
    release.set()
    assert buffer.settle(timeout=30)
    assert buffer.stats().ids_left == 0, "the block 11..20 of the retired period was dropped"


# -- many processes, many nodes, fork -------------------------------------------------------------


@pytest.mark.slow
def test_eight_threads_in_four_processes_never_share_a_buffered_value(
    real_backend: Backend,
) -> None:
    spec = real_backend.spec("sequence", "users", block=Buffering(50, max_block=800))
    values = draw_in_processes(spec, processes=4, threads=8, per_thread=2500)
    assert len(values) == 4 * 8 * 2500
    assert duplicates(values) == {}
    taken = int(real_backend.client.get(real_backend.ids().sequence("users").counter_key))
    assert max(values) <= taken, "every value came from a block taken from Redis"


@pytest.mark.slow
def test_eight_threads_in_four_processes_never_share_a_buffered_date_prefixed_value(
    real_backend: Backend,
) -> None:
    spec = real_backend.spec("date_prefixed", "invoices", block=Buffering(50, max_block=800))
    values = draw_in_processes(spec, processes=4, threads=8, per_thread=1500)
    assert len(values) == 4 * 8 * 1500
    assert duplicates(values) == {}


@pytest.mark.slow
def test_buffered_batches_on_three_nodes_never_collide(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    spec = GeneratorSpec(
        {"urls": [s.url for s in servers]}, "buf", "sequence", "orders", {"block": 40}, batch=3
    )
    values = draw_in_processes(spec, processes=4, threads=8, per_thread=600)
    assert len(values) == 4 * 8 * 600
    assert duplicates(values) == {}
    assert {(v - 1) % 3 for v in values} == {0, 1, 2}, "blocks came from every node"
    in_one = draw_in_threads(spec, threads=8, per_thread=300)
    assert duplicates(values + in_one) == {}


def _forked(body: Callable[[], list[int]]) -> list[int]:
    """Run ``body`` in an ``os.fork()`` child and return the values it drew (JSON over a pipe)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        status = 0
        try:
            os.close(read_end)
            with os.fdopen(write_end, "w") as out:
                json.dump(body(), out)
        except BaseException:
            status = 1
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as source:
        text = source.read()
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed"
    values: list[int] = json.loads(text)
    return values


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_hands_out_the_parents_buffered_values(
    real_backend: Backend,
) -> None:
    users = real_backend.ids().sequence("users", block=Buffering(1000, max_block=1000))
    parent = [users.next_id() for _ in range(10)]

    def child() -> list[int]:
        found = stats(users)
        assert (found.ids_left, found.blocks_taken, found.waits) == (0, 0, 0)
        return [users.next_id() for _ in range(500)]

    in_child = _forked(child)
    parent += [users.next_id() for _ in range(990)]
    assert parent == list(range(1, 1001)), "the parent keeps its own buffer"
    assert len(in_child) == 500
    assert set(in_child).isdisjoint(parent)
    assert min(in_child) > 1000, "the child took a block of its own"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_a_prefetch_leaves_the_child_a_working_buffer(
    real_backend: Backend,
) -> None:
    users = real_backend.ids().sequence("users", block=Buffering(100, max_block=100))
    assert users.buffer is not None
    buffer = users.buffer
    source = buffer._fetch_source
    parent_pid = os.getpid()
    release = threading.Event()

    def slow_in_parent(n: int) -> Segment[int]:
        if os.getpid() == parent_pid and stats(users).blocks_taken >= 1:
            assert release.wait(30)
        return source(n)

    buffer._fetch_source = slow_in_parent
    parent = [users.next_id() for _ in range(11)]  # the 11th starts the prefetch, which waits
    assert buffer._fetching, "a prefetch is in flight at the fork"
    in_child = _forked(lambda: [users.next_id() for _ in range(250)])
    release.set()
    parent += [users.next_id() for _ in range(189)]
    assert duplicates(parent + in_child) == {}
    assert len(set(parent)) == 200
