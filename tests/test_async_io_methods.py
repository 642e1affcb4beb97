"""Every I/O method of every strategy is a coroutine on the asyncio front end.

A generator writes each method that talks to Redis once, as a plan
(:func:`sa_redis_ids.redis.plans.planned`); the sync generator runs it at once and
:class:`~sa_redis_ids.generators.aio.AsyncIdGenerator` awaits it. The first tests enumerate the
public methods of every built-in strategy's class: each is either such a plan or does no I/O at
all (its source touches no client, node or plan), so a new I/O method cannot slip through as a
sync method on an async client. The others run every coroutine on fakeredis, a real Redis and a
real Cluster, and read back with the sync front end what they did.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from sa_redis_ids import ConfigError, DayPurged
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.buffering import BufferStats
from sa_redis_ids.generators.registry import strategies
from sa_redis_ids.generators.short_id import ShortIdStats
from sa_redis_ids.redis.plans import plan_of
from tests.conftest import BACKENDS, Backend
from tests.support.clients import async_ids_on

T = TypeVar("T")

FRONT_OWN = {"next_id", "next_ids", "stats"}
"""Methods the front end defines itself: a buffered generator's serve its (asyncio) buffer."""
NO_IO = {
    "claim_for": "the claim text for a node",
    "compose": "a value from its parts",
    "compose_all": "values from their parts",
    "day_and_counter": "the parts of a value",
    "highest_counter": "the highest counter among given values of a day",
    "day_bounds": "the lowest and highest value of a day",
    "day_range": "the days a generator can issue",
    "id_range": "the values of a time range",
    "locate": "the node and bit of a pool value",
    "parse": "the parts of a value",
    "share_size": "a node's share of the pool",
    "slots_per_ms": "a node's sequence values per ms",
    "value_at": "the pool value of a node's bit",
}
"""Public methods that do no I/O, and what they compute."""
IO_MARKS = (
    "yield",
    ".client",
    "run_plan",
    "_nodes.on",
    "_nodes.each",
    "_nodes.call",
    "Command(",
    "Run(",
)
"""What the source of a method that talks to Redis contains."""


def _classes() -> list[Any]:
    return [each.generator for each in strategies() if each.generator is not None]


def _public_methods(cls: type) -> list[str]:
    return [
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_")
        and callable(member)
        and not isinstance(inspect.getattr_static(cls, name), (property, type))
    ]


@pytest.mark.parametrize("cls", _classes(), ids=lambda cls: cls.__name__)
def test_every_public_method_is_a_plan_or_does_no_io(cls: type) -> None:
    for name in _public_methods(cls):
        method = getattr(cls, name)
        if plan_of(method) is not None or name in FRONT_OWN:
            continue
        assert name in NO_IO, f"{cls.__name__}.{name}: neither a plan (@planned) nor known pure"
        source = inspect.getsource(method)
        touched = [mark for mark in IO_MARKS if mark in source]
        assert not touched, f"{cls.__name__}.{name} is listed as pure but has {touched}"


def test_the_enumeration_finds_the_io_methods_of_each_kind() -> None:
    planned = {
        cls.__name__: {n for n in _public_methods(cls) if plan_of(getattr(cls, n))}
        for cls in _classes()
    }
    day_keyed = {"days_present", "ensure_at_least", "precreate", "purge_before", "purged_through"}
    assert {"is_taken", "release", "reserve", "stats"} <= planned["ShortIdGenerator"]
    assert day_keyed <= planned["DatePrefixedGenerator"]
    assert day_keyed <= planned["DailyCodeGenerator"]
    assert "ensure_at_least" in planned["SequenceGenerator"]
    assert {"next_id", "next_ids"} <= planned["SnowflakeGenerator"]
    for names in planned.values():
        assert {"check_claims", "recorded_claims"} <= names


OPTIONS: dict[str, dict[str, Any]] = {
    "short_id": {"pool_size": 1000, "offset": 1000},
    "date_prefixed": {"block": 10},
    "sequence": {"block": 10},
}


@pytest.mark.parametrize("cls", _classes(), ids=lambda cls: cls.__name__)
def test_the_asyncio_front_has_a_coroutine_for_every_io_method(cls: type) -> None:
    (chosen,) = [each for each in strategies() if each.generator is cls]
    ids = AsyncRedisIds.embedded()
    front = ids.generator(chosen.name, "ns", **OPTIONS.get(chosen.name, {}))
    for name in _public_methods(cls):
        found = getattr(front, name)
        if plan_of(getattr(cls, name)) is not None or name in ("next_id", "next_ids"):
            assert inspect.iscoroutinefunction(found), f"{cls.__name__}.{name} on asyncio"
        else:
            assert not inspect.iscoroutinefunction(found), name
    asyncio.run(ids.aclose())


# -- every coroutine on every backend ---------------------------------------------------------


def _run(backend: Backend, body: Callable[[AsyncRedisIds], Awaitable[T]]) -> T:
    async def main() -> T:
        ids = async_ids_on(backend)
        try:
            return await body(ids)
        finally:
            await ids.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_short_id_pool_methods_are_awaited(backend: Backend) -> None:
    async def body(ids: AsyncRedisIds) -> tuple[int, list[Any]]:
        pool = ids.short_id("members", pool_size=1000, offset=1000)
        value = await pool.next_id()
        seen: list[Any] = [await pool.is_taken(value), await pool.stats()]
        seen += [await pool.release(value), await pool.is_taken(value)]
        seen += [await pool.reserve([1000, 1001, 1001]), await pool.stats()]
        seen += [await pool.check_claims(), await pool.recorded_claims()]
        return value, seen

    value, seen = _run(backend, body)
    taken, stats, released, still, reserved, after, checked, claims = seen
    assert taken is True and released is True and still is False
    assert stats == ShortIdStats(issued=1, free=999, fill_ratio=0.001)
    assert reserved == 2 and after.issued == 2
    assert checked is None
    assert [claim for _, claim in claims] == ["0/1|short_id:pool_size=1000,offset=1000"]
    sync = backend.ids().short_id("members", pool_size=1000, offset=1000)
    assert sync.is_taken(1000) and sync.is_taken(1001)
    assert sync.is_taken(value) == (value in (1000, 1001))
    assert sync.stats().issued == 2


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_sequence_ensure_at_least_and_claims_are_awaited(backend: Backend) -> None:
    backend.ids().sequence("other", start=5).next_id()  # records a claim of start=5

    async def body(ids: AsyncRedisIds) -> list[Any]:
        users = ids.sequence("users")
        raised = await users.ensure_at_least(100)
        seen: list[Any] = [raised, await users.next_id(), users.stats()]
        with pytest.raises(ConfigError, match="start=5"):
            await ids.sequence("other", start=1).ensure_at_least(10)
        with pytest.raises(ConfigError, match="start=5"):
            await ids.sequence("other", start=1).check_claims()
        return seen

    raised, after, stats = _run(backend, body)
    assert [(before, now) for _, before, now in raised] == [(None, 100)]
    assert after == 101 and stats is None
    assert backend.ids().sequence("users").next_id() == 102


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_snowflake_takes_shard_on_asyncio(backend: Backend) -> None:
    async def body(ids: AsyncRedisIds) -> tuple[int, list[int]]:
        orders = ids.snowflake("orders")
        with pytest.raises(ValueError, match="shard"):
            await orders.next_id(shard=1 << 12)
        return await orders.next_id(shard=3), await orders.next_ids(4, shard=5)

    one, many = _run(backend, body)
    sync = backend.ids().snowflake("orders")
    assert sync.parse(one).shard == 3
    assert [sync.parse(value).shard for value in many] == [5] * 4
    assert many == sorted(set(many)) and one not in many


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_daily_code_maintenance_is_awaited(backend: Backend) -> None:
    async def body(ids: AsyncRedisIds) -> list[Any]:
        codes = ids.daily_code("orders", code_prefix="IS", digits=4)
        first = await codes.next_id()
        (day,) = await codes.days_present()
        seen: list[Any] = [first, day, await codes.purged_through()]
        raised = await codes.ensure_at_least(codes.compose(day, 50))
        seen += [raised, await codes.next_id(), await codes.precreate(day + timedelta(days=1))]
        seen += [await codes.purge_before(day + timedelta(days=1)), await codes.purged_through()]
        return seen

    first, day, unpurged, raised, after, created, purged, marker = _run(backend, body)
    assert first.endswith("0001") and unpurged is None
    assert [(before, now) for _, before, now in raised] == [(1, 50)]
    assert after.endswith("0051") and created is True
    assert purged == [day] and marker == day
    sync = backend.ids().daily_code("orders", code_prefix="IS", digits=4)
    assert sync.days_present() == [day + timedelta(days=1)]
    assert sync.purged_through() == day


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_purge_on_asyncio_drops_the_asyncio_buffer_of_the_purged_day(backend: Backend) -> None:
    async def body(ids: AsyncRedisIds) -> list[Any]:
        invoices = ids.date_prefixed("invoices", block=10)
        first = await invoices.next_id()
        assert invoices.generator.parse(first).counter == 1
        stats = invoices.stats()
        (day,) = await invoices.days_present()
        purged = await invoices.purge_before(day + timedelta(days=1))
        with pytest.raises(DayPurged):  # nothing of the purged day is served from the buffer
            await invoices.next_id()
        return [stats, day, purged, invoices.stats()]

    stats, day, purged, after = _run(backend, body)
    assert isinstance(stats, BufferStats) and stats.ids_left == 9
    assert purged == [day]
    assert after.ids_dropped == 9 and after.ids_left == 0


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_sync_lock_call_on_asyncio_clients_points_at_async_with(backend: Backend) -> None:
    name = f"lock-{uuid.uuid4().hex[:8]}"

    async def body(ids: AsyncRedisIds) -> int:
        lock = ids.lock(name, timeout=1)
        for call in (lock.acquire, lock.release, lock.extend):
            with pytest.raises(ConfigError, match=r"async with ids\.lock"):
                call()
        with pytest.raises(ConfigError, match="async with"), ids.lock(name):
            pass  # pragma: no cover - never entered
        async with ids.lock(name) as lease:
            return lease.fencing_token

    assert _run(backend, body) == 1
