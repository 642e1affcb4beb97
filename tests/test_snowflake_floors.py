"""Snowflake floors bound the state from below and nothing more.

A floor (``floor=``, or the column a generator is bound to) is the highest ID a table holds. Rows
of the state's own last milliseconds are not a loss: the next ID simply lies above the floor, at
most one millisecond past the later of the floor's millisecond and the Redis clock, and nothing
is healed, logged or counted. A loss (the state missing, below what this process received, or on
a node that moved) still heals with the headroom, logs and counts, once per process that finds
it. Each test plays processes with separate ``RedisIds`` on one key prefix (a new ``RedisIds``
has no marks: a process that received nothing). On the backend table.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import pytest

from sa_redis_ids import SnowflakeCompatWarning
from sa_redis_ids.generators.snowflake import SnowflakeGenerator
from tests.conftest import Backend
from tests.support.uniqueness import duplicates

REWINDS = "sa_redis_ids.rewinds"


def redis_ms(generator: SnowflakeGenerator, backend: Backend) -> int:
    """The Redis time on the node holding the generator's state, in ms since its layout's epoch."""
    now = backend.client.eval(
        "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)",
        1,
        generator.state_key,
    )
    return int(now) - generator.layout.epoch_ms


def state(generator: SnowflakeGenerator, backend: Backend) -> tuple[int, int]:
    found = backend.client.hmget(generator.state_key, "ms", "c")
    return int(found[0]), int(found[1])


def fixed(value: int) -> Callable[[], int]:
    return lambda: value


def since_epoch(generator: SnowflakeGenerator, value: int) -> tuple[int, int]:
    """The (millisecond since the layout's epoch, sequence) of an ID."""
    parts = generator.parse(value)
    return parts.ms - generator.layout.epoch_ms, parts.sequence


def test_a_floor_in_the_states_own_millisecond_is_no_loss(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """The table's highest ID lies in the state's last millisecond (rows of a moment ago): a new
    process reading it as its floor counts that millisecond as used and goes on from the next
    one (or the clock), without a heal, a log line or a rewind."""
    first = backend.ids().snowflake("orders")
    held = first.next_ids(5)
    last_ms, last_slot = state(first, backend)
    assert (last_ms, last_slot) == since_epoch(first, held[-1]) and last_slot < 1023
    later = backend.ids().snowflake("orders", floor=fixed(held[-1]))
    with caplog.at_level(logging.WARNING, logger=REWINDS):
        after = later.next_ids(5)
    now = redis_ms(later, backend)
    assert min(after) > max(held)
    assert later.rewinds == 0 and first.rewinds == 0
    assert not [r for r in caplog.records if r.name == REWINDS]
    assert since_epoch(later, after[0])[0] <= max(last_ms + 1, now), "not a second ahead"
    assert state(later, backend)[0] <= max(last_ms + 1, now)


def test_a_floor_ahead_of_the_state_and_the_clock_is_passed_by_one_millisecond(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A table holding an ID a minute ahead (a generator before this one, its clock ahead): the
    next ID is the first slot of the millisecond after the floor's, the state follows it, and
    nothing was lost that any process knows of."""
    first = backend.ids().snowflake("orders")
    before = first.next_ids(3)
    floor_ms = since_epoch(first, before[-1])[0] + 60_000
    top = first.layout.compose(first.layout.epoch_ms + floor_ms, 53, 7)
    later = backend.ids().snowflake("orders", floor=fixed(top))
    with caplog.at_level(logging.WARNING, logger=REWINDS):
        after = later.next_ids(3)
    assert since_epoch(later, after[0]) == (floor_ms + 1, 0)
    assert state(later, backend) == (floor_ms + 1, 2)
    assert later.rewinds == 0
    assert not [r for r in caplog.records if r.name == REWINDS]
    assert first.next_id() > max(after), "a process that drew before goes on above it"
    assert first.rewinds == 0


def test_a_floor_below_the_state_changes_nothing(backend: Backend) -> None:
    first = backend.ids().snowflake("orders")
    old = first.next_ids(3)
    newest = first.next_id()
    later = backend.ids().snowflake("orders", floor=fixed(old[0]))
    assert since_epoch(later, later.next_id()) >= since_epoch(first, newest)
    assert later.rewinds == 0


def test_processes_starting_one_after_another_never_push_the_state_ahead(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Each new process reads the table's highest ID (the last ID the one before it drew) as its
    floor: the state stays within a millisecond of the later of the floor and the clock, where
    each heal used to add a second."""
    drawn = backend.ids().snowflake("orders").next_ids(10)
    with caplog.at_level(logging.WARNING, logger=REWINDS):
        for _ in range(20):
            process = backend.ids().snowflake("orders", floor=fixed(max(drawn)))
            floor_ms = since_epoch(process, max(drawn))[0]
            drawn += process.next_ids(10)
            assert process.rewinds == 0
            assert state(process, backend)[0] <= max(floor_ms + 1, redis_ms(process, backend))
    assert not [r for r in caplog.records if r.name == REWINDS]
    assert duplicates(drawn) == {}
    assert drawn == sorted(drawn)


def test_a_lost_state_is_healed_logged_and_counted_once_by_each_process_that_finds_it(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Process A drew IDs a minute ahead of the clock (borrowed milliseconds), above what the
    table holds; the state is deleted. A new process B, with the table's floor, finds the state
    missing: a loss, healed above the later of the floor and the clock plus the headroom. A then
    finds the state below what it received: a loss for A, healed above its mark. Each counts and
    logs one rewind, later calls none, and no ID comes twice."""
    a = backend.ids().snowflake("orders")
    committed = a.next_ids(50)  # what the table holds
    ahead = state(a, backend)[0] + 60_000
    backend.client.hset(a.state_key, mapping={"ms": ahead, "c": 7})
    held = a.next_ids(50)  # drawn, not in the table
    backend.client.delete(a.state_key)
    b = backend.ids().snowflake("orders", floor=fixed(max(committed)))
    with caplog.at_level(logging.WARNING, logger=REWINDS):
        from_b = b.next_ids(50)
        assert (a.rewinds, b.rewinds) == (0, 1)
        from_a = a.next_ids(50)
        assert (a.rewinds, b.rewinds) == (1, 1)
        rest = b.next_ids(50) + a.next_ids(50) + b.next_ids(50)
    assert (a.rewinds, b.rewinds) == (1, 1)
    logged = [r for r in caplog.records if r.name == REWINDS]
    assert len(logged) == 2 and all("namespace orders" in r.getMessage() for r in logged)
    assert min(from_b) > max(committed) and min(from_a) > max(held)
    assert duplicates(committed + held + from_b + from_a + rest) == {}


def test_a_state_below_this_processes_mark_is_a_loss_even_under_a_higher_floor(
    backend: Backend,
) -> None:
    """A state set back below what this process received is a loss, also when the floor read
    on it lies higher still: healed with the headroom above this process's mark (not merely
    raised to the floor) and counted. The floor bounds the heal from below and adds no headroom
    of its own (it may show IDs other processes issued after the loss, healing it)."""
    table = [0]
    orders = backend.ids().snowflake("orders", floor=lambda: table[0], headroom=500)
    before = orders.next_ids(100)
    last_ms = state(orders, backend)[0]
    table[0] = orders.layout.compose(orders.layout.epoch_ms + last_ms + 10, 0, 0)
    backend.client.hset(orders.state_key, mapping={"ms": last_ms - 200, "c": 0})
    after = orders.next_ids(10)
    assert orders.rewinds == 1
    assert min(after) > max(before)
    assert since_epoch(orders, after[0])[0] > last_ms + 500, "the mark plus the headroom"
    # A floor past the mark plus the headroom: the heal lands just past the floor.
    last_ms = state(orders, backend)[0]
    table[0] = orders.layout.compose(orders.layout.epoch_ms + last_ms + 2_000, 0, 0)
    backend.client.hset(orders.state_key, mapping={"ms": last_ms - 200, "c": 0})
    assert since_epoch(orders, orders.next_id())[0] == last_ms + 2_001
    assert orders.rewinds == 2


def test_a_takeover_without_a_floor_repeats_the_old_ids_and_with_one_none(
    backend: Backend,
) -> None:
    """Old writers of the classic layout, their clock a minute ahead of this Redis, left IDs in
    the Redis clock's next minute (sequence 0 of each millisecond, shard 0). A new namespace
    starts at the Redis clock: without ``floor=`` a burst issues some of them again; with
    ``floor=`` the highest old ID, none (the first start heals once above it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SnowflakeCompatWarning)
        plain = backend.ids().snowflake("plain", layout="compat")
        now = redis_ms(plain, backend)  # (the compat epoch is 0: Unix milliseconds)
        old = {plain.layout.compose(now + ahead, 0, 0) for ahead in range(1, 60_001)}
        taken_over = backend.ids().snowflake("taken", layout="compat", floor=fixed(max(old)))
    assert set(plain.next_ids(20_000)) & old, "IDs of the old writers issued again"
    assert not set(taken_over.next_ids(20_000)) & old
    assert taken_over.rewinds == 1 and plain.rewinds == 0
