"""A Redis that forgets: every strategy heals a lost or rewound node state above what it issued.

Each test takes values, then makes the node forget (its keys deleted, as a restart without
persistence or ``FLUSHALL`` does to them) or rewinds a counter (as a failover to a replica that was
behind does), and checks that nothing issued before comes back, that the heal is counted and
logged, and where a floor is given, that it is read once per process and node and on a rewind.
Runs on the backend table: fakeredis, a real Redis and a real Cluster.
"""

from __future__ import annotations

import logging
import os
import threading
import time as time_module
from datetime import date, time
from typing import Any

import pytest

from sa_redis_ids import ConfigError, RedisIds, SequenceExhausted
from sa_redis_ids.generators.highwater import PACE_SECONDS
from tests.conftest import Backend
from tests.support.days import shift_to_local
from tests.support.forking import child_call_status
from tests.support.uniqueness import duplicates

DAY = date(2031, 2, 3)
NOON = time(12)


class Floor:
    """A floor answering a fixed value and counting its calls."""

    def __init__(self, value: Any):
        self.value = value
        self.calls = 0

    def __call__(self, *day: date) -> Any:
        self.calls += 1
        return self.value


# -- sequence ----------------------------------------------------------------------------------


def test_a_sequence_counter_lost_resumes_above_what_this_process_issued(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    users = backend.ids().sequence("users", headroom=100)
    before = [users.next_id() for _ in range(20)] + users.next_ids(30)
    backend.forget()
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        after = users.next_ids(5)
    drift = after[0] - 151  # the pace times the mark's age, if the machine stalled (see highwater)
    assert 0 <= drift <= users.drift_most
    assert after == list(range(151 + drift, 156 + drift)), "guard 50 plus a headroom of 100"
    assert not set(before) & set(after)
    assert users.rewinds == 1
    assert "namespace users" in caplog.text and "state missing" in caplog.text
    assert users.next_id() == 156 + drift and users.rewinds == 1, "healed once"


def test_a_sequence_counter_set_back_is_raised_above_what_was_issued(backend: Backend) -> None:
    users = backend.ids().sequence("users", headroom=0)
    users.next_ids(40)
    backend.client.set(users.counter_key, 10)  # a failover to a replica that was behind
    assert users.next_id() == 41
    assert users.rewinds == 1


@pytest.mark.parametrize("factory", ["sequence", "date_prefixed"])
def test_a_heal_from_an_aged_mark_clears_what_others_drew_after_an_earlier_heal(
    backend: Backend, factory: str
) -> None:
    """Two losses; the process that heals the second one slept through the first. Its mark is
    old: the others healed above their own marks at the first loss and drew on from there. A heal
    of the old mark plus the headroom alone lands on their values; the node's pace, as this
    process saw it, says how far the counter can have moved since its mark."""
    busy = getattr(backend.ids(), factory)("orders")
    idle = getattr(backend.ids(), factory)("orders")
    idle.next_id()
    started = time_module.monotonic()
    busy.next_ids(5000)
    time_module.sleep(PACE_SECONDS)  # a pace is measured over at least this long
    idle.next_id()  # the pace: 5,000 values in this interval
    interval = time_module.monotonic() - started
    busy.next_ids(500)  # the idle process's mark is 500 behind the busy one's
    backend.forget()
    drawn = busy.next_ids(2000)  # healed above the busy mark, then 2,000 more
    assert busy.rewinds == 1
    backend.forget()
    time_module.sleep(interval)  # the idle mark is at least as old as the pace interval
    after = idle.next_ids(1000)
    assert idle.rewinds == 1
    assert min(after) > max(drawn)


def test_a_buffered_sequence_heals_above_its_blocks(backend: Backend) -> None:
    users = backend.ids().sequence("users", block=100)
    assert users.headroom == 2 * 32 * users.buffer.options.max_block  # type: ignore[union-attr]
    drawn = [users.next_id() for _ in range(250)]
    backend.forget()
    drawn += [users.next_id() for _ in range(5000)]  # past what the buffers held
    assert duplicates(drawn) == {}
    assert users.rewinds == 1


def test_a_sequence_floor_is_read_once_at_first_use_and_on_a_loss(backend: Backend) -> None:
    floor = Floor(500)
    users = backend.ids().sequence("users", floor=floor, headroom=0)
    assert users.next_ids(3) == [501, 502, 503]
    assert users.next_id() == 504
    assert floor.calls == 1
    assert users.rewinds == 1, "a missing counter below the table's values is healed"
    backend.forget()
    floor.value = 504  # the table now holds 504
    assert users.next_id() == 505
    assert floor.calls == 2
    assert users.rewinds == 2


def test_a_sequence_floor_raises_an_existing_counter_below_it(backend: Backend) -> None:
    backend.ids().sequence("users").next_ids(5)  # a counter at 5, but the table holds 900
    users = backend.ids().sequence("users", floor=Floor(900), headroom=10)
    assert users.next_id() == 911
    assert users.rewinds == 1


def test_a_sequence_floor_below_the_counter_changes_nothing(backend: Backend) -> None:
    backend.ids().sequence("users").next_ids(50)
    users = backend.ids().sequence("users", floor=Floor(20))
    assert users.next_id() == 51
    assert users.rewinds == 0


def test_a_sequence_floor_with_a_bad_answer_is_a_config_error(ids: RedisIds) -> None:
    users = ids.sequence("users", floor=Floor("12"))
    with pytest.raises(ConfigError, match=r"floor\(\) returned '12'"):
        users.next_id()


def test_headroom_and_floor_are_checked_and_compared(ids: RedisIds) -> None:
    with pytest.raises(ConfigError, match="headroom"):
        ids.sequence("a", headroom=-1)
    with pytest.raises(ConfigError, match="headroom"):
        ids.sequence("b", headroom=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="floor"):
        ids.sequence("c", floor=42)  # type: ignore[arg-type]
    ids.sequence("d", headroom=5)
    with pytest.raises(ConfigError, match="headroom"):
        ids.sequence("d", headroom=6)


# -- date-keyed ----------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", ["date_prefixed", "daily_code"])
def test_a_day_counter_lost_resumes_above_what_this_process_issued(
    backend: Backend, factory: str
) -> None:
    generator: Any = getattr(backend.ids(), factory)("orders", headroom=7)
    shift_to_local(generator, DAY, NOON)
    before = [generator.next_id() for _ in range(5)] + generator.next_ids(5)
    backend.forget()
    after = generator.next_ids(3)
    drift = generator.parse(after[0]).counter - 18  # see the sequence's test above
    assert 0 <= drift <= generator.drift_most
    assert [generator.parse(v).counter for v in after] == [18 + drift, 19 + drift, 20 + drift]
    assert not set(before) & set(after)
    assert generator.rewinds == 1


@pytest.mark.parametrize("factory", ["date_prefixed", "daily_code"])
def test_a_day_counter_set_back_is_raised(backend: Backend, factory: str) -> None:
    generator: Any = getattr(backend.ids(), factory)("orders", headroom=0)
    shift_to_local(generator, DAY, NOON)
    generator.next_ids(30)
    if factory == "date_prefixed":
        backend.client.hset(generator.keys.key("dp"), "20310203", 3)
    else:
        backend.client.set(generator.keys.key("dc", "20310203"), 3, keepttl=True)
    assert generator.parse(generator.next_id()).counter == 31
    assert generator.rewinds == 1


def test_a_guard_of_another_day_does_not_touch_a_new_day(backend: Backend) -> None:
    codes = backend.ids().daily_code("orders", headroom=0)
    shift_to_local(codes, DAY, NOON)
    codes.next_ids(40)
    shift_to_local(codes, date(2031, 2, 4), NOON)
    assert codes.next_id() == "IS203102040001"
    assert codes.rewinds == 0


def test_a_buffered_date_prefixed_generator_heals_above_its_blocks(backend: Backend) -> None:
    invoices = backend.ids().date_prefixed("invoices", block=50)
    shift_to_local(invoices, DAY, NOON)
    drawn = [invoices.next_id() for _ in range(120)]
    backend.forget()
    drawn += [invoices.next_id() for _ in range(3000)]  # past what the buffers held
    assert duplicates(drawn) == {}
    assert invoices.rewinds == 1


# -- snowflake -------------------------------------------------------------------------------------


def test_a_snowflake_state_lost_after_borrowing_ahead_repeats_nothing(backend: Backend) -> None:
    orders = backend.ids().snowflake("orders", tolerance_ms=0, headroom=0)
    before = []
    for _ in range(5):  # 5 × 20,000 IDs borrow about 100 ms ahead of the clock
        before += orders.next_ids(20_000)
    backend.forget()
    after = orders.next_ids(20_000)
    assert min(after) > max(before)
    assert orders.rewinds == 1


def test_a_snowflake_state_set_back_is_raised(backend: Backend) -> None:
    orders = backend.ids().snowflake("orders", headroom=0)
    before = orders.next_ids(3000)
    state = orders.state_key
    last = int(backend.client.hget(state, "ms"))
    backend.client.hset(state, mapping={"ms": last - 500, "c": 0})
    assert orders.next_id() > max(before)
    assert orders.rewinds == 1


def test_a_snowflake_floor_puts_new_ids_above_the_tables(ids: RedisIds) -> None:
    reference = ids.snowflake("reference")
    future = reference.layout.compose(reference.parse(reference.next_id()).ms + 60_000, 0, 5)
    floor = Floor(future)
    orders = ids.snowflake("orders", floor=floor, headroom=0)
    assert orders.next_id() > future
    assert orders.rewinds == 1, "a node state below the table's highest ID is a rewind"
    assert floor.calls == 1
    assert orders.next_id() > future and floor.calls == 1


def test_a_snowflake_floor_of_another_layout_is_a_config_error(ids: RedisIds) -> None:
    orders = ids.snowflake("orders", layout="js_safe", floor=Floor(2**62))
    with pytest.raises(ConfigError, match="not an ID of this layout"):
        orders.next_id()


# -- short IDs ------------------------------------------------------------------------------------


def test_a_short_id_bitmap_lost_gives_out_none_of_this_processes_values(
    backend: Backend,
) -> None:
    pool = backend.ids().short_id("codes", pool_size=400, offset=1000)
    before = pool.next_ids(150) + [pool.next_id() for _ in range(50)]
    backend.forget()
    after = pool.next_ids(200)
    assert not set(before) & set(after)
    assert pool.rewinds == 1
    with pytest.raises(SequenceExhausted):
        pool.next_id()  # all 400 are taken again: the pool is full


def test_a_short_id_bitmap_lost_after_batches_of_runs_gives_out_none_of_them(
    backend: Backend,
) -> None:
    pool = backend.ids().short_id("codes", pool_size=3000, offset=1000)
    before = pool.next_ids(1000) + pool.next_ids(700)  # batches that take runs of positions
    backend.forget()
    after = pool.next_ids(1300)
    assert not set(before) & set(after)
    assert sorted(before + after) == list(range(1000, 4000))
    with pytest.raises(SequenceExhausted):
        pool.next_id()


def test_a_released_short_id_is_not_marked_again_after_a_loss(backend: Backend) -> None:
    pool = backend.ids().short_id("codes", pool_size=50, offset=0)
    taken = pool.next_ids(50)
    assert pool.release(taken[0])
    backend.forget()
    assert pool.next_ids(1) == [taken[0]]


def test_a_short_id_floor_marks_the_tables_values_taken_once(backend: Backend) -> None:
    used = list(range(2000, 2300))
    floor = Floor(used)
    pool = backend.ids().short_id("codes", pool_size=400, offset=2000, floor=floor)
    issued = pool.next_ids(100)
    assert set(issued) == set(range(2300, 2400))
    assert floor.calls == 1
    assert pool.rewinds == 1, "the table's values were missing from the bitmap"
    backend.forget()
    floor.value = used + issued
    with pytest.raises(SequenceExhausted):
        pool.next_id()
    assert floor.calls == 2
    assert pool.rewinds == 2


def test_a_short_id_floor_must_be_an_iterable_of_ints(ids: RedisIds) -> None:
    with pytest.raises(ConfigError, match="iterable"):
        ids.short_id("a", floor=Floor(12)).next_id()
    with pytest.raises(ConfigError, match="returned -1"):
        ids.short_id("b", floor=Floor([-1])).next_id()


# -- fork ---------------------------------------------------------------------------------------


def test_a_child_forked_while_a_thread_reads_the_floor_does_not_hang(
    real_backend: Backend,
) -> None:
    parent = os.getpid()
    reading, release = threading.Event(), threading.Event()

    def floor() -> int:
        if os.getpid() == parent:
            reading.set()
            release.wait(10)  # the parent's first call holds the first-use lock meanwhile
        return 0

    users = real_backend.ids().sequence("users", floor=floor)
    first = threading.Thread(target=users.next_id)
    first.start()
    assert reading.wait(5)
    assert child_call_status(users.next_id, release) == 0
    first.join(10)


def test_a_short_id_heal_with_a_floor_keeps_this_processes_uncommitted_values(
    backend: Backend,
) -> None:
    committed = list(range(0, 200, 2))  # the table: every even value
    pool = backend.ids().short_id("codes", pool_size=300, offset=0, floor=Floor(committed))
    mine = pool.next_ids(60)  # odd values below 200 or any value from 200: not in the table
    assert not set(mine) & set(committed)
    backend.forget()
    after = pool.next_ids(300 - 100 - 60)  # all that is left
    assert not set(after) & (set(committed) | set(mine))


def test_a_short_id_bitmap_lost_alone_is_noticed(backend: Backend) -> None:
    pool = backend.ids().short_id("codes", pool_size=200, offset=0)
    before = pool.next_ids(120)
    backend.client.delete(pool.bitmap_key)  # evicted; its running total survived
    after = pool.next_ids(80)
    assert not set(before) & set(after)
    assert pool.rewinds == 1


def test_a_vanished_day_with_a_floor_of_zero_is_seeded_above_the_headroom(
    backend: Backend,
) -> None:
    codes = backend.ids().daily_code("orders", floor=Floor(0), headroom=30)
    shift_to_local(codes, DAY, NOON)
    codes.next_ids(5)  # issued but never committed: the table's floor stays 0
    backend.client.delete(codes.keys.key("dc", "20310203"))
    newcomer = backend.ids().daily_code("orders", floor=Floor(0), headroom=30)
    shift_to_local(newcomer, DAY, NOON)
    assert newcomer.parse(newcomer.next_id()).counter == 31
